"""The one scaffold of the kernel envs (``batchenv/kernels/_base.py``): every classic and Tag
env runs on it, its seeding streams are the ones the envs drew before they shared it (values
recorded from the per-family code it replaced), and it treats both families alike."""

from __future__ import annotations

import pytest
import torch

from batchenv.kernels import (
    Acrobot,
    CartPole,
    ContinuousTag,
    DiscreteTag,
    MountainCarContinuous,
    Pendulum,
)
from batchenv.kernels._base import KernelEnv

CLASSIC = (CartPole, Pendulum, MountainCarContinuous, Acrobot)


def _tag(cls, num_envs=3, **kwargs):
    if cls is DiscreteTag:
        return DiscreteTag(num_envs, num_taggers=2, grid_length=9, **kwargs)
    return ContinuousTag(num_envs, num_taggers=1, num_runners=2, **kwargs)


def _zero_action(env) -> torch.Tensor:
    space = env.single_action_space
    agents = (env.num_agents,) if hasattr(env, "num_agents") else ()
    dtype = torch.float32 if space.dtype.kind == "f" else torch.int64
    return torch.zeros((env.num_envs, *agents, *space.shape), dtype=dtype)


@pytest.mark.parametrize("cls", [*CLASSIC, DiscreteTag, ContinuousTag], ids=lambda c: c.__name__)
def test_every_kernel_env_runs_on_the_one_scaffold(cls):
    env = cls(2, seed=0) if cls in CLASSIC else _tag(cls, seed=0)
    assert isinstance(env, KernelEnv)
    assert type(env).step is KernelEnv.step and type(env).reset_where is KernelEnv.reset_where


def test_classic_fresh_starts_are_the_recorded_stream():
    env = CartPole(2, seed=7)
    assert env.state.tolist() == [
        [0.023296568542718887, -0.04004698991775513, 0.02827638015151024, 0.03572816029191017],
        [-0.010236077010631561, 0.004009157419204712, -0.04483495280146599, 0.009700693190097809],
    ]
    env.reset(torch.tensor([1]))
    assert env.state[1].tolist() == [
        -0.025437522679567337,
        0.021652396768331528,
        0.01116262748837471,
        0.03333413973450661,
    ]


def test_tag_fresh_starts_are_the_recorded_stream():
    env = DiscreteTag(2, num_taggers=2, grid_length=9, seed=7)
    assert env.state.tolist() == [[[7, 0], [7, 8], [0, 1]], [[3, 5], [0, 5], [7, 1]]]
    env.reset_where(torch.tensor([False, True]))
    assert env.state.tolist() == [[[7, 0], [7, 8], [0, 1]], [[2, 7], [6, 8], [7, 7]]]
    runners = ContinuousTag(1, num_taggers=1, num_runners=1, seed=7)
    assert runners.state.tolist() == [
        [
            [7.329656600952148, 0.9953010082244873, 0.0, 0.0, 4.71238899230957, 1.0],
            [8.572815895080566, 0.7830464839935303, 0.0, 0.0, 0.0, 1.0],
        ]
    ]


@pytest.mark.parametrize("cls", [DiscreteTag, ContinuousTag], ids=lambda c: c.__name__)
def test_tag_envs_write_their_state_in_place_like_the_classic_envs(cls):
    env = _tag(cls, seed=1)
    state, elapsed, restarts = env.state, env.elapsed, env._restarts
    env.step(_zero_action(env), torch.tensor([True, False, False]))
    env.reset(torch.tensor([2]))
    env.reset_where(torch.tensor([False, True, False]))
    env.set_state({"elapsed": torch.tensor([4, 5, 6])})
    env.seed(3)
    assert env.state is state and env.elapsed is elapsed and env._restarts is restarts
    assert env.elapsed.tolist() == [4, 5, 6]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CartPole(2, seed="x"), "seed must be an int, a list of ints or None"),
        (lambda: _tag(DiscreteTag, seed=[1, 2, 3]), "seed must be an int or None"),
        (lambda: _tag(ContinuousTag, num_envs=0), "num_envs must be an int >= 1"),
        (lambda: Pendulum(0), "num_envs must be an int >= 1"),
        (lambda: _tag(DiscreteTag, backend="jax"), "unknown backend; choose one of"),
    ],
    ids=["classic-seed", "tag-seed-list", "tag-num_envs", "classic-num_envs", "tag-backend"],
)
def test_the_scaffold_keeps_each_familys_messages(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("seed", [-1, 1 << 70], ids=["negative", "beyond-64-bits"])
def test_seeds_are_taken_modulo_2_to_the_64(seed):
    env, same = CartPole(3, seed=seed), CartPole(3, seed=seed % (1 << 64))
    assert torch.equal(env.state, same.state)
    tag, same_tag = _tag(DiscreteTag, seed=seed), _tag(DiscreteTag, seed=seed % (1 << 64))
    assert torch.equal(tag.state, same_tag.state)
