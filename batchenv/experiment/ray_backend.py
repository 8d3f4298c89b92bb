"""The Ray backend: the trials of a search as Ray Tune trials, on this machine or a cluster.

``batchenv run SPEC --mode search --backend ray [--address ADDR]`` runs the same search as
the local backend, in the same run directory layout, with Ray Tune scheduling the trials:

- a Tune ``Tuner`` whose searcher is Ray's ``OptunaSearch`` with the sampler the local
  backend builds from the spec (same kind, same ``meta.seed``), so the same spec suggests
  the same values in the same order on both backends;
- ``meta.pruner`` as a Tune scheduler on env steps: ``successive_halving`` and
  ``hyperband`` as ASHA (one and three brackets), ``median`` as the median stopping rule;
- a trial is one Tune trial asking for ``sessions x cpus_per_session`` CPUs (capped at
  the largest node, as the local backend caps at this machine's cores) and ``sessions x
  gpus_per_session`` GPUs; it runs its sessions as the local backend does (a
  :class:`~batchenv.experiment.pool.SessionPool` of session processes on its node);
- Tune's own state lives in ``RUN_DIR/tune/``; ``--resume RUN_DIR`` restores it with
  ``Tuner.restore``: finished trials are not rerun, and trials cut short restart on the
  sessions still to run, which continue from their checkpoints.

Everything the command line can get wrong (Ray not installed, a mode Tune does not run, an
address with no cluster behind it) is checked by :func:`check_backend` and
:meth:`RayExecutor.connect` before the run directory exists. Importing this module does
not import Ray; :mod:`batchenv.experiment.ray_tune` (imported by :meth:`RayExecutor.run`,
and never importing this module) holds the classes Tune runs.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
from collections.abc import Callable
from pathlib import Path

from .executors import Plan
from .spec import SpecError
from .trial import TrialResult

__all__ = ["BACKENDS", "RayExecutor", "check_backend", "missing_extras"]

BACKENDS = ("local", "ray")
TUNE_DIR = "tune"
_PROBE_SECONDS = 5.0
#: Ray, and what ``pip install "ray[tune]"`` adds to it that ``from ray import tune`` imports.
_RAY_TUNE_MODULES = ("ray", "pandas", "pyarrow", "fsspec", "requests", "pydantic")


def check_backend(backend: str, mode: str, address: str | None) -> None:
    """SpecError (one line) when ``backend`` cannot run ``mode`` or ``address`` is malformed."""
    if backend not in BACKENDS:
        raise SpecError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "local":
        if address is not None:
            raise SpecError("--address names a Ray cluster: add --backend ray")
        return
    missing = missing_extras()
    if missing:
        raise SpecError(
            f"--backend ray needs {' and '.join(missing)}, not installed here: pip install "
            + " ".join(f'"{name}"' if "[" in name else name for name in missing)
            + ' (or pip install -e ".[ray]")'
        )
    if mode != "search":
        raise SpecError(
            f"--backend ray runs searches (--mode search); run --mode {mode} without --backend ray"
        )
    if address is not None:
        _parse_address(address)


def missing_extras() -> list[str]:
    """The packages of the ray extra that are not installed: ``ray[tune]`` (Ray, or a
    package Ray Tune needs) and ``optuna`` (the searcher)."""
    missing = []
    if any(importlib.util.find_spec(module) is None for module in _RAY_TUNE_MODULES):
        missing.append("ray[tune]")
    if importlib.util.find_spec("optuna") is None:
        missing.append("optuna")
    return missing


class RayExecutor:
    """Runs a search's trials as Ray Tune trials (see the module docstring).

    Args:
        address: the cluster (``HOST:PORT`` of its head, or ``auto``); None: the cluster
            ``ray.init()`` finds (``RAY_ADDRESS``, the latest ``ray start`` on this machine)
            or a new Ray instance on this machine.
    """

    def __init__(self, address: str | None = None):
        self.address = address
        self._owned = False

    def connect(self) -> None:
        """Connect to Ray now (SpecError in one line when that fails); a no-op when this
        process is connected already."""
        import ray

        if ray.is_initialized():
            return
        if self.address not in (None, "auto"):
            host, port = _parse_address(self.address)
            try:
                socket.create_connection((host, port), timeout=_PROBE_SECONDS).close()
            except OSError as error:
                raise SpecError(
                    f"--address {self.address}: no Ray cluster answers there ({error}); start "
                    "one with `ray start --head` and pass the address it prints"
                ) from None
        try:
            ray.init(address=self.address, logging_level=logging.WARNING)
        except Exception as error:  # ConnectionError, or Ray's own errors, as one line
            lines = str(error).strip().splitlines() or [type(error).__name__]
            where = f"--address {self.address}" if self.address else "ray.init()"
            raise SpecError(f"{where}: cannot connect to Ray: {lines[0]}") from None
        self._owned = True

    def close(self) -> None:
        """Disconnect from Ray if :meth:`connect` connected (a cluster keeps running)."""
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False

    def run(self, plan: Plan, on_trial: Callable[[TrialResult], None]) -> list[TrialResult]:
        """Run (or resume) the search of ``plan`` with Tune; KeyboardInterrupt when it was
        stopped before ``plan.max_trials`` trials finished."""
        self.connect()
        try:
            from . import ray_tune

            results: list[TrialResult] = []

            def finished(result: TrialResult) -> None:
                results.append(result)
                on_trial(result)

            ray_tune.run_search(plan, (plan.path / TUNE_DIR).resolve(), finished)
        finally:
            self.close()
        if _finished_trials(plan.path) < plan.max_trials:
            raise KeyboardInterrupt
        return results


# --- helpers --------------------------------------------------------------------------------


def _parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; ("", 0) for ``auto``; SpecError otherwise."""
    if address == "auto":
        return "", 0
    if address.startswith("ray://"):
        raise SpecError(
            f"--address {address}: Ray Client (ray://) is not supported; run batchenv on a "
            "node of the cluster with --address HOST:PORT (the head's GCS address) or auto"
        )
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SpecError(
            f"--address {address!r}: expected HOST:PORT (the address `ray start --head` "
            "prints, e.g. 10.0.0.5:6379) or auto"
        )
    return host, int(port)


def _finished_trials(path: Path) -> int:
    import json

    from .trial import TRIAL_NAME

    count = 0
    for trial_file in path.glob(f"t*/{TRIAL_NAME}"):
        try:
            status = json.loads(trial_file.read_text()).get("status")
        except (OSError, ValueError):
            continue
        count += status in ("done", "failed", "pruned")
    return count
