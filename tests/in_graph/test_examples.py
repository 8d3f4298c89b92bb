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


def _mean_scores(output: str) -> list[float]:
    return [
        float(line.rsplit("mean score", 1)[1])
        for line in output.splitlines()
        if "mean score" in line
    ]


def test_reinforce_example_learns_cartpole():
    """REINFORCE in four methods visibly learns: the mean score at the end of 2000 steps is
    several times the random policy's (~22)."""
    scores = _mean_scores(run_example("custom_algorithm.py", "--steps", "2000", "--seed", "0"))
    assert len(scores) >= 3  # printed every 500 steps
    assert scores[0] < 60
    assert max(scores[-3:]) > 100, scores


@pytest.mark.slow
def test_random_example_compiled():
    output = run_example("random_in_graph.py", "--steps", "100", "--compile")
    assert "mean score" in output


def test_demo_command_reports_throughput():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenv.cli",
            "demo",
            "--steps",
            "2000",
            "--num-envs",
            "4",
            "--num-workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "CartPole-v1: 4 envs in 1 worker processes" in result.stdout
    assert "steps/s" in result.stdout
