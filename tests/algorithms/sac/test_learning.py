"""SAC learns: Pendulum (Box actions) and CartPole (discrete), at stated step budgets.

Each runs the in-graph env with 64-64 networks, so a run takes minutes on two cores;
docs/sac.md has the full presets' results.
"""

from __future__ import annotations

import pytest

from batchenv.algorithms.sac import PRESETS, train

pytestmark = pytest.mark.slow


def test_pendulum_within_8k_steps(tmp_path):
    # Budget: 8,000 env steps (4 envs), learning from step 1,000; random play scores ~-1,200.
    config = PRESETS["pendulum"].replace(
        env="batchenv.kernels:Pendulum", steps=8_000, hidden_layers=(64, 64), eval_episodes=4
    )
    scores = train(config, logdir=tmp_path, progress=False)
    assert len(scores) == 8
    assert sum(scores[-3:]) / 3 >= -400, scores


def test_cartpole_discrete_within_22k_steps(tmp_path):
    # Budget: 22,000 env steps (4 envs) of the cartpole_discrete preset (expectation
    # variant); a random policy scores ~22. The last two evaluations must be near 500.
    config = PRESETS["cartpole_discrete"].replace(env="batchenv.kernels:CartPole", steps=22_000)
    scores = train(config, logdir=tmp_path, progress=False)
    assert len(scores) == 11
    assert min(scores[-2:]) >= 475, scores
