"""Searches on the local backend: resumed searches suggest what uninterrupted ones do,
best_spec.yaml reruns the best trial, ``--backend ray`` names every missing extra, and the
Ray modules import one way. (The same behaviour on Ray: tests/experiment/test_ray.py.)

They use tests/experiment/toy_trainer.py and need no Ray.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from batchenv.experiment import load_spec, run
from batchenv.experiment.session import read_checkpoints
from tests.cli_process import batchenv_command
from tests.experiment.test_experiment import ROOT, toy_spec, wait_for

SEARCH = {"config.x__uniform": [0.0, 1.0], "config.y__randint": [0, 5]}


def interrupted_search(tmp_path: Path, meta: dict, *options: str) -> Path:
    """The run directory of a search (``batchenv run ... options``) stopped with SIGINT
    while trial 1 runs (its session 0, seed meta.seed + 1000, stalls after its first
    checkpoint): trial 0 is done, and trial 2 is not asked for yet."""
    stall = {"stall_seed": meta["seed"] + 1000, "stall_at": 100}
    spec = toy_spec(tmp_path, "stalls", config=stall, meta=meta, search=SEARCH)
    runs = tmp_path / "interrupted"
    command = batchenv_command("run", str(spec), "--mode", "search")
    command += ["--runs-dir", str(runs), "--no-progress", *options]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: list(runs.glob("stalls_*/t1/s0/toy_checkpoint.json")), 120, "trial 1")
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 130, err
    (run_dir,) = runs.glob("stalls_*")
    assert not (run_dir / "t2").exists()
    return run_dir


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_search_suggests_what_an_uninterrupted_one_does(tmp_path, sampler):
    meta = {"sessions": 1, "trials": 3, "steps": 300, "seed": 5, "max_concurrent": 1}
    meta["sampler"] = sampler
    whole = run(
        toy_spec(tmp_path, meta=meta, search=SEARCH),
        mode="search",
        runs_dir=tmp_path / "whole",
        progress=False,
    )
    resumed = run(resume=interrupted_search(tmp_path, meta), progress=False)

    assert [t.number for t in resumed.trials] == [0, 1, 2]
    assert [t.values for t in resumed.trials] == [t.values for t in whole.trials]
    assert len({t.values["config.x"] for t in whole.trials}) == 3


def test_best_spec_reruns_the_best_trials_sessions(tmp_path):
    # Trials in the grid's order for seed 1: the best (x = 0.3) is trial 2, so its
    # sessions' seeds (1 + 1000 N + s) are not the spec's first seeds.
    meta = {"sessions": 2, "trials": 3, "steps": 300, "seed": 1, "sampler": "grid"}
    path = toy_spec(tmp_path, meta=meta, search={"config.x__grid_search": [0.9, 0.3, 0.6]})
    search = run(path, mode="search", runs_dir=tmp_path / "search", progress=False)
    best = search.best
    assert best.values == {"config.x": 0.3} and best.number == 2

    best_spec = search.path / "best_spec.yaml"
    rerun = run(best_spec, mode="train", runs_dir=tmp_path / "rerun", progress=False)

    seeds = json.loads((search.path / "run.json").read_text())["seeds"][f"t{best.number}"]
    assert seeds == [2001, 2002]
    assert json.loads((rerun.path / "run.json").read_text())["seeds"] == {"t0": seeds}
    assert load_spec(rerun.path / "spec.yaml").config == {"x": 0.3}
    for session in (0, 1):
        assert _returns(rerun.path / f"t0/s{session}") == _returns(best.path / f"s{session}")
    (again,) = rerun.trials
    assert _without_wall_time(again.metrics) == _without_wall_time(best.metrics)


def _returns(session: Path) -> list[tuple[int, float]]:
    return [(row["frame"], row["total_reward"]) for row in read_checkpoints(session)]


def _without_wall_time(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if key != "wall_time"}


@pytest.mark.parametrize(
    "hidden, message",
    [
        (["ray"], '--backend ray needs ray[tune], not installed here: pip install "ray[tune]"'),
        (["pyarrow"], '--backend ray needs ray[tune], not installed here: pip install "ray[tune]"'),
        (["optuna"], "--backend ray needs optuna, not installed here: pip install optuna"),
        (
            ["ray", "optuna"],
            '--backend ray needs ray[tune] and optuna, not installed here: pip install "ray[tune]"'
            ' optuna (or pip install -e ".[ray]")',
        ),
    ],
    ids=["ray", "a package of ray[tune]", "optuna", "ray and optuna"],
)
def test_backend_ray_names_every_missing_package_in_one_line(tmp_path, hidden, message):
    # The CLI as a user runs it, with the packages hidden (sys.modules[name] = None: not
    # importable, and importlib.util.find_spec says so).
    spec = toy_spec(tmp_path, meta={"trials": 2}, search=SEARCH)
    argv = ["run", str(spec), "--mode", "search", "--backend", "ray", "--runs-dir", str(tmp_path)]
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({hidden!r})); "
        f"from batchenv.cli import main; sys.exit(main({argv!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"batchenv run: error: {message}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert not list(tmp_path.glob("toy_*"))


@pytest.mark.parametrize(
    "module", ["ray_backend", "ray_tune", "samplers", "executors", "search_space"]
)
def test_the_search_modules_import_one_way(module):
    # ray_backend (the executor, no Ray) -> ray_tune (what Tune runs) -> executors, pool,
    # spec, trial: no module reaches itself through its imports, lazy ones included.
    graph = _experiment_imports()
    seen, todo = set(), list(graph[module])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    assert module not in seen, f"{module} imports itself through {sorted(seen)}"


def _experiment_imports() -> dict[str, set[str]]:
    """``{module: the batchenv.experiment modules it imports}``, at any level of the file."""
    package = ROOT / "batchenv" / "experiment"
    graph = {}
    for path in package.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names |= {node.module.removeprefix("batchenv.experiment.")}
            elif isinstance(node, ast.Import):
                names |= {a.name.removeprefix("batchenv.experiment.") for a in node.names}
        graph[path.stem] = {name.split(".")[0] for name in names} - {path.stem}
    return {module: names & graph.keys() for module, names in graph.items()}
