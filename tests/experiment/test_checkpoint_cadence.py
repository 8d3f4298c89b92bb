"""SLM Lab's checkpoint cadence: meta.log_frequency env frames, independent of the rounds."""

from __future__ import annotations

import csv
import math

import pytest
import torch
import yaml

from batchenv.algorithms.batchppo import PRESETS, train
from batchenv.algorithms.batchppo.log_checkpoints import LogCheckpoints
from batchenv.experiment import SpecError, load_spec

# In-graph Pendulum, 4 rows: episodes are 200 steps, a round's train phase 4 episodes
# (800 frames, one update), as in tests/algorithms/batchppo/test_train.py.
TINY = PRESETS["pendulum"].replace(
    env="batchenv.kernels:Pendulum",
    num_agents=4,
    update_every=4,
    eval_episodes=4,
    policy_layers=(16, 16),
    value_layers=(16, 16),
    update_epochs=3,
    learning_rate=1e-3,
    steps=800,
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_checkpoint_fires_as_slm_lab_s_frame_mod_and_averages_recent_episodes():
    # 3 envs, frequency 5, 13 frames budget: frames 3, 6, 9, 12, 15 after each step.
    # frame % 5 < 3 at 6 (1), 12 (2) and 15 (0); 15 >= 13 also ends the run.
    log = LogCheckpoints(frequency=5, num_envs=3, last_frame=13)
    steps = [
        ([False, False, False], [1.0, 2.0, 3.0], False),  # frame 3
        ([True, False, False], [4.0, 5.0, 6.0], True),  # frame 6: episode 4 -> mean 4
        ([False, True, True], [7.0, 8.0, 9.0], False),  # frame 9: episodes 8, 9
        ([False, False, False], [1.0, 1.0, 1.0], True),  # frame 12: mean of 4, 8, 9 = 7
        ([True, False, False], [-3.0, 0.0, 0.0], False),  # frame 15: mean of 4, 8, 9, -3 = 4.5
    ]
    for done, score, updated in steps:
        log.step(torch.tensor(done), torch.tensor(score), updated)
    assert log.take() == [(6, 4.0, 1), (12, 7.0, 2), (15, 4.5, 2)]
    assert log.take() == []
    assert log.state_dict() == {"frame": 15, "updates": 2, "recent": [4.0, 8.0, 9.0, -3.0]}


def test_no_episode_yet_is_nan_and_only_the_last_100_count():
    log = LogCheckpoints(frequency=2, num_envs=2, last_frame=10**6)
    log.step(torch.tensor([False, False]), torch.tensor([1.0, 1.0]), False)
    ((frame, reward, _),) = log.take()
    assert frame == 2 and math.isnan(reward)
    for value in range(150):  # 150 episodes of return 0..149, one a step
        log.step(torch.tensor([True, False]), torch.tensor([float(value), 0.0]), False)
    assert log.take()[-1][1] == sum(range(50, 150)) / 100  # the last 100: 50..149


def test_agents_scores_are_averaged_per_row():
    log = LogCheckpoints(frequency=2, num_envs=2, last_frame=10**6)
    log.step(torch.tensor([True, False]), torch.tensor([[1.0, 3.0], [5.0, 5.0]]), False)
    assert log.take() == [(2, 2.0, 0)]


def test_the_shipped_cartpole_spec_has_slm_lab_s_400_checkpoints():
    spec = load_spec("specs/batchppo.yaml", "cartpole")
    config = spec.make_config(0)
    assert config.log_frequency == 500 and config.steps == 200_000
    log = LogCheckpoints(config.log_frequency, config.num_agents, config.steps)
    while log.frame < config.steps:  # the run stops at the first step at or past steps
        log.step(torch.zeros(config.num_agents, dtype=torch.bool), torch.zeros(30), False)
    frames = [frame for frame, _, _ in log.take()]
    # SLM Lab's ppo_cartpole: 200k frames, log_frequency 500 -> 400 checkpoints
    assert len(frames) == 400 and frames[0] == 510 and frames[-1] == 200_010


def test_train_reports_checkpoints_within_rounds_and_resumes_them_exactly(tmp_path):
    # log_frequency 100 on 4 rows: frames 100, 200, ..., 800 in the first round's train
    # phase; the 4 episodes end together at frame 800 (one update there).
    seen = []
    train(
        TINY.replace(log_frequency=100),
        logdir=tmp_path / "a",
        progress=False,
        on_checkpoint=lambda *row: seen.append(row),
    )
    assert [frame for frame, _, _ in seen] == [100, 200, 300, 400, 500, 600, 700, 800]
    assert all(math.isnan(reward) for _, reward, _ in seen[:-1])
    with open(tmp_path / "a" / "metrics.csv", newline="") as file:
        train_row = next(row for row in csv.DictReader(file) if row["phase"] == "train")
    assert seen[-1][1] == pytest.approx(float(train_row["mean_score"]))  # its 4 episodes
    assert seen[-1][2] == 1

    # 1600 steps at once, against 800 then a resume to 1600: the same checkpoints
    straight = []
    config = TINY.replace(log_frequency=100, steps=1600)
    train(
        config, logdir=tmp_path / "b", progress=False, on_checkpoint=lambda *r: straight.append(r)
    )
    resumed = []
    train(TINY.replace(log_frequency=100), logdir=tmp_path / "c", progress=False)
    train(
        config,
        logdir=tmp_path / "c",
        resume=True,
        progress=False,
        on_checkpoint=lambda *r: resumed.append(r),
    )
    assert len(straight) == 16 and resumed == straight[8:]


def test_log_frequency_zero_reports_the_eval_phases_as_before(tmp_path):
    from batchenv.algorithms.batchppo.session import TRAINER

    reports = []
    config = TRAINER.make_config(
        "batchenv.kernels:Pendulum", {}, steps=800, seed=0, eval_every=None, log_frequency=0
    )
    config = config.replace(
        **{
            k: getattr(TINY, k)
            for k in ("num_agents", "update_every", "eval_episodes", "update_epochs")
        }
    )
    TRAINER.train(
        config,
        tmp_path,
        resume=False,
        progress=False,
        cpus=1,
        report=lambda frame, reward, opt_step=None: reports.append((frame, opt_step)),
    )
    assert reports == [(800, 3)]  # one eval phase; 1 update x 3 epochs x 1 minibatch


def test_meta_log_frequency_sets_the_config_and_is_checked(tmp_path):
    def spec(meta=None, config=None, algorithm="batchppo"):
        data = {
            "s": {
                "algorithm": algorithm,
                "env": "batchenv.kernels:CartPole",
                "config": config or {},
                "meta": meta or {},
            }
        }
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    assert load_spec(spec({"log_frequency": 2500})).make_config(0).log_frequency == 2500
    assert load_spec(spec()).make_config(0).log_frequency == 10_000  # SLM Lab's default
    with pytest.raises(SpecError, match=r"^meta.log_frequency must be >= 1 or null, got 0$"):
        load_spec(spec({"log_frequency": 0}))
    with pytest.raises(
        SpecError, match=r"config.log_frequency comes from the spec's meta.log_frequency"
    ):
        load_spec(spec(config={"log_frequency": 10}))
    impala = spec({"log_frequency": 4000, "steps": 100_000}, algorithm="impala")
    impala.write_text(impala.read_text().replace("batchenv.kernels:CartPole", "CartPole-v1"))
    impala = load_spec(impala)
    assert impala.make_config(0).log_every == 4000
