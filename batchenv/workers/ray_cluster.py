"""What batchenv's Ray actors need from the cluster: joining it, placing actors, ending
them, and shipping the user's own code to them.

:func:`ship` pickles what the driver sends to its actors (env constructors) with Ray's
cloudpickle, the code of the user's own modules included by value
(``cloudpickle.register_pickle_by_value``, for that one call). A class from a module the
driver imports from a directory of its own (a sibling of the script, a folder put on
``sys.path`` at run time) then builds in an actor on any node, with no ``runtime_env``:

    >>> import my_envs                                # not installed, on no node's path
    >>> env = batchenv.make(my_envs.Maze, 8, backend="ray", num_workers=2)

Installed packages and the standard library still travel by name: every node must have
them (and batchenv), as Ray's cluster setup provides. Ray itself is imported only here
and in the modules that start actors.
"""

from __future__ import annotations

import functools
import os
import site
import socket
import sys
import sysconfig
import types
from importlib import metadata

from batchenv.errors import WorkerTimeoutError
from batchenv.workers.external_process import remaining

RAY_HINT = 'worker groups on Ray need the ray extra: pip install -e ".[ray]"'
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
PROBE_SECONDS = 5.0


def import_ray():
    """The ``ray`` module, or an ImportError with the one-line install hint."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_HINT) from error
    return ray


def connect(ray, address: str | None) -> None:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), else start a local one; a
    ``HOST:PORT`` where nothing answers is a one-line ConnectionError within 5 s (Ray
    itself retries for a minute)."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address is None:
        ray.init(include_dashboard=False, logging_level="WARNING")
        return
    if address != "auto":
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=PROBE_SECONDS).close()
        except (OSError, ValueError) as error:
            raise ConnectionError(
                f"no Ray cluster answers at {address!r} ({error}); start one with "
                "`ray start --head` and pass the HOST:PORT it prints, or address=None"
            ) from None
    ray.init(address=address, logging_level="WARNING")


def wait_placed(
    ray, group, strategy: str, deadline: float, start_timeout: float, what: str, description: str
) -> None:
    """Wait until Ray has reserved every bundle of the placement ``group``; a
    WorkerTimeoutError saying what to change when it cannot by ``deadline``."""
    placed, _ = ray.wait([group.ready()], timeout=remaining(deadline))
    if placed:
        return
    bundles = group.bundle_specs
    cpus = ray.cluster_resources().get("CPU", 0)
    raise WorkerTimeoutError(
        f"Ray could not place {len(bundles)} {what} groups of {bundles[0].get('CPU', 0):g} "
        f"CPUs ({strategy}) within start_timeout={start_timeout} s (the cluster has {cpus:g} "
        "CPUs); lower num_workers or the CPUs per group, or add nodes",
        step=0,
        env_description=description,
    )


def kill_actor(actor) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone, or Ray shut down: nothing left to end
        pass


def remove_placement_group(group) -> None:
    from ray.util.placement_group import remove_placement_group as remove

    try:
        remove(group)
    except Exception:  # already removed, or Ray shut down
        pass


# ---------------------------------------------------------------------- the user's code


def ship(value) -> bytes:
    """``value`` pickled by Ray's cloudpickle for an actor to ``pickle.loads``, with the
    functions and classes of the user's own modules (:func:`user_modules`) by value, so
    the actor needs no copy of them. Their registration for pickling by value lasts this
    call only, unless the caller had made it."""
    from ray import cloudpickle

    added: list[types.ModuleType] = []
    try:
        while True:  # code sent by value may name further modules of the user's
            registered = cloudpickle.list_registry_pickle_by_value()
            new = [m for m in user_modules(value) if m.__name__ not in registered]
            if not new:
                return cloudpickle.dumps(value, protocol=5)
            for module in new:
                cloudpickle.register_pickle_by_value(module)
                added.append(module)
    finally:
        for module in added:
            cloudpickle.unregister_pickle_by_value(module)


def user_modules(value) -> list[types.ModuleType]:
    """The top-level modules of the user's own code that pickling ``value`` refers to by
    name: neither the standard library nor an installed distribution, nor ``__main__``
    (whose code cloudpickle already sends by value)."""
    names = sorted(_referenced_modules(value))
    found = [sys.modules.get(name) for name in names]
    return [module for module in found if module is not None and _is_user_code(module)]


def _referenced_modules(value) -> set[str]:
    """The top-level names of the modules of every class, function and module that
    pickling ``value`` meets (what an unpickler would import)."""
    from ray import cloudpickle

    found: set[str] = set()

    class Recorder(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, types.ModuleType):
                name = obj.__name__
            elif isinstance(obj, (type, types.FunctionType)):
                name = getattr(obj, "__module__", None)
            else:
                name = None
            if isinstance(name, str):
                found.add(name.partition(".")[0])
            return super().reducer_override(obj)

    try:
        Recorder(_Discard(), protocol=5).dump(value)
    except Exception:  # unpicklable: the real pickling reports it
        return set()
    return found


class _Discard:
    """A file that forgets what is written to it: the recording pass keeps no copy."""

    def write(self, data) -> int:
        return len(data)


def _is_user_code(module: types.ModuleType) -> bool:
    name = module.__name__
    if name == "__main__" or name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return False
    if name in _installed_names():
        return False
    paths = list(getattr(module, "__path__", None) or [])  # a package's folder
    location = getattr(module, "__file__", None) or (paths[0] if paths else None)
    if not location:
        return False
    location = os.path.realpath(location)
    return not any(location.startswith(root + os.sep) for root in _library_roots())


@functools.lru_cache(maxsize=1)
def _installed_names() -> frozenset[str]:
    """Top-level module names that installed distributions provide (editable ones too)."""
    return frozenset(metadata.packages_distributions())


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where installed code lives: site-packages and the interpreter's own library."""
    paths = sysconfig.get_paths()
    roots = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    roots.append(site.getusersitepackages())
    return tuple(sorted({os.path.realpath(root) for root in roots if root}))
