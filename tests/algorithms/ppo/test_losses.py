"""PPO's loss terms, GAE and the optimiser against hand-computed values and torch.optim."""

from __future__ import annotations

import math

import pytest
import torch

from batchenv.algorithms.ppo.losses import discounted_sums, gae, ppo_loss
from batchenv.algorithms.ppo.optim import adam_init, adam_step, with_powers


def test_gae_by_hand():
    # Two steps, no episode end: delta_t = r_t + gamma V(s_t+1) - V(s_t).
    reward = torch.tensor([[1.0, 2.0]])
    value = torch.tensor([[0.5, 1.0]])
    next_value = torch.tensor([[1.0, 3.0]])
    no = torch.tensor([[False, False]])
    advantage, returns = gae(reward, value, next_value, no, no, gamma=0.9, lam=0.5)
    delta0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    delta1 = 2.0 + 0.9 * 3.0 - 1.0  # 3.7
    assert advantage[0].tolist() == pytest.approx([delta0 + 0.45 * delta1, delta1])
    assert returns[0].tolist() == pytest.approx([delta0 + 0.45 * delta1 + 0.5, delta1 + 1.0])


def test_gae_termination_and_truncation():
    reward = torch.tensor([[1.0, 1.0, 1.0]])
    value = torch.zeros(1, 3)
    next_value = torch.tensor([[2.0, 5.0, 7.0]])
    terminated = torch.tensor([[True, False, False]])
    done = torch.tensor([[True, True, False]])  # step 1 is a time-limit end
    advantage, _ = gae(reward, value, next_value, terminated, done, gamma=0.5, lam=1.0)
    # Step 0 ends without bootstrap; step 1 bootstraps from its final observation (5) but
    # the sum stops there; step 2 bootstraps from the next observation (7).
    assert advantage[0].tolist() == pytest.approx([1.0, 1.0 + 0.5 * 5.0, 1.0 + 0.5 * 7.0])


@pytest.mark.parametrize("steps", [1, 2, 33, 128])
def test_discounted_sums_match_the_reverse_loop(steps):
    generator = torch.Generator().manual_seed(steps)
    x = torch.randn(5, steps, generator=generator)
    done = torch.rand(5, steps, generator=generator) < 0.05
    expected = torch.zeros_like(x)
    carry = torch.zeros(5)
    for t in reversed(range(steps)):
        carry = x[:, t] + 0.99 * 0.95 * (~done[:, t]).float() * carry
        expected[:, t] = carry
    result = discounted_sums(x, done, 0.99 * 0.95)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_ppo_loss_by_hand():
    # One agent, two samples; advantages not normalised so the numbers stay readable.
    log_prob = torch.tensor([[math.log(0.5), math.log(0.2)]])
    old_log_prob = torch.tensor([[math.log(0.25), math.log(0.25)]])  # ratios 2.0 and 0.8
    advantage = torch.tensor([[1.0, -1.0]])
    value = torch.tensor([[1.0, 0.0]])
    old_value = torch.tensor([[0.5, 0.0]])
    returns = torch.tensor([[2.0, 1.0]])
    entropy = torch.tensor([[0.6, 0.4]])
    total, terms = ppo_loss(
        log_prob,
        old_log_prob,
        advantage,
        value,
        old_value,
        returns,
        entropy,
        clip_eps=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        clip_value=True,
        norm_adv=False,
    )
    # min(2.0 * 1, 1.2 * 1) = 1.2 ; min(0.8 * -1, 0.8 * -1) = -0.8 -> actor = -(1.2 - 0.8) / 2
    assert terms["actor_loss"].item() == pytest.approx(-0.2)
    # value 1.0 clipped to 0.5 + 0.2 = 0.7: max((1-2)^2, (0.7-2)^2) = 1.69; (0-1)^2 = 1
    assert terms["value_loss"].item() == pytest.approx(0.5 * (1.69 + 1.0) / 2)
    assert terms["entropy"].item() == pytest.approx(0.5)
    expected = -0.2 + 0.5 * 0.5 * 2.69 / 2 - 0.01 * 0.5
    assert total.item() == pytest.approx(expected)
    kl = ((2.0 - 1) - math.log(2.0) + (0.8 - 1) - math.log(0.8)) / 2
    assert terms["approx_kl"].item() == pytest.approx(kl)


def test_ppo_loss_normalises_advantages_per_agent():
    advantage = torch.tensor([[1.0, 3.0], [10.0, 30.0]])
    zeros = torch.zeros(2, 2)
    _, terms = ppo_loss(
        zeros,
        zeros,
        advantage,
        zeros,
        zeros,
        zeros,
        zeros,
        clip_eps=0.2,
        vf_coef=0.0,
        ent_coef=0.0,
        norm_adv=True,
    )
    # ratio 1: actor = -mean(normalised advantage) = 0 for both agents, whatever the scale.
    assert terms["actor_loss"].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_adam_with_clipping_matches_torch_optim():
    generator = torch.Generator().manual_seed(1)
    start = torch.randn(2, 6, generator=generator)
    grads = [torch.randn(2, 6, generator=generator) * 3 for _ in range(4)]
    params, state = start.clone(), adam_init(start)
    for grad in grads:
        params, state = adam_step(params, grad, state, torch.tensor(0.01), max_norm=0.5)
    for agent in range(2):  # each agent (row) is its own torch.optim run
        weight = torch.nn.Parameter(start[agent].clone())
        optimizer = torch.optim.Adam([weight], lr=0.01, eps=1e-5)
        for grad in grads:
            weight.grad = grad[agent].clone()
            torch.nn.utils.clip_grad_norm_([weight], 0.5)
            optimizer.step()
        torch.testing.assert_close(params[agent], weight.detach(), rtol=1e-5, atol=1e-6)


def test_adam_keeps_the_bias_corrections_powers_and_fills_them_for_older_states():
    params, state = torch.zeros(1, 3), adam_init(torch.zeros(1, 3))
    for _ in range(5):
        params, state = adam_step(params, torch.ones(1, 3), state, torch.tensor(0.1), 0.5)
    assert float(state["count"]) == 5.0
    assert float(state["beta1_power"]) == pytest.approx(0.9**5, rel=1e-6)
    assert float(state["beta2_power"]) == pytest.approx(0.999**5, rel=1e-6)
    # A state saved before the powers were kept (m, v, count only) steps as one that kept
    # them, to float32 rounding: the powers are filled from the count.
    older = {name: state[name] for name in ("m", "v", "count")}
    filled = with_powers(older)
    assert set(filled) == set(state)
    a = adam_step(params, torch.ones(1, 3), state, torch.tensor(0.1), 0.5)
    b = adam_step(params, torch.ones(1, 3), filled, torch.tensor(0.1), 0.5)
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=0.0)
