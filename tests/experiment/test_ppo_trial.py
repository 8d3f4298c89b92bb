"""A trial of in-graph PPO sessions runs as one K-seed program and writes what lone sessions
write: per-session checkpoints.csv equal to separate runs, the same files, resumable."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from batchenv.experiment import run
from batchenv.experiment.pool import available_cores
from batchenv.experiment.session import read_checkpoints, run_session
from batchenv.experiment.spec import load_spec, read_specs
from batchenv.experiment.trial import SessionFailedError, TrialRun
from tests.experiment.toy_trainer import ToyTrainer

# 20 updates of 3 envs x 32 steps per seed; a checkpoint every 150 frames (13 per session).
SPEC = """\
tiny:
  algorithm: ppo
  env: CartPole-v1
  config:
    num_envs: 3
    num_steps: 32
    num_minibatches: 2
    update_epochs: 2
    compile: false
  meta:
    sessions: 2
    steps: 1920
    log_frequency: 150
    seed: 5
"""
COLUMNS = ("frame", "opt_step", "total_reward", "total_reward_ma")
SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """The spec, and the trial folder of ``batchenv run SPEC --mode train``."""
    folder = tmp_path_factory.mktemp("ppo_trial")
    (folder / "tiny.yaml").write_text(SPEC)
    result = run(folder / "tiny.yaml", mode="train", runs_dir=folder / "runs", progress=False)
    return load_spec(folder / "tiny.yaml"), result.path / "t0"


def columns(path: Path) -> dict[str, list[float]]:
    rows = read_checkpoints(path)
    return {name: [row[name] for row in rows] for name in COLUMNS}


def files(path: Path) -> list[str]:
    return sorted(
        "events.out.tfevents" if p.name.startswith("events.") else p.name for p in path.iterdir()
    )


def test_the_trial_is_one_job(tmp_path):
    spec = load_spec_text(tmp_path, SPEC)
    jobs = TrialRun(spec, 0, tmp_path / "t0", {}, 1, 20.0).jobs()
    assert [(job.session, job.seed) for job in jobs[0].members] == [(0, 5), (1, 6)]
    assert len(jobs) == 1
    # One W&B run per process: with wandb tracking the sessions run as separate processes.
    tracked = load_spec_text(tmp_path, SPEC.replace("seed: 5", "seed: 5\n    track: wandb"))
    assert len(TrialRun(tracked, 1, tmp_path / "t1", {}, 1, 20.0).jobs()) == 2


def test_each_session_equals_its_lone_run(trial, tmp_path):
    """Session s of the one-program trial against session s run alone (its own process
    state, one seed): the same checkpoints (frames and opt steps exactly; returns within
    1e-6 relative, though on this machine they agree exactly: episode returns are sums of
    env rewards, equal while the sampled actions agree) and the same files."""
    spec, folder = trial
    record = json.loads((folder / "trial.json").read_text())
    assert (record["status"], record["seeds"]) == ("done", [5, 6])
    (job,) = TrialRun(spec, 0, tmp_path / "t0", {}, 1, record["random_return"]).jobs()
    for member in job.members:
        alone = dataclasses.replace(member, path=str(tmp_path / f"alone{member.session}"))
        run_session(alone)
        together = columns(folder / f"s{member.session}")
        lone = columns(Path(alone.path))
        assert len(together["frame"]) == 13
        assert together["frame"] == lone["frame"]
        assert together["opt_step"] == lone["opt_step"]
        for name in ("total_reward", "total_reward_ma"):
            torch.testing.assert_close(
                torch.tensor(together[name]),
                torch.tensor(lone[name]),
                rtol=1e-6,
                atol=0,
                equal_nan=True,
            )
        assert files(folder / f"s{member.session}") == files(Path(alone.path))
        config = json.loads((folder / f"s{member.session}" / "config.json").read_text())
        assert (config["seed"], config["config"]["seeds"]) == (member.seed, 1)


def test_sessions_differ_and_evaluate_reads_their_checkpoints(trial, capsys):
    from batchenv.cli import main

    _, folder = trial
    assert columns(folder / "s0")["total_reward"] != columns(folder / "s1")["total_reward"]
    assert main(["evaluate", str(folder / "s1"), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out


def test_resume_reruns_a_cut_short_trial_from_the_start(trial, tmp_path):
    """A cut-short group restarts from its first step (PPO keeps no mid-run checkpoint) and
    writes the checkpoints the uninterrupted trial wrote."""
    import shutil

    _, folder = trial
    copy = tmp_path / "runs" / "tiny_copy"
    shutil.copytree(folder.parent, copy)
    for session in ("s0", "s1"):
        cut = copy / "t0" / session
        (cut / "session.json").unlink()
        (cut / "checkpoint.pt").unlink()
        lines = (cut / "checkpoints.csv").read_text().splitlines()[:4]
        (cut / "checkpoints.csv").write_text("\n".join(lines) + "\n")
    run(resume=copy, progress=False)
    for session in ("s0", "s1"):
        assert columns(copy / "t0" / session) == columns(folder / session)
        assert (copy / "t0" / session / "session.json").exists()


def test_a_wrong_env_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys):
    from batchenv.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("env: CartPole-v1", "env: CartPole-v0"))
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("batchenv run: error: spec 'tiny': PPO trains the in-graph envs ")
    assert err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


MINATAR_SPECS = list(read_specs(SPECS / "ppo_minatar.yaml"))


@pytest.mark.parametrize(
    ("file", "name"), [("ppo.yaml", None)] + [("ppo_minatar.yaml", n) for n in MINATAR_SPECS]
)
def test_the_shipped_ppo_specs_load(file, name):
    spec = load_spec(SPECS / file, name)
    config = spec.make_config(spec.session_seed(0, 0))
    assert spec.meta.sessions == 4
    assert spec.trainer().can_train_together(
        [spec.make_config(spec.session_seed(0, s)) for s in range(4)]
    )
    assert config.num_updates * config.batch_size // spec.meta.log_frequency in (399, 400)


class GroupToyTrainer(ToyTrainer):
    """The toy trainer, declaring every trial's sessions trainable together: it trains them
    one after the other in the group's process and records the cores it was given."""

    def can_train_together(self, configs):
        return True

    def train_together(self, configs, run_dirs, *, resume, progress, cpus, reports):
        for config, run_dir, report in zip(configs, run_dirs, reports):
            self.train(config, run_dir, resume=resume, progress=progress, cpus=cpus, report=report)
            (Path(run_dir) / "cpus.txt").write_text(str(cpus))


