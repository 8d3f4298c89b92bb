"""Gymnasium 1.4.0's own ``tests/vector`` suite, run on ``batchenv.vector.BatchVectorEnv``.

    python benchmarks/gymnasium_vector_suite.py              # both runs, then the counts
    python benchmarks/gymnasium_vector_suite.py --only batch -k observation_mode
    python benchmarks/gymnasium_vector_suite.py --parent-share none

**The test files.** Gymnasium's tests are not in its wheel and are never committed here.
They live in a cache, ``~/.cache/batchenv/gymnasium-tests/v1.4.0/`` (``--cache`` or
``$BATCHENV_GYMNASIUM_TESTS`` to move it): ``tests/vector`` and the helpers it imports
(``tests/testing_env.py``, ``tests/spaces/utils.py``, ``tests/envs/utils.py`` and the
package ``__init__`` files), exactly as tagged. Missing files are downloaded from
``raw.githubusercontent.com`` at the tag ``v1.4.0``; offline, the harness prints one line
saying how to fill the cache and exits with status 2. ``--from-git DIR [--rev REV]`` fills
it from a local clone instead (``git --git-dir DIR show REV:tests/...``). Besides those
files the cache holds only ``pytest.ini`` (Gymnasium's own warning filter) and ``SOURCE``
(where the files came from), both written by this harness.

**The substitution.** Nothing in Gymnasium's files is edited. Pytest runs in the cache
with this module loaded as a plugin (``-p gymnasium_vector_suite``); its
``pytest_configure`` hook runs before any test module is imported, and there replaces
``gymnasium.vector.AsyncVectorEnv`` and ``gymnasium.vector.SyncVectorEnv`` (the names the
tests import with ``from gymnasium.vector import ...``, and the ones ``gymnasium.make_vec``
looks up) with the two thin subclasses of ``BatchVectorEnv`` below, named like the classes
they stand in for so messages that name the class read the same. Their keyword arguments
map onto ``BatchVectorEnv``'s:

* ``context`` -> ``start_method`` (None: batchenv's default, "forkserver");
* ``max_concurrency`` -> ``num_workers`` (each worker steps its envs one after another, so
  at most that many envs run at once);
* ``copy``, ``observation_mode``, ``autoreset_mode`` -> the same arguments;
* ``shared_memory`` and ``daemon`` are dropped: batchenv always uses shared memory and
  ends its workers itself. A custom ``worker`` function has no batchenv counterpart: it
  raises ``ValueError``.

``--parent-share`` sets ``BatchVectorEnv``'s ``parent_share`` for every substituted class
(default: its own default, "auto"). The plugin records every test's outcome and the first
line of its failure; the harness prints, per run, passed/failed/skipped counts and each
failing test with that reason. ``--only gymnasium`` runs the files on Gymnasium's own
classes (the plugin loads, but substitutes nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

TAG = "v1.4.0"
DEFAULT_CACHE = Path.home() / ".cache" / "batchenv" / "gymnasium-tests" / TAG
RAW_URL = "https://raw.githubusercontent.com/Farama-Foundation/Gymnasium/{tag}/{path}"
FILES = [
    "tests/__init__.py",
    "tests/testing_env.py",
    "tests/envs/__init__.py",
    "tests/envs/utils.py",
    "tests/spaces/__init__.py",
    "tests/spaces/utils.py",
    "tests/vector/__init__.py",
    "tests/vector/testing_utils.py",
    "tests/vector/test_async_vector_env.py",
    "tests/vector/test_autoreset_mode.py",
    "tests/vector/test_observation_mode.py",
    "tests/vector/test_sync_vector_env.py",
    "tests/vector/test_vector_env.py",
    "tests/vector/test_vector_env_info.py",
    "tests/vector/test_vector_wrapper.py",
    "tests/vector/utils/__init__.py",
    "tests/vector/utils/test_shared_memory.py",
    "tests/vector/utils/test_space_utils.py",
    "tests/vector/utils/utils.py",
]
PYTEST_INI = """[pytest]
# Gymnasium's own setting (its pyproject.toml).
filterwarnings = ignore::DeprecationWarning:gymnasium.*:
"""
ENV_SUBSTITUTE = "BATCHENV_SUITE_SUBSTITUTE"
ENV_PARENT_SHARE = "BATCHENV_SUITE_PARENT_SHARE"
ENV_REPORT = "BATCHENV_SUITE_REPORT"


# --------------------------------------------------------------------------- the cache


def missing_files(cache: Path) -> list[str]:
    return [path for path in FILES if not (cache / path).is_file()]


def fill_from_git(cache: Path, git_dir: str, rev: str) -> None:
    """Copy the missing files out of a local clone of Gymnasium at ``rev``."""
    for path in missing_files(cache):
        text = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{rev}:{path}"],
            check=True,
            capture_output=True,
        ).stdout
        _write(cache / path, text)
    _write(cache / "SOURCE", f"git {git_dir} {rev}\n".encode())


def fill_from_github(cache: Path, tag: str = TAG) -> None:
    """Download the missing files at ``tag``; offline: one line saying what to do, exit 2."""
    for path in missing_files(cache):
        url = RAW_URL.format(tag=tag, path=path)
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                _write(cache / path, response.read())
        except (urllib.error.URLError, OSError) as error:
            print(
                f"cannot download {url} ({error}); fill {cache} from a clone of Gymnasium "
                f"with --from-git PATH/.git --rev {tag}, or copy its {tag} tests/ folder there",
                file=sys.stderr,
            )
            raise SystemExit(2) from None
    _write(cache / "SOURCE", f"{RAW_URL.format(tag=tag, path='')}\n".encode())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def prepare_cache(cache: Path, git_dir: str | None, rev: str) -> None:
    if missing_files(cache):
        if git_dir:
            fill_from_git(cache, git_dir, rev)
        else:
            fill_from_github(cache)
    (cache / "pytest.ini").write_text(PYTEST_INI)


# --------------------------------------------------------------------------- the runs


def run_suite(cache: Path, substitute: bool, parent_share: str, pytest_args: list[str]) -> dict:
    """Run ``tests/vector`` in a fresh interpreter; returns the plugin's report."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        env = dict(os.environ)
        paths = [str(Path(__file__).resolve().parent), str(cache)]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env[ENV_SUBSTITUTE] = "1" if substitute else "0"
        env[ENV_PARENT_SHARE] = parent_share
        env[ENV_REPORT] = str(report)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "gymnasium_vector_suite",
            "--rootdir",
            str(cache),
            "tests/vector",
            *pytest_args,
        ]
        subprocess.run(command, cwd=cache, env=env, stdout=subprocess.DEVNULL)
        if not report.exists():
            raise SystemExit(f"pytest wrote no report; run it by hand: {' '.join(command)}")
        return json.loads(report.read_text())


