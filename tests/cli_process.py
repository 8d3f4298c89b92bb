"""Child processes that Ctrl-C (SIGINT) reaches, for the tests that send it.

A shell that starts a command in the background (``pytest ... &``, many CI runners) starts
it with SIGINT ignored, and every child inherits that: Python then installs no
KeyboardInterrupt handler, and a test that sends SIGINT waits for a process that never
stops. The commands here restore Python's handler before anything else runs. Check with

    bash -c 'trap "" INT; python -m pytest tests/algorithms/batchppo/test_cli.py -k ctrl_c'

(``timeout CMD`` resets the signals of CMD, so put it outside the ``bash -c``).
"""

from __future__ import annotations

import sys

__all__ = ["RESTORE_CTRL_C", "batchenv_command", "python_command"]

#: The first line of a child's code: Python's own SIGINT handler, whatever was inherited.
RESTORE_CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def python_command(code: str, *args: str) -> list[str]:
    """``python -c CODE ARGS`` with Ctrl-C restored first."""
    return [sys.executable, "-c", RESTORE_CTRL_C + code, *args]


def batchenv_command(*args: str) -> list[str]:
    """``python -m batchenv.cli ARGS`` with Ctrl-C restored first."""
    run = "import runpy; runpy.run_module('batchenv.cli', run_name='__main__', alter_sys=True)"
    return python_command(run, *args)
