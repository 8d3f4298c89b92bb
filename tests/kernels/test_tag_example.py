"""examples/tag_training.py runs end to end at a tiny budget, on both backends."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--updates", "2", "--num-envs", "6", "--rollout", "4", "--eval-steps", "12"]


def _run(*args: str, interpret: bool = False) -> str:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "tag_training.py"), *TINY, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _lengths(stdout: str) -> tuple[float, float]:
    found = re.search(r"episode length (\d+\.\d+) -> (\d+\.\d+) \((\d+\.\d+)x", stdout)
    assert found, stdout
    return float(found.group(1)), float(found.group(2))


def test_smoke_torch_backend():
    stdout = _run("--backend", "torch", "--runner", "learn")
    assert "DiscreteTag(num_envs=6, num_agents=4, device=cpu, backend=torch)" in stdout
    assert re.search(r"random taggers:  mean episode length +\d+\.\d+ \(\d+ episodes\)", stdout)
    assert re.search(r"trained taggers: mean episode length +\d+\.\d+ \(\d+ episodes\)", stdout)
    random_length, trained_length = _lengths(stdout)
    assert 0.0 <= random_length <= 50.0 and 0.0 <= trained_length <= 50.0


@pytest.mark.slow
def test_smoke_triton_backend_in_the_interpreter():
    pytest.importorskip("triton")
    stdout = _run("--backend", "triton", "--eval-steps", "4", interpret=True)
    assert "backend=triton" in stdout
    _lengths(stdout)


def test_rejects_an_unknown_runner_mode():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "tag_training.py"), "--runner", "smart"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "--runner must be 'random' or 'learn', got 'smart'" in result.stderr
