"""The network and the PPO-clip epochs that the multi-agent examples share.

``tag_training.py`` (taggers of the Tag kernels) and ``pettingzoo_training.py`` (the
agents of a PettingZoo env) both drive every agent of every game with one policy: the
agents are rows of one batch. They differ in how they collect rollouts and compute
advantages; what follows is the same in both.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from batchenv import Algorithm


class ActorCritic(nn.Module):
    """A policy head (``num_actions`` logits) and a value head on a shared MLP torso."""

    def __init__(self, observ_size: int, num_actions: int, hidden: int = 64):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Linear(observ_size, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)

    def forward(self, observ: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.torso(observ)
        return self.policy(hidden), self.value(hidden).squeeze(-1)


def ppo_epochs(
    net: ActorCritic,
    optimizer: torch.optim.Optimizer,
    rows: torch.Tensor,
    columns: list[torch.Tensor],
    args,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """``args.epochs`` passes of PPO-clip over ``rows`` (observations ``[N, ...]``) in
    ``args.minibatches`` shuffled minibatches; ``columns`` are the rows' action, old log
    probability, advantage and value target, each ``[N]``. Uses ``args.clip`` and
    ``args.entropy``; returns the last minibatch's policy loss and entropy."""
    size = max(rows.shape[0] // args.minibatches, 1)
    for _ in range(args.epochs):
        order = torch.randperm(rows.shape[0], generator=generator, device=rows.device)
        for first in range(0, size * args.minibatches, size):
            pick = order[first : first + size]
            act, old, adv, ret = (x[pick] for x in columns)
            logits, value = net(rows[pick])
            distribution = torch.distributions.Categorical(logits=logits)
            ratio = torch.exp(distribution.log_prob(act) - old)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
            policy_loss = -torch.minimum(ratio * adv, clipped * adv).mean()
            value_loss = 0.5 * (value - ret).square().mean()
            entropy = distribution.entropy().mean()
            loss = policy_loss + 0.5 * value_loss - args.entropy * entropy
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            optimizer.step()
    return {"policy_loss": policy_loss.detach(), "entropy": entropy.detach()}


class ActingOnly(Algorithm):
    """``algo``'s policy acting, with no experience(): for evaluation runs."""

    def __init__(self, algo: Algorithm):
        self.algo = algo

    def perform(self, observ):
        return self.algo.perform(observ)


def parse_dataclass_args(defaults, description: str, argv: list[str] | None = None):
    """A ``--name value`` flag per field of the dataclass instance ``defaults``; returns a
    new instance with the values given."""
    parser = argparse.ArgumentParser(description=description)
    for name, value in vars(defaults).items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=type(value), default=value)
    return type(defaults)(**vars(parser.parse_args(argv)))
