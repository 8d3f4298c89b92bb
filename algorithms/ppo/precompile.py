"""PPO's update programs compiled in a helper process while this one compiles the rollout.

On a CPU, PPO's first update compiles three programs one after the other: the rollout
chunk, then the preparation (GAE, minibatch orders) and the minibatch step. Each is
Dynamo's tracing, Inductor's code generation and a g++ build, single-threaded Python and
one compiler process, so a cold first update kept one core busy while the others idled.
:class:`UpdatePrecompile` starts a helper process that builds the same envs and agents
from the config and runs one update on their zero buffers. Inductor writes what it
compiles to its on-disk cache (``TORCHINDUCTOR_CACHE_DIR``). When this process reaches
its first update, Dynamo traces the two programs again (a few seconds) and Inductor loads
them from the cache instead of compiling them.

The helper reads its job at once and builds the envs and agents while both processes
probe Inductor's SIMD instruction sets (:mod:`batchenv.in_graph.vector_isa`); this process
sends its choice when its probes have made it, and the helper compiles only if its own
choice is the same.

In a warm run the cache holds every program already, and waiting for a helper that is
still importing and tracing cost 3-6 s. So the helper announces on its stdout the moment
Inductor misses its cache (it is about to compile), and :meth:`UpdatePrecompile.wait`
waits only for a helper that has announced a compile, or when this process compiled
something itself since the helper started (a cold rollout: the update is cold too). A
helper that has done neither is killed, and this process traces the update and loads its
programs itself.

The helper is a speed-up only. If it fails or has not finished by ``deadline`` seconds,
it is killed and this process compiles the programs itself, as it would without one. It
writes nothing but the compile cache, compiles for this process's torch thread count and
SIMD instruction set (Inductor's cache key leaves the latter out), and dies with its
parent (``PR_SET_PDEATHSIG``). On the 2-core VM a cold first run of the CartPole
preset took 28 s instead of 51 s (benchmarks/RESULTS.md).

    >>> from batchenv.algorithms.ppo import PPOConfig
    >>> UpdatePrecompile.wanted(PPOConfig(compile=False))
    False
"""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future

import torch
from torch._dynamo.utils import counters

from batchenv.in_graph.vector_isa import probe_vector_isa

from .config import PPOConfig

__all__ = ["UpdatePrecompile"]

#: Seconds the first update waits for the helper before compiling on its own.
DEADLINE = 600.0

#: What the helper writes to its stdout when Inductor misses its cache.
COMPILING = b"c"


