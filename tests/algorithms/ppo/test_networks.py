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


def test_lecun_init_draws_as_flax_dense_and_biases_from_the_given_range():
    net = ActorCritic(400, 6, True, hidden=256, init="lecun", bias_init=0.05)
    params = net.split(net.init([3]))
    for name, shape, gain in net.layers:
        value = params[name][0]
        if gain is None:  # a bias: U[0, 0.05)
            assert 0.0 <= float(value.min()) and float(value.max()) < 0.05
            continue
        # Variance 1/fan_in after the truncation at two standard deviations of the normal
        # drawn (1/fan_in divided by 0.8796^2).
        fan_in = shape[0]
        bound = 2.0 * (1.0 / fan_in) ** 0.5 / networks._TRUNCATED_STD
        assert float(value.abs().max()) <= bound
        if value.numel() >= 1000:
            assert abs(float(value.std()) * fan_in**0.5 - 1.0) < 0.05, name
    # The output layers are drawn like the hidden ones (no 0.01 policy gain).
    assert float(params["actor2.weight"].std()) > 0.05


def test_each_agents_init_depends_on_its_seed_only_whatever_the_scheme():
    for init, bias_init in (("orthogonal", 0.0), ("lecun", 0.05), ("orthogonal", 0.05)):
        net = ActorCritic(4, 2, True, hidden=8, init=init, bias_init=bias_init)
        both = net.init([5, 9])
        torch.testing.assert_close(both[1:], net.init([9]), rtol=0, atol=0)
        assert not torch.equal(both[0], both[1])


def test_the_default_init_has_zero_biases_and_the_orthogonal_gains():
    net = ActorCritic(4, 2, True, hidden=64)
    params = net.split(net.init([0]))
    assert all(not params[name].any() for name, _, gain in net.layers if gain is None)
    hidden = params["actor1.weight"][0]  # orthogonal with gain sqrt(2): W^T W = 2 I
    torch.testing.assert_close(hidden.t() @ hidden, 2.0 * torch.eye(64), atol=1e-5, rtol=0)
    policy = params["actor2.weight"][0]  # [64, 2], columns orthogonal with gain 0.01
    torch.testing.assert_close(policy.t() @ policy, 1e-4 * torch.eye(2), atol=1e-8, rtol=0)
