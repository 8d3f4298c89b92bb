"""SAC's loss terms against values computed by hand (docs/sac.md has the formulas)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from batchenv.algorithms.sac.losses import (
    combine_twins,
    expected_policy_loss,
    expected_soft_q_target,
    policy_loss,
    polyak_update,
    q_loss,
    soft_q_target,
    temperature_loss,
)
from batchenv.algorithms.sac.networks import (
    CategoricalPolicy,
    GaussianPolicy,
    gumbel_softmax_sample,
    squashed_log_prob,
)

LOG = math.log


def test_soft_q_target_bootstraps_with_the_memory_discount():
    # Row 0 bootstraps (discount gamma = 0.99: running, or truncated by a time limit);
    # row 1 terminated (discount 0): the target is its reward alone.
    target = soft_q_target(
        reward=torch.tensor([1.0, 0.5]),
        discount=torch.tensor([0.99, 0.0]),
        next_q1=torch.tensor([2.0, 5.0]),
        next_q2=torch.tensor([3.0, 4.0]),
        next_log_prob=torch.tensor([-0.5, 1.0]),
        alpha=0.2,
    )
    # 1 + 0.99 * (min(2, 3) - 0.2 * -0.5) = 1 + 0.99 * 2.1
    assert target.tolist() == pytest.approx([3.079, 0.5], abs=1e-6)


# pi = [0.25, 0.75] (logits 0 and log 3); Q1 = [1, 2], Q2 = [3, 0].
LOGITS = torch.tensor([[0.0, LOG(3.0)]])
Q1 = torch.tensor([[1.0, 2.0]])
Q2 = torch.tensor([[3.0, 0.0]])


@pytest.mark.parametrize(
    "twin, q", [("mean", (2.0, 1.0)), ("min", (1.0, 0.0))], ids=["twin=mean", "twin=min"]
)
def test_expected_soft_q_target_sums_over_actions(twin, q):
    alpha = 0.5
    value = 0.25 * (q[0] - alpha * LOG(0.25)) + 0.75 * (q[1] - alpha * LOG(0.75))
    target = expected_soft_q_target(
        torch.tensor([1.0]), torch.tensor([0.9]), LOGITS, Q1, Q2, alpha, twin
    )
    assert target.item() == pytest.approx(1.0 + 0.9 * value, abs=1e-6)
    terminated = expected_soft_q_target(
        torch.tensor([1.0]), torch.tensor([0.0]), LOGITS, Q1, Q2, alpha, twin
    )
    assert terminated.item() == 1.0


def test_combine_twins_rejects_an_unknown_rule():
    assert combine_twins(Q1, Q2, "mean").tolist() == [[2.0, 1.0]]
    with pytest.raises(ValueError, match="twin rule must be 'min' or 'mean', got 'max'"):
        combine_twins(Q1, Q2, "max")


def test_q_loss_is_the_sum_of_both_mean_squared_errors():
    target = torch.tensor([1.0, 2.0])
    loss = q_loss(torch.tensor([0.0, 2.0]), torch.tensor([3.0, 0.0]), target)
    assert loss.item() == pytest.approx((1 + 0) / 2 + (4 + 4) / 2)


def test_policy_loss_uses_the_smaller_q():
    loss = policy_loss(
        log_prob=torch.tensor([-1.0, 0.5]),
        q1=torch.tensor([2.0, 1.0]),
        q2=torch.tensor([1.0, 3.0]),
        alpha=0.1,
    )
    assert loss.item() == pytest.approx(((-0.1 - 1.0) + (0.05 - 1.0)) / 2)


def test_expected_policy_loss_and_entropy_by_hand():
    alpha = 0.5
    logits = LOGITS.clone().requires_grad_(True)
    q1, q2 = Q1.clone().requires_grad_(True), Q2.clone()
    loss, entropy = expected_policy_loss(logits, q1, q2, alpha, "mean")
    by_hand = 0.25 * (alpha * LOG(0.25) - 2.0) + 0.75 * (alpha * LOG(0.75) - 1.0)
    assert loss.item() == pytest.approx(by_hand, abs=1e-6)
    assert entropy.item() == pytest.approx(-(0.25 * LOG(0.25) + 0.75 * LOG(0.75)), abs=1e-6)
    loss.backward()
    assert q1.grad is None  # the critics are held fixed in the policy loss
    assert logits.grad is not None and bool(logits.grad.abs().sum() > 0)


def test_temperature_loss_lowers_alpha_above_the_target_entropy():
    log_alpha = torch.tensor([LOG(0.5)], requires_grad=True)
    entropy = torch.tensor([1.0, 0.2])
    loss = temperature_loss(log_alpha, entropy, target_entropy=0.4)
    assert loss.item() == pytest.approx(0.5 * ((1.0 - 0.4) + (0.2 - 0.4)) / 2)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(0.1)  # > 0: a gradient step lowers alpha
    # Continuous form: the same as CleanRL's -mean(alpha * (log pi + target)), H = -log pi.
    log_prob = -entropy
    cleanrl = -(log_alpha.detach().exp() * (log_prob + 0.4)).mean()
    assert temperature_loss(log_alpha.detach(), entropy, 0.4).item() == pytest.approx(
        cleanrl.item()
    )


def test_squashed_log_prob_has_the_tanh_correction():
    u, scale = torch.tensor([[0.5, -1.5]]), torch.tensor([2.0, 0.5])
    mean, log_std = torch.tensor([[0.0, -1.0]]), torch.tensor([[0.0, LOG(0.5)]])
    gaussian = [-0.5 * 0.5**2 - 0.5 * LOG(2 * math.pi),
                -0.5 * (-0.5 / 0.5) ** 2 - LOG(0.5) - 0.5 * LOG(2 * math.pi)]  # fmt: skip
    correction = [LOG(2.0 * (1 - math.tanh(0.5) ** 2)), LOG(0.5 * (1 - math.tanh(-1.5) ** 2))]
    by_hand = sum(gaussian) - sum(correction)
    assert squashed_log_prob(u, mean, log_std, scale).item() == pytest.approx(by_hand, abs=1e-5)
    # CleanRL's form (epsilon 1e-6 inside the log) agrees away from the bounds ...
    y = torch.tanh(u)
    normal = torch.distributions.Normal(mean, log_std.exp())
    cleanrl = (normal.log_prob(u) - torch.log(scale * (1 - y.pow(2)) + 1e-6)).sum(-1)
    assert squashed_log_prob(u, mean, log_std, scale).item() == pytest.approx(
        cleanrl.item(), abs=1e-4
    )
    # ... and ours stays exact and finite where tanh(u) rounds to 1.
    far = squashed_log_prob(torch.tensor([[20.0]]), torch.zeros(1, 1), torch.zeros(1, 1),
                            torch.ones(1))  # fmt: skip
    expected = -0.5 * 400 - 0.5 * LOG(2 * math.pi) - 2 * (LOG(2.0) - 20.0)
    assert far.item() == pytest.approx(expected, rel=1e-6)


def test_gaussian_policy_actions_stay_in_the_box_with_their_log_prob():
    torch.manual_seed(0)
    policy = GaussianPolicy(3, torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]), (16,))
    generator = torch.Generator().manual_seed(0)
    action, log_prob = policy.sample(torch.randn(500, 3) * 10, generator)
    assert action.shape == (500, 2) and log_prob.shape == (500,)
    assert bool((action[:, 0].abs() <= 2).all())
    assert bool(((action[:, 1] >= 0) & (action[:, 1] <= 1)).all())
    mode = policy.mode(torch.zeros(1, 3))
    mean, _ = policy(torch.zeros(1, 3))
    assert mode[0].tolist() == pytest.approx(
        [2 * math.tanh(mean[0, 0].item()), 0.5 + 0.5 * math.tanh(mean[0, 1].item())], abs=1e-6
    )


def test_gumbel_softmax_sample_is_one_hot_with_categorical_frequencies_and_gradients():
    logits = torch.tensor([[0.0, LOG(3.0)]]).expand(20_000, 2).clone().requires_grad_(True)
    sample = gumbel_softmax_sample(logits, 1.0, torch.Generator().manual_seed(0))
    assert set(sample.detach().sum(-1).tolist()) == {1.0}
    assert set(sample.detach().flatten().tolist()) == {0.0, 1.0}
    assert sample[:, 1].mean().item() == pytest.approx(0.75, abs=0.01)
    (sample[:, 1] * 1.0).sum().backward()  # straight through: the relaxed sample's gradient
    assert bool(logits.grad.abs().sum() > 0)


def test_categorical_policy_samples_with_the_softmax_frequencies():
    policy = CategoricalPolicy(1, 3, ())
    with torch.no_grad():
        policy.logits[0].weight.zero_()
        policy.logits[0].bias.copy_(torch.tensor([0.0, LOG(2.0), LOG(5.0)]))
    actions = policy.sample(torch.zeros(40_000, 1), torch.Generator().manual_seed(1))
    frequencies = torch.bincount(actions, minlength=3).float() / 40_000
    assert frequencies.tolist() == pytest.approx([0.125, 0.25, 0.625], abs=0.01)
    assert policy.mode(torch.zeros(2, 1)).tolist() == [2, 2]


def test_polyak_update_moves_the_target_by_tau():
    online, target = nn.Linear(2, 1), nn.Linear(2, 1)
    with torch.no_grad():
        for param in online.parameters():
            param.fill_(1.0)
        for param in target.parameters():
            param.fill_(0.0)
    polyak_update(online, target, tau=0.25)
    assert [p.tolist() for p in target.parameters()] == [[[0.25, 0.25]], [0.25]]
    polyak_update(online, target, tau=0.25)  # 0.25 + 0.25 * (1 - 0.25)
    assert [p.tolist() for p in target.parameters()] == [[[0.4375, 0.4375]], [0.4375]]
    assert [p.tolist() for p in online.parameters()] == [[[1.0, 1.0]], [1.0]]
