"""What every ``batchenv`` command shares: counts written as ``2e6``, the one-line error,
and the line ``batchenv evaluate`` prints for any algorithm.

A usage error (a bad value, a missing run, an env id that does not exist) prints one line
``batchenv COMMAND: error: WHAT`` on stderr and exits with status 2 before anything is
written; a failure while running exits with status 1, and Ctrl-C with 130.

    >>> whole_number("2e6")
    2000000
    >>> evaluation_line("runs/a", step=400_000, mean_return=11.0, episodes=2, mean_length=11.0)
    'runs/a: mean return 11.00 over 2 episodes (mean length 11.0) at step 400,000'
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
import typing
from collections.abc import Iterator
from pathlib import Path

from batchenv.run_dir import CHECKPOINT_NAME, CONFIG_NAME

__all__ = [
    "USAGE_ERROR",
    "OneLineParser",
    "ctrl_c_held",
    "evaluation_line",
    "fail",
    "optional_whole_number",
    "unsaved_interrupt_line",
    "whole_number",
]

#: The exit status of a command refused before it ran (argparse's, too).
USAGE_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its usage errors in one line, ``PROG: error: WHAT``, and exit
    status 2, where argparse prints its whole usage block first. A missing or unknown
    argument gets ``(--help after the command lists its arguments)`` after it. The
    subcommands' parsers are of this class too."""

    def error(self, message: str) -> typing.NoReturn:
        if message.startswith(_ARGUMENT_ERRORS):
            message = f"{message} (--help after the command lists its arguments)"
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


#: argparse's messages about which arguments were given, rather than their values.
_ARGUMENT_ERRORS = ("the following arguments are required", "unrecognized arguments")


def whole_number(text: str) -> int:
    """An argparse type: an integer written as ``2000000``, ``2_000_000`` or ``2e6``."""
    try:
        value = float(text) if any(char in text.lower() for char in ".e") else int(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(
            f"expected a whole number such as 2000000 or 2e6, got {text!r}"
        )
    return int(value)


def optional_whole_number(text: str) -> int | None:
    """:func:`whole_number`, or None for ``none``."""
    return None if text.strip().lower() == "none" else whole_number(text)


def fail(command: str, error: Exception | str) -> int:
    """Print ``batchenv COMMAND: error: ERROR`` on stderr; the usage-error exit status."""
    print(f"batchenv {command}: error: {error}", file=sys.stderr)
    return USAGE_ERROR


def evaluation_line(
    run_dir: str | os.PathLike,
    *,
    step: int,
    mean_return: float,
    episodes: int,
    mean_length: float,
) -> str:
    """What ``batchenv evaluate`` prints: the checkpoint's mean return, its episodes and
    the env step at which it was saved."""
    return (
        f"{run_dir}: mean return {mean_return:.2f} over {episodes} episodes "
        f"(mean length {mean_length:.1f}) at step {step:,}"
    )


def unsaved_interrupt_line(algorithm: str, run_path: str | os.PathLike) -> str:
    """What ``batchenv train ALGORITHM`` says when Ctrl-C stopped it before it saved a
    checkpoint: the run directory was not made yet, has no checkpoint, or keeps the one it
    was resumed from."""
    run_path = Path(run_path)
    if (run_path / CHECKPOINT_NAME).exists():
        return (
            f"interrupted before training resumed; the checkpoint in {run_path} is unchanged "
            f"(resume with batchenv train {algorithm} --resume {run_path})"
        )
    if (run_path / CONFIG_NAME).exists():
        return (
            f"interrupted before the first checkpoint was written: {run_path} has no "
            "checkpoint, so it cannot be resumed; start a new run (in another --logdir, or "
            f"delete {run_path} first)"
        )
    return f"interrupted before {run_path} was created; nothing was written"


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back until the block ends, then raise KeyboardInterrupt.

    For imports of native modules: one interrupted while it initialises can abort the
    whole process (triton's, through ``torch._dynamo``: "terminate called after throwing
    an instance of 'nanobind::python_error'"). Does nothing outside the main thread or
    where SIGINT is ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt
