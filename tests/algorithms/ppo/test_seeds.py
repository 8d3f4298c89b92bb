"""K seeds in one program equal their lone runs, and share no state."""

from __future__ import annotations

import pytest
import torch

from batchenv.algorithms.ppo import PPOConfig, train

SMALL = dict(num_envs=3, num_steps=32, num_minibatches=2, update_epochs=2)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_each_seed_equals_its_lone_run(compiled):
    updates = 6
    config = PPOConfig(total_timesteps=updates * 96, seed=10, compile=compiled, **SMALL)
    together = train(PPOConfig(**{**config.__dict__, "seeds": 3}))
    for k in range(3):
        lone = train(PPOConfig(**{**config.__dict__, "seed": 10 + k, "seeds": 1}))
        # Batched matrix products may round differently from single ones: parameters agree
        # to float32 rounding, and episode returns (sums of env rewards) exactly while the
        # sampled actions agree.
        torch.testing.assert_close(together.ppo.params[k], lone.ppo.params[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(
            together.returns[:, k], lone.returns[:, 0], equal_nan=True, rtol=0, atol=0
        )


def test_seeds_share_no_state():
    """Agent 1's data changes agent 1's update only: agent 0's step is bit-for-bit the same."""
    import copy

    import gymnasium as gym

    from batchenv.algorithms.ppo import PPO

    config = PPOConfig(compile=False, **SMALL)
    space = gym.spaces.Box(-1.0, 1.0, (4,))
    ppo = PPO(config, space, gym.spaces.Discrete(2), seeds=[0, 1])
    assert not torch.equal(ppo.params[0], ppo.params[1])  # each its own initialisation
    generator = torch.Generator().manual_seed(0)
    for value in ppo.buffer.values():
        if value.dtype == torch.bool:
            value.copy_(torch.rand(value.shape, generator=generator) < 0.1)
        elif value.dtype == torch.int64:
            value.copy_(torch.randint(0, 2, value.shape, generator=generator))
        else:
            value.copy_(torch.randn(value.shape, generator=generator))
    results = []
    for agent_one_reward in (0.0, 100.0):
        run = copy.deepcopy(ppo)
        run.buffer["reward"][:, 1] = agent_one_reward
        run.update()
        results.append(run.params)
    assert torch.equal(results[0][0], results[1][0])
    assert not torch.equal(results[0][1], results[1][1])


def test_small_programs_on_a_cpu_run_on_one_thread():
    from batchenv.algorithms.ppo.config import ONE_THREAD_ROWS, PPOConfig

    assert PPOConfig().threads() == 1  # 4 CartPoles a step
    assert PPOConfig(num_envs=ONE_THREAD_ROWS // 2, seeds=2).threads() == 1
    assert PPOConfig(seeds=8).threads() == 0  # 32 rows: torch's default
    assert PPOConfig(num_envs=ONE_THREAD_ROWS + 1).threads() == 0
    assert PPOConfig(device="cuda").threads() == 0
    assert PPOConfig(torch_threads=2).threads() == 2  # asked for: kept
