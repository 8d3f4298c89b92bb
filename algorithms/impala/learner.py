"""The IMPALA learner step, shared by the synchronous and the asynchronous modes.

``learn()`` takes one time-major batch ``[T + 1, B]`` in the slot layout of
``algorithms/impala/actor.py`` (row ``t + 1`` holds the reward, done flag, behaviour logits
and action that follow row ``t``'s frame), runs the learner model over all ``T + 1`` rows,
bootstraps from the last row's baseline and minimises MonoBeast's summed loss

    pg_loss + baseline_cost * 0.5 * sum((vs - V)^2) + entropy_cost * sum(p log p)

with V-trace targets, RMSprop and gradient-norm clipping. ``make_optimizer()`` builds the
optimiser and the linear learning-rate decay from an ``ImpalaConfig``. With
``config.precision == "bf16"`` the model's forward pass runs under ``torch.autocast``
(bfloat16 matmuls and convolutions); V-trace, the losses and the weights stay float32.

    >>> import torch
    >>> from batchenv.algorithms.impala.config import ImpalaConfig
    >>> from batchenv.algorithms.impala.models import MLPAgent
    >>> config = ImpalaConfig(unroll_length=5, batch_size=2)
    >>> model = MLPAgent((4,), num_actions=2)
    >>> optimizer, scheduler = make_optimizer(model, config)
    >>> T1, B = 6, 2
    >>> batch = {"frame": torch.randn(T1, B, 4), "reward": torch.ones(T1, B),
    ...          "done": torch.zeros(T1, B, dtype=torch.bool),
    ...          "last_action": torch.zeros(T1, B, dtype=torch.long),
    ...          "action": torch.zeros(T1, B, dtype=torch.long),
    ...          "policy_logits": torch.zeros(T1, B, 2)}
    >>> stats = learn(model, batch, (), optimizer, scheduler, config)
    >>> sorted(stats)[:3]
    ['baseline_loss', 'entropy_loss', 'grad_norm']
"""

from __future__ import annotations

import torch
from torch import nn

from . import losses, vtrace
from .config import ImpalaConfig
from .models import forward_in

__all__ = ["learn", "make_optimizer"]


def make_optimizer(
    model: nn.Module, config: ImpalaConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """RMSprop with MonoBeast's settings and its learning rate decayed linearly to 0.

    The schedule counts learner steps: after ``n`` steps the rate is
    ``lr * (1 - min(n * T * B, total_steps) / total_steps)``.
    """
    optimizer = torch.optim.RMSprop(
        model.parameters(),
        lr=config.learning_rate,
        momentum=config.momentum,
        eps=config.epsilon,
        alpha=config.alpha,
    )
    steps_per_batch = config.steps_per_batch
    total = config.total_steps

    def decay(epoch: int) -> float:
        return 1.0 - min(epoch * steps_per_batch, total) / total

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, decay)


def learn(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    initial_core_state: tuple[torch.Tensor, ...],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    config: ImpalaConfig,
) -> dict[str, float]:
    """One V-trace step on ``batch`` (``[T + 1, B, ...]`` tensors); returns scalar stats.

    Needs the keys ``frame``, ``reward``, ``done``, ``last_action``, ``action`` and
    ``policy_logits``. Stats: ``total_loss``, ``pg_loss``, ``baseline_loss``,
    ``entropy_loss``, ``grad_norm``, ``learning_rate`` (the rate this step used).
    """
    missing = [
        key
        for key in ("frame", "reward", "done", "last_action", "action", "policy_logits")
        if key not in batch
    ]
    if missing:
        raise ValueError(f"learn: the batch lacks {missing}")
    if batch["reward"].dim() != 2 or batch["reward"].shape[0] < 2:
        raise ValueError(
            f"learn: batch tensors must be [T + 1, B] with T >= 1, got reward "
            f"{tuple(batch['reward'].shape)}"
        )
    learner_outputs, _ = forward_in(config.precision, model, batch, initial_core_state)
    bootstrap_value = learner_outputs["baseline"][-1]

    # Row t + 1 holds what followed row t's frame: shift the batch, drop the last output.
    rewards = batch["reward"][1:]
    if config.reward_clipping == "abs_one":
        rewards = rewards.clamp(-1.0, 1.0)
    discounts = (~batch["done"][1:]).to(rewards.dtype) * config.discount
    actions = batch["action"][1:]
    logits = learner_outputs["policy_logits"][:-1]
    baseline = learner_outputs["baseline"][:-1]

    returns = vtrace.from_logits(
        behavior_policy_logits=batch["policy_logits"][1:],
        target_policy_logits=logits,
        actions=actions,
        discounts=discounts,
        rewards=rewards,
        values=baseline,
        bootstrap_value=bootstrap_value,
    )
    pg_loss = losses.compute_policy_gradient_loss(logits, actions, returns.pg_advantages)
    baseline_loss = config.baseline_cost * losses.compute_baseline_loss(returns.vs - baseline)
    entropy_loss = config.entropy_cost * losses.compute_entropy_loss(logits)
    total_loss = pg_loss + baseline_loss + entropy_loss

    learning_rate = optimizer.param_groups[0]["lr"]
    optimizer.zero_grad()
    total_loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clipping)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return {
        "total_loss": total_loss.item(),
        "pg_loss": pg_loss.item(),
        "baseline_loss": baseline_loss.item(),
        "entropy_loss": entropy_loss.item(),
        "grad_norm": float(grad_norm),
        "learning_rate": float(learning_rate),
    }
