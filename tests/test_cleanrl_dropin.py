"""Unmodified CleanRL scripts give the same episode returns on BatchVectorEnv as on
SyncVectorEnv, with the same seed.

The scripts (``ppo.py`` on CartPole-v1 and ``ppo_continuous_action.py`` on HalfCheetah-v5,
pinned to one CleanRL commit) are never committed: ``benchmarks/training_loop.py`` keeps
them in ``~/.cache/batchenv/cleanrl/<commit>/`` (or ``$BATCHENV_CLEANRL_DIR``) and downloads
them when missing. Each script runs in a fresh interpreter with
``gym.vector.SyncVectorEnv`` swapped for the class under test (and the harness's shims for
CleanRL's own Gymnasium 1.x incompatibilities, see ``training_loop_child.py``); the test
compares the ``(global_step, episodic_return)`` lines the script prints. Skipped when the
scripts cannot be had (offline, empty cache) or CleanRL's own dependency ``tyro`` is
missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _harness():
    spec = importlib.util.spec_from_file_location("training_loop", BENCHMARKS / "training_loop.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("training_loop", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness():
    pytest.importorskip("tyro", reason="CleanRL's scripts need tyro (pip install tyro)")
    module = _harness()
    try:
        scripts = module.cleanrl_dir(argparse.Namespace(cleanrl_dir=None))
    except SystemExit:
        pytest.skip("CleanRL's scripts are not cached and cannot be downloaded here")
    return module, scripts


@pytest.mark.parametrize(
    "case_name, iterations",
    [("cartpole-8", 2), pytest.param("cheetah-8", 1, marks=pytest.mark.slow)],
)
def test_cleanrl_returns_equal_sync_vector_env(harness, case_name, iterations):
    if case_name.startswith("cheetah"):
        pytest.importorskip("mujoco", reason="HalfCheetah-v5 needs the mujoco extra")
    module, scripts = harness
    case = module.CASES[case_name]
    args = argparse.Namespace(
        batchvec_kwargs={},
        async_api_kwargs={},
        torch_threads=0,
        omp_wait_policy=None,
        iterations={case_name: iterations},
    )
    results = {}
    for name in ("sync", "batch"):
        results[name] = module.run_child(module.run_spec(case, name, args, scripts))
        assert "error" not in results[name], results[name]["error"]
    sync, batch = results["sync"]["returns"], results["batch"]["returns"]
    assert len(sync) >= 10, f"too few episodes to compare: {sync}"
    assert batch == sync
