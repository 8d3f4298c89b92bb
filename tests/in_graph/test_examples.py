"""The in-graph examples run end to end at a tiny budget."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_example(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "name, args",
    [("random_in_graph.py", ["--steps", "100"]), ("custom_algorithm.py", ["--steps", "100"])],
    ids=["random_in_graph", "custom_algorithm"],
)
def test_example_prints_mean_scores(name, args, tmp_path):
    if name == "custom_algorithm.py":
        args = [*args, "--logdir", str(tmp_path)]
    output = run_example(name, *args)
    assert "mean score" in output
    if name == "custom_algorithm.py":
        assert (tmp_path / "metrics.csv").exists()
