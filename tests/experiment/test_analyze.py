"""batchenv analyze, resume and the one-line NaN note: every number from checkpoints.csv."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from batchenv.cli import main
from batchenv.experiment import plots, run
from batchenv.experiment.analyze import analyze
from batchenv.experiment.metrics import trial_metrics
from batchenv.experiment.session import read_checkpoints
from tests.experiment.toy_trainer import ToyConfig, toy_return

TOY = "tests.experiment.toy_trainer:ToyTrainer"


def toy_run(tmp_path, name="toy", config=None, meta=None, search=None, mode="train", **kw):
    spec = {"algorithm": TOY, "env": "toy", "config": config or {}, "meta": meta or {}}
    if search:
        spec["search"] = search
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({name: spec}))
    return run(path, mode=mode, runs_dir=tmp_path / "runs", progress=False, **kw)


def expected_trial(folder, sessions):
    data = []
    for s in range(sessions):
        rows = read_checkpoints(folder / f"s{s}")
        data.append(
            {
                "returns": [r["total_reward"] for r in rows],
                "frames": [r["frame"] for r in rows],
                "opt_steps": [r["opt_step"] for r in rows],
                "random_return": 0.0,
            }
        )
    return trial_metrics(data)


def edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_analyze_recomputes_edited_values_from_checkpoints(tmp_path):
    result = toy_run(tmp_path, config={"x": 0.2}, meta={"sessions": 2, "steps": 300})
    trial = result.path / "t0"
    expected = expected_trial(trial, 2)
    edit(trial / "trial.json", lambda d: d["metrics"].update(strength=999.0))
    edit(trial / "s1" / "session.json", lambda d: d["metrics"].update(strength=-5.0))
    (trial / "trial.png").unlink()

    (analyzed,), comparison = analyze([result.path])

    assert comparison is None
    assert analyzed.trials[0].metrics["strength"] == pytest.approx(expected["strength"])
    record = json.loads((trial / "trial.json").read_text())
    assert record["metrics"]["strength"] == pytest.approx(expected["strength"])
    session = json.loads((trial / "s1" / "session.json").read_text())
    config = ToyConfig(x=0.2, seed=1, steps=300)
    mean = sum(toy_return(config, f) for f in (100, 200, 300)) / 3
    assert session["metrics"]["strength"] == pytest.approx(mean)  # random return 0
    assert (trial / "trial.png").exists()


def test_resume_of_a_finished_run_recomputes_instead_of_keeping_trial_json(tmp_path):
    result = toy_run(tmp_path, config={"x": 0.2}, meta={"sessions": 2, "steps": 300})
    expected = expected_trial(result.path / "t0", 2)
    edit(result.path / "t0" / "trial.json", lambda d: d["metrics"].update(strength=999.0))
    edit(result.path / "t0" / "s0" / "session.json", lambda d: d.update(returns=[1e9]))
    again = run(resume=result.path, progress=False)
    assert again.trials[0].metrics["strength"] == pytest.approx(expected["strength"])
    assert (result.path / "t0" / "s0" / "starts.txt").read_text().count("\n") == 1  # not rerun


def test_search_analysis_and_a_comparison_of_two_runs(tmp_path, monkeypatch):
    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda f, p: (figures.append((p.name, f)), save(f, p))[1])
    search = {"config": {"x__loguniform": [0.01, 1.0], "y__choice": [1, 2]}}
    meta = {"sessions": 2, "steps": 300, "trials": 3, "sampler": "random"}
    first = toy_run(tmp_path, "a", meta=meta, search=search, mode="search")
    second = toy_run(tmp_path, "b", config={"x": 0.3, "y": 2}, meta={"sessions": 2, "steps": 300})
    figures.clear()

    results, comparison = analyze([first.path, second.path], tmp_path / "cmp.png")

    assert [r.mode for r in results] == ["search", "train"]
    names = [name for name, _ in figures]
    assert names.count("session.png") == 8 and names.count("trial.png") == 4
    assert {"experiment.png", "trials.png", "cmp.png"} <= set(names)
    experiment = dict(figures)["experiment.png"]
    bottom = [a for a in experiment.axes if a.get_label() != "<colorbar>"][-2:]
    assert [a.get_xlabel() for a in bottom] == ["config.x", "config.y"]
    assert bottom[0].get_xscale() == "log"  # a loguniform leaf, whatever its span
    legend = dict(figures)["trials.png"].axes[0].get_legend()
    best = max(results[0].trials, key=lambda t: t.metrics["strength"])
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[0] == f"t{best.number}: x={best.values['config.x']:.3g} " + (
        f"y={best.values['config.y']} (2 s)"
    )
    compared = [t.get_text() for t in dict(figures)["cmp.png"].axes[0].get_legend().get_texts()]
    assert compared == [
        f"{first.path.name} t{best.number}: x={best.values['config.x']:.3g} "
        f"y={best.values['config.y']} (2 s)",
        f"{second.path.name} t0 (2 s)",
    ]
    assert comparison == tmp_path / "cmp.png" and comparison.stat().st_size > 0
    table = (first.path / "experiment.csv").read_text().splitlines()
    assert table[1].startswith(f"{best.number},done,")


def test_the_command_refuses_what_is_not_a_run_before_writing(tmp_path, capsys):
    result = toy_run(tmp_path, meta={"sessions": 1, "steps": 100})
    before = json.loads((result.path / "t0" / "trial.json").read_text())
    (result.path / "t0" / "trial.json").write_text(json.dumps({**before, "note": "stale"}))
    assert main(["analyze", str(result.path), str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        f"batchenv analyze: error: {tmp_path} is not a batchenv run directory (no run.json or "
        "spec.yaml); give the folder `batchenv run` printed, e.g. runs/cartpole_20261125-101500"
    )
    assert json.loads((result.path / "t0" / "trial.json").read_text())["note"] == "stale"
    assert main(["analyze", str(result.path), "--out", str(tmp_path / "x.txt")]) == 2
    assert "--out must name a .png file" in capsys.readouterr().err
    assert main(["analyze", str(result.path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{result.path}: train, 1 trials; t0: total_reward_ma ")


def test_a_trial_that_never_beats_random_gives_one_line(tmp_path, capfd):
    # x = 3: peak 100 - 100 * 2.7^2 - 20 < 0, so every return is below the random 0
    result = toy_run(tmp_path, config={"x": 3.0}, meta={"sessions": 2, "steps": 300})
    (trial,) = result.trials
    assert trial.note == (
        "sample_efficiency, training_efficiency, stability, consistency NaN in 2 of 2 "
        "sessions: the return never beat the random policy's 0 on the whole (local "
        "strengths sum to <= 0)"
    )
    assert json.loads((result.path / "t0" / "trial.json").read_text())["note"] == trial.note
    captured = capfd.readouterr()
    assert "MetricWarning" not in captured.err + captured.out
    assert math.isnan(trial.metrics["stability"])

    again = run(resume=result.path, progress=True)  # what a user sees: one line
    err = capfd.readouterr().err
    assert "MetricWarning" not in err
    assert [line for line in err.splitlines() if "NaN" in line] == [
        f"batchenv run: trial 0: {again.trials[0].note}"
    ]