class UpdatePrecompile:
    """A helper process compiling ``config``'s update programs into Inductor's cache.

    Args:
        config: the run's config (the program's, with ``seeds`` set to its K).
        threads: torch threads of this process (the compiled code depends on it).
        deadline: seconds :meth:`wait` waits at most.

    ``reason`` says why the helper did not help (None while it runs or after it finished
    cleanly); ``seconds`` is how long it ran.
    """

    def __init__(self, config: PPOConfig, threads: int, deadline: float = DEADLINE):
        self.deadline = deadline
        self.started = time.monotonic()
        self.reason: str | None = None
        self.seconds: float | None = None
        self._log = tempfile.TemporaryFile()
        self._misses = _cache_misses()  # this process compiles iff the count grows
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.curdir for p in sys.path))
        self._process = subprocess.Popen(
            _command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        os.set_blocking(self._process.stdout.fileno(), False)
        # Killed when this object goes, if it still runs (a run that stopped before its
        # first update).
        self._finalizer = weakref.finalize(self, _kill, self._process, self._log)
        try:
            self._process.stdin.write(pickle.dumps((config, threads)))
            self._process.stdin.flush()
        except OSError as error:  # the helper died before reading its job
            self.reason = f"the helper could not be started: {error}"
        # The SIMD choice follows when this process's probes have made it (the helper builds
        # its envs and agents meanwhile). Not a method: the helper must not keep self alive.
        probe_vector_isa().add_done_callback(functools.partial(_send_choice, self._process.stdin))

    @staticmethod
    def wanted(config: PPOConfig) -> bool:
        """Whether ``config`` compiles its update on a CPU, where the helper pays."""
        return config.compile and config.precompile and config.device.split(":")[0] == "cpu"

    def wait(self) -> bool:
        """Wait for the helper (at most until ``deadline`` seconds after its start); True
        if it compiled the programs. A helper still running then is killed, as is at once
        one that has not started compiling while nothing compiled here (a warm run)."""
        if self.seconds is not None:  # waited for already
            return self.reason is None
        try:
            if not self._worth_waiting():
                self.reason = self.reason or (
                    "the helper had not started compiling, and nothing compiled here"
                )
                return False
            left = max(self.deadline - (time.monotonic() - self.started), 0.0)
            code = self._process.wait(timeout=left)
        except subprocess.TimeoutExpired:  # killed below
            self.reason = self.reason or f"the helper had not finished after {self.deadline:g} s"
        else:
            if code != 0 and self.reason is None:
                self.reason = f"the helper exited with {code}: {self._last_line()}"
        finally:
            self.seconds = time.monotonic() - self.started
            self._finalizer()  # kills a helper still running, closes its log
        return self.reason is None

    def close(self) -> None:
        """Kill the helper if it still runs (a run that failed before its first update)."""
        if self.seconds is None:
            self.seconds = time.monotonic() - self.started
            self.reason = self.reason or "closed before the first update"
        self._finalizer()

    def _worth_waiting(self) -> bool:
        """Whether the helper announced a compile or has exited, or this process compiled
        something since it started (then the update's programs are most likely cold too)."""
        if _cache_misses() != self._misses:
            return True
        try:
            said = self._process.stdout.read()  # None: nothing yet; b"": it exited
        except BlockingIOError:
            said = None
        return said is not None and (said == b"" or COMPILING in said)

    def _last_line(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"


def _command() -> list[str]:
    """The helper's command line. Not ``python -m``: this module run as __main__ compiled
    programs whose cache keys differed from those this process computes (seen on torch
    2.13, not explained)."""
    return [sys.executable, "-c", f"from {__name__} import main; main()"]


def _kill(process: subprocess.Popen, log) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
    process.stdout.close()
    log.close()


def _cache_misses() -> int:
    return counters["inductor"]["fxgraph_cache_miss"]


def _announce_compiles(out, poll: float = 0.01) -> None:
    """Write :data:`COMPILING` to ``out`` at this process's first FX-graph cache miss (the
    count goes up at the lookup, before Inductor compiles). Polled: Inductor replaces its
    counters while it compiles."""
    while _cache_misses() == 0:
        time.sleep(poll)
    out.write(COMPILING)


def _send_choice(stdin, choice: Future) -> None:
    """Write this process's SIMD choice to the helper and close its stdin (an error in the
    probes closes it with nothing written: the helper then stops, as does this compile)."""
    try:
        if choice.exception() is None:
            stdin.write(pickle.dumps(choice.result()))
        stdin.close()
    except (OSError, ValueError):  # the helper is gone (died, or killed and its pipe closed)
        pass


def _compile(config: PPOConfig, threads: int, parent_choice: Callable[[], str]) -> None:
    """The helper's job: the run's envs and agents, and one update on zero buffers.

    Inductor's SIMD choice is not part of a compiled program's cache key, so a helper that
    chose another one than its parent (its probe failed, say) would hand the parent scalar
    code: it compiles nothing then."""
    from .train import make_env, make_ppo

    torch.set_num_threads(threads)
    env = make_env(config)
    ppo = make_ppo(config, env)
    own, theirs = probe_vector_isa().result(), parent_choice()
    if own != theirs:
        raise SystemExit(f"this process's SIMD choice {own!r} is not its parent's {theirs!r}")
    ppo.update()


def main() -> None:
    """The helper process: read ``(config, threads)`` from stdin, then its parent's SIMD
    choice; compile."""
    from batchenv.workers.liveness import set_parent_death_signal

    set_parent_death_signal()
    probe_vector_isa()  # while the job is read and the envs are built
    # stdout carries the announcement only; anything printed (by Python or not) goes to the log.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    threading.Thread(target=_announce_compiles, args=(out,), daemon=True).start()
    stdin = sys.stdin.buffer
    config, threads = pickle.load(stdin)

    def parent_choice() -> str:
        try:
            return pickle.load(stdin)
        except EOFError:
            raise SystemExit("the parent sent no SIMD choice (its probes failed)") from None

    _compile(config, threads, parent_choice)
