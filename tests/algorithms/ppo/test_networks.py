"""The stacked actor-critic's layers: the fused small-batch form equals the matmul form."""

import pytest
import torch

from batchenv.algorithms.ppo import networks
from batchenv.algorithms.ppo.networks import SMALL_BATCH, ActorCritic, _linear


@pytest.mark.parametrize("rows", [1, 4, SMALL_BATCH, SMALL_BATCH + 1, 128])
def test_linear_equals_baddbmm_at_every_batch_size(rows):
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(3, rows, 64, generator=generator)
    weight = torch.randn(3, 64, 32, generator=generator)
    bias = torch.randn(3, 32, generator=generator)
    expected = torch.baddbmm(bias[:, None, :], x, weight)
    torch.testing.assert_close(_linear(x, weight, bias), expected, rtol=1e-5, atol=1e-5)


def test_small_batches_take_the_fused_form(monkeypatch):
    calls = []
    real = torch.baddbmm
    monkeypatch.setattr(networks.torch, "baddbmm", lambda *a: calls.append(a[1].shape) or real(*a))
    net = ActorCritic(obs_dim=4, action_dim=2, discrete=True, hidden=8)
    params = net.init([0, 1])
    net(params, torch.zeros(2, SMALL_BATCH, 4))
    assert calls == []
    net(params, torch.zeros(2, SMALL_BATCH + 1, 4))
    assert len(calls) == 6  # three layers of the actor and three of the critic


def test_the_gradient_of_the_split_form_joined_is_the_flat_gradient():
    net = ActorCritic(obs_dim=4, action_dim=2, discrete=False, hidden=8)
    params = net.init([3, 4])
    observ = torch.randn(2, 40, 4, generator=torch.Generator().manual_seed(2))

    def loss(p):
        head, value = net(p, observ)
        return (head.square().sum() + value.sum() * net.log_std(p).sum()).sum()

    flat = torch.func.grad(loss)(params)
    joined = net.join(torch.func.grad(loss)(net.split(params)))
    assert joined.shape == params.shape
    torch.testing.assert_close(joined, flat, rtol=1e-6, atol=1e-7)
    assert torch.equal(net.join(net.split(params)), params)