def summarise(title: str, report: dict) -> None:
    outcomes = report["outcomes"]
    counts = {kind: sum(o == kind for o in outcomes.values()) for kind in OUTCOMES}
    print(f"{title}: " + ", ".join(f"{counts[k]} {k}" for k in OUTCOMES))
    for test, outcome in outcomes.items():
        if outcome in ("failed", "error"):
            print(f"  {outcome.upper()} {test}: {report['reasons'].get(test, '')}")


OUTCOMES = ("passed", "failed", "error", "skipped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="where the test files live")
    parser.add_argument("--from-git", default=None, help="fill the cache from this git dir")
    parser.add_argument("--rev", default=TAG, help="revision for --from-git")
    parser.add_argument("--only", choices=("batch", "gymnasium"), default=None)
    parser.add_argument("--parent-share", default="default", help="auto, none or a fraction")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    cache = args.cache or Path(os.environ.get("BATCHENV_GYMNASIUM_TESTS", DEFAULT_CACHE))
    prepare_cache(cache, args.from_git, args.rev)
    print(f"Gymnasium {TAG} tests/vector from {cache}")
    if args.only != "batch":
        summarise("Gymnasium's classes", run_suite(cache, False, "default", args.pytest_args))
    if args.only != "gymnasium":
        title = f"BatchVectorEnv substituted (parent_share={args.parent_share})"
        summarise(title, run_suite(cache, True, args.parent_share, args.pytest_args))
    return 0


# --------------------------------------------------------------------------- the plugin


def _parent_share() -> dict:
    value = os.environ.get(ENV_PARENT_SHARE, "default")
    if value == "default":
        return {}
    if value.lower() in ("none", "0"):
        return {"parent_share": None}
    return {"parent_share": value if value == "auto" else float(value)}


def _mode_kwargs(observation_mode, extra: dict) -> dict:
    """``observation_mode`` is passed on only when not the default, so the harness also
    runs on BatchVectorEnv versions from before it took that argument."""
    kwargs = dict(extra)
    if not (isinstance(observation_mode, str) and observation_mode == "same"):
        kwargs["observation_mode"] = observation_mode
    return kwargs


def substitute_classes() -> None:
    """Put BatchVectorEnv in place of Gymnasium's two vector classes."""
    import gymnasium
    import gymnasium.vector

    from batchenv.vector import BatchVectorEnv

    extra = _parent_share()

    class AsyncVectorEnv(BatchVectorEnv):
        """``gymnasium.vector.AsyncVectorEnv``'s signature on BatchVectorEnv."""

        def __init__(
            self,
            env_fns,
            shared_memory=True,
            copy=True,
            context=None,
            daemon=True,
            worker=None,
            observation_mode="same",
            autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
            max_concurrency=None,
        ):
            if worker is not None:
                raise ValueError("BatchVectorEnv has no custom worker functions; drop worker=")
            kwargs = _mode_kwargs(observation_mode, extra)
            if context is not None:
                kwargs["start_method"] = context
            if max_concurrency is not None:
                kwargs["num_workers"] = max_concurrency
            super().__init__(env_fns, copy=copy, autoreset_mode=autoreset_mode, **kwargs)

    class SyncVectorEnv(BatchVectorEnv):
        """``gymnasium.vector.SyncVectorEnv``'s signature on BatchVectorEnv."""

        def __init__(
            self,
            env_fns,
            copy=True,
            observation_mode="same",
            autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
        ):
            kwargs = _mode_kwargs(observation_mode, extra)
            super().__init__(env_fns, copy=copy, autoreset_mode=autoreset_mode, **kwargs)

    gymnasium.vector.AsyncVectorEnv = AsyncVectorEnv
    gymnasium.vector.SyncVectorEnv = SyncVectorEnv


_outcomes: dict[str, str] = {}
_reasons: dict[str, str] = {}


def pytest_configure(config) -> None:
    if os.environ.get(ENV_SUBSTITUTE) == "1":
        substitute_classes()


def pytest_runtest_logreport(report) -> None:
    """Keep one outcome per test: a failing setup/teardown counts as an error."""
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if report.when != "call" and outcome == "failed":
            outcome = "error"
        if _outcomes.get(report.nodeid) in ("failed", "error"):
            return
        _outcomes[report.nodeid] = outcome
        if outcome in ("failed", "error"):
            _reasons[report.nodeid] = _first_line(report)


def _first_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "")[:300]


def pytest_sessionfinish(session) -> None:
    path = os.environ.get(ENV_REPORT)
    if path:
        Path(path).write_text(json.dumps({"outcomes": _outcomes, "reasons": _reasons}))


if __name__ == "__main__":
    raise SystemExit(main())
