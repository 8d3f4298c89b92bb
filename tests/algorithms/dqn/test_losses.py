"""DQN and Double-DQN targets, the TD loss and the epsilon schedule against hand values."""

from __future__ import annotations

import pytest
import torch

from batchenv.algorithms.dqn import linear_schedule, td_loss, td_target

# Two transitions, three actions. Row 0 bootstraps with gamma**2 (a 2-step return);
# row 1 terminated (discount 0).
REWARD = torch.tensor([1.5, -1.0])
DISCOUNT = torch.tensor([0.25, 0.0])
NEXT_TARGET = torch.tensor([[2.0, 8.0, 4.0], [5.0, 6.0, 7.0]])
NEXT_ONLINE = torch.tensor([[0.0, 1.0, 3.0], [9.0, 0.0, 0.0]])


def test_dqn_target_takes_the_target_networks_max():
    # 1.5 + 0.25 * max(2, 8, 4); -1 + 0 * 7.
    assert td_target(REWARD, DISCOUNT, NEXT_TARGET).tolist() == [3.5, -1.0]


def test_double_dqn_target_values_the_online_choice_with_the_target_network():
    # Online picks action 2 in row 0 (3.0) -> target value 4.0: 1.5 + 0.25 * 4 = 2.5.
    assert td_target(REWARD, DISCOUNT, NEXT_TARGET, NEXT_ONLINE).tolist() == [2.5, -1.0]


def test_truncated_rows_bootstrap_and_terminated_rows_do_not():
    reward = torch.tensor([1.0, 1.0])
    discount = torch.tensor([0.99, 0.0])  # truncated (time limit), terminated
    next_q = torch.tensor([[10.0, 20.0], [10.0, 20.0]])
    assert td_target(reward, discount, next_q).tolist() == pytest.approx([20.8, 1.0])


def test_mse_and_huber_losses_are_importance_weighted_means():
    q = torch.tensor([0.0, 0.0, 1.0])
    target = torch.tensor([0.5, 3.0, -1.0])
    weights = torch.tensor([1.0, 0.5, 0.25])
    # mse: (0.25 * 1 + 9 * 0.5 + 4 * 0.25) / 3
    assert float(td_loss(q, target, weights, "mse")) == pytest.approx((0.25 + 4.5 + 1.0) / 3)
    # huber (delta 1): 0.5 * 0.25 = 0.125; 3 - 0.5 = 2.5; 2 - 0.5 = 1.5
    expected = (0.125 * 1 + 2.5 * 0.5 + 1.5 * 0.25) / 3
    assert float(td_loss(q, target, weights, "huber")) == pytest.approx(expected)
    with pytest.raises(ValueError, match="kind must be 'mse' or 'huber', got 'l1'"):
        td_loss(q, target, weights, "l1")


def test_loss_gradient_flows_to_q_only():
    q = torch.tensor([1.0, 2.0], requires_grad=True)
    td_loss(q, torch.tensor([0.0, 0.0]), torch.ones(2)).backward()
    assert q.grad.tolist() == [1.0, 2.0]  # d/dq mean((q - 0)^2) = q


@pytest.mark.parametrize(
    "t, expected", [(0, 1.0), (50, 0.525), (100, 0.05), (1000, 0.05)], ids=lambda v: str(v)
)
def test_linear_schedule_is_cleanrls(t, expected):
    assert linear_schedule(1.0, 0.05, 100, t) == pytest.approx(expected)
