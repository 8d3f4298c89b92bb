"""PPO learns on a fixed step budget (slow: minutes on 2 cores, compile included)."""

from __future__ import annotations

import math

import pytest
import torch

from batchenv.algorithms.ppo import PPOConfig, make_config, train


@pytest.mark.slow
def test_cartpole_reaches_475_within_purejaxrls_budget():
    # PureJaxRL's default config: 4 envs x 128 steps, 5e5 steps; 2 seeds in one program.
    result = train(PPOConfig(seeds=2, seed=0))
    last = torch.nanmean(result.returns[-20:], dim=0)
    assert (last >= 475).all(), last


@pytest.mark.slow
def test_pendulum_reaches_minus_250_within_1e6_steps():
    result = train(make_config("pendulum", seeds=1))
    last = float(torch.nanmean(result.returns[-20:]))
    assert not math.isnan(last) and last >= -250, last