GROUP_TOY = "tests.experiment.test_ppo_trial:GroupToyTrainer"


def toy_group_spec(folder: Path, config: dict) -> Path:
    import yaml

    meta = {"sessions": 3, "steps": 300}
    spec = {"algorithm": GROUP_TOY, "env": "toy", "config": config, "meta": meta}
    path = folder / "group.yaml"
    path.write_text(yaml.safe_dump({"group": spec}))
    return path


def test_a_group_is_one_process_with_the_cores_of_its_slots(tmp_path):
    path = toy_group_spec(tmp_path, {})
    result = run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)
    folder = result.path / "t0"
    pids = {(folder / f"s{s}" / "starts.txt").read_text().split()[0] for s in range(3)}
    assert len(pids) == 1
    cpus = {(folder / f"s{s}" / "cpus.txt").read_text() for s in range(3)}
    assert cpus == {str(min(3, available_cores()))}
    assert json.loads((folder / "trial.json").read_text())["status"] == "done"
    assert all((folder / f"s{s}" / "session.json").exists() for s in range(3))


def test_a_group_that_raises_fails_its_trial(tmp_path):
    path = toy_group_spec(tmp_path, {"x": 0.9, "crash_above": 0.5})
    with pytest.raises(SessionFailedError, match=r"^trial 0 session 0 \(seed 0\) failed: "):
        run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)


def test_a_session_no_process_reported_fails_the_trial_instead_of_a_wait(tmp_path):
    spec = load_spec(toy_group_spec(tmp_path, {}))
    trial = TrialRun(spec, 0, tmp_path / "t0", {}, 1, 0.0)
    trial.on_done(0, {})
    trial.on_lost()
    assert trial.finished
    assert str(trial.error) == (
        "trial 0 session 1 (seed 1) failed: SessionLostError: its process ended without "
        "reporting it done"
    )


def load_spec_text(folder: Path, text: str):
    path = folder / "spec.yaml"
    path.write_text(text)
    return load_spec(path)
