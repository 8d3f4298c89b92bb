"""PPO's compiled update programs belong to their PPO: a second PPO in the same process (a
notebook, an in-process search) traces its own, with its own constants."""

from __future__ import annotations

import torch

from batchenv.algorithms.ppo import algorithm
from batchenv.algorithms.ppo.config import PPOConfig
from batchenv.algorithms.ppo.train import make_env, make_ppo
from batchenv.in_graph.rollout import rollout


def test_two_ppos_with_different_gammas_each_compute_their_own_returns():
    for gamma in (0.99, 0.5):
        config = PPOConfig(total_timesteps=10_000, num_steps=16, gamma=gamma)
        env = make_env(config)
        ppo = make_ppo(config, env)
        rollout(env, ppo, steps=config.num_steps)
        prepare = ppo._program("prepare", algorithm._prepare)
        compiled, _ = prepare(ppo, ppo.buffer, ppo.draws)
        eager, _ = algorithm._prepare(ppo, ppo.buffer, ppo.draws)
        torch.testing.assert_close(compiled["returns"], eager["returns"], rtol=1e-5, atol=1e-5)
