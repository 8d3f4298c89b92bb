"""ReplayMemory: a preallocated ring buffer of transitions, one column per env (docs/dqn.md).

It stores what ``Algorithm.experience(observ, action, reward, done, next_observ, truncated)``
receives, one ``[num_envs]`` batch per ``add``, with termination and truncation kept apart:
a time-limit end (truncated) bootstraps from its ``next_observ``, a termination does not.
``next_observ`` is stored per transition, so a finished row keeps its terminal observation.

n-step returns are computed when sampling, along the sampled transition's own env column:
the window stops at the first episode end inside it (terminated or truncated) and at the
newest transition of the column. Prioritized replay is proportional (Schaul et al., 2016,
arXiv:1511.05952) on a :class:`SumTree`, sampled by stratified prefix sums.

    >>> import gymnasium as gym
    >>> memory = ReplayMemory(8, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2)
    >>> zeros, false = torch.zeros(2, 3), torch.zeros(2, dtype=torch.bool)
    >>> memory.add(zeros, torch.tensor([0, 1]), torch.ones(2), zeros, false, false)
    >>> batch = memory.sample(2, torch.Generator().manual_seed(0))
    >>> batch.reward.tolist(), batch.discount.tolist()
    ([1.0, 1.0], [0.9900000095367432, 0.9900000095367432])
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from .sum_tree import SumTree

__all__ = ["Batch", "ReplayMemory"]


@dataclass
class Batch:
    """``B`` sampled transitions, n-step returns folded in."""

    observ: torch.Tensor
    """``[B, *observ_shape]`` observation the action was chosen on."""
    action: torch.Tensor
    """``[B, *action_shape]`` action taken."""
    reward: torch.Tensor
    """``[B]`` float32 ``sum_{j<k} gamma**j * r_{t+j}`` over the ``k <= n`` steps used."""
    next_observ: torch.Tensor
    """``[B, *observ_shape]`` observation after those ``k`` steps (terminal if it ended)."""
    discount: torch.Tensor
    """``[B]`` float32 ``gamma**k * (1 - terminated)``: the bootstrap factor (0 only when the
    window ended by termination; a time-limit truncation bootstraps)."""
    weights: torch.Tensor
    """``[B]`` float32 importance weights ``(N * P(i))**-beta`` divided by the batch's
    largest (ones without prioritization)."""
    indices: torch.Tensor
    """``[B]`` int64 slots of the transitions, for :meth:`ReplayMemory.update_priorities`."""


def torch_dtype(space: gym.Space) -> torch.dtype:
    """The torch dtype that holds one element of ``space`` (Discrete: int64)."""
    if isinstance(space, gym.spaces.Discrete):
        return torch.int64
    return torch.from_numpy(np.zeros((), dtype=space.dtype)).dtype


class ReplayMemory:
    """``capacity`` transitions in ``capacity // num_envs`` rows of ``num_envs`` env columns.

    Each ``add`` writes one row (the next ring position, shared by all columns); once full,
    the oldest row is overwritten. A slot index is ``row * num_envs + column``.

    Args:
        capacity: transitions held (at least ``num_envs``; rounded down to a multiple of it).
        observation_space, action_space: one env's spaces (they fix shapes and dtypes).
        num_envs: env columns; every ``add`` gives one transition per column.
        device: where every tensor lives (the training device).
        n_step: steps summed into each sampled return (1: plain one-step TD).
        gamma: discount of the n-step return and of ``Batch.discount``.
        prioritized: sample proportionally to priority (else uniformly).
        alpha: priority exponent: a slot's sampling weight is ``(priority + eps) ** alpha``.
        eps: added to every priority so no transition gets probability 0.
    """

    def __init__(
        self,
        capacity: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        num_envs: int,
        *,
        device: torch.device | str = "cpu",
        n_step: int = 1,
        gamma: float = 0.99,
        prioritized: bool = False,
        alpha: float = 0.6,
        eps: float = 1e-6,
    ):
        if num_envs < 1:
            raise ValueError(f"ReplayMemory num_envs must be >= 1, got {num_envs}")
        if capacity < num_envs:
            raise ValueError(
                f"ReplayMemory capacity {capacity} holds less than one row of {num_envs} envs; "
                f"use a capacity >= num_envs"
            )
        if n_step < 1:
            raise ValueError(f"ReplayMemory n_step must be >= 1, got {n_step}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"ReplayMemory gamma must be in [0, 1], got {gamma}")
        if alpha < 0.0 or eps <= 0.0:
            raise ValueError(f"ReplayMemory needs alpha >= 0 and eps > 0, got {alpha}, {eps}")
        self.device = torch.device(device)
        self.num_envs = int(num_envs)
        self.rows = int(capacity) // self.num_envs
        self.capacity = self.rows * self.num_envs
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.prioritized = bool(prioritized)
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.observ_shape = tuple(observation_space.shape)
        self.action_shape = tuple(action_space.shape)

        def buffer(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((self.rows, self.num_envs, *shape), dtype=dtype, device=device)

        observ_dtype = torch_dtype(observation_space)
        self.observ = buffer(self.observ_shape, observ_dtype)
        self.next_observ = buffer(self.observ_shape, observ_dtype)
        self.action = buffer(self.action_shape, torch_dtype(action_space))
        self.reward = buffer((), torch.float32)
        self.terminated = buffer((), torch.bool)
        self.truncated = buffer((), torch.bool)
        self.position = 0  # the row the next add writes
        self.filled = 0  # rows written so far (<= rows)
        self.max_priority = 1.0
        self.tree = SumTree(self.capacity, device) if self.prioritized else None

    def __len__(self) -> int:
        """Transitions stored (``filled rows * num_envs``)."""
        return self.filled * self.num_envs

    def bytes_per_transition(self) -> int:
        """Bytes one stored transition takes (the sum-tree's two float64 nodes included)."""
        per_row = sum(
            t[0].numel() * t.element_size()
            for t in (
                self.observ,
                self.next_observ,
                self.action,
                self.reward,
                self.terminated,
                self.truncated,
            )
        )
        tree = 16 if self.prioritized else 0
        return per_row // self.num_envs + tree

    def add(
        self,
        observ: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_observ: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> None:
        """Write one transition per env column (every argument has leading axis ``num_envs``).

        A row both terminated and truncated counts as terminated (no bootstrap). New slots
        get the largest priority seen so far, so each is likely sampled at least once.
        """
        if observ.shape[:1] != (self.num_envs,) or reward.shape != (self.num_envs,):
            raise ValueError(
                f"ReplayMemory.add expects batches of {self.num_envs} rows, got observ "
                f"{tuple(observ.shape)} and reward {tuple(reward.shape)}"
            )
        row = self.position
        self.observ[row] = observ
        self.action[row] = action
        self.reward[row] = reward
        self.next_observ[row] = next_observ
        self.terminated[row] = terminated
        self.truncated[row] = truncated & ~terminated.to(torch.bool, copy=False)
        if self.tree is not None:
            slots = row * self.num_envs + torch.arange(self.num_envs, device=self.device)
            priority = (self.max_priority + self.eps) ** self.alpha
            self.tree.set(slots, torch.full((self.num_envs,), priority, dtype=torch.float64))
        self.position = (row + 1) % self.rows
        self.filled = min(self.filled + 1, self.rows)

    def truncate_newest(self) -> None:
        """End the episodes in progress here: the newest transition of every column that did
        not end becomes truncated (it bootstraps; n-step windows stop at it).

        For a caller that forces a reset of every env (cutting episodes short), so the next
        transitions of a column never join the old episode's n-step returns.
        """
        if self.filled == 0:
            return
        row = (self.position - 1) % self.rows
        self.truncated[row] |= ~self.terminated[row]

    def sample(self, batch_size: int, generator: torch.Generator, beta: float = 0.4) -> Batch:
        """Draw ``batch_size`` transitions (with replacement) and fold in their n-step returns.

        ``generator`` gives every random number (on its own device); ``beta`` is the
        importance-sampling exponent of prioritized replay (the caller anneals it to 1).
        """
        if batch_size < 1 or len(self) == 0:
            raise ValueError(
                f"ReplayMemory.sample({batch_size}) needs batch_size >= 1 and a transition "
                f"stored ({len(self)} now); add transitions before sampling"
            )
        if self.tree is None:
            slots = torch.randint(
                0, len(self), (batch_size,), generator=generator, device=generator.device
            ).to(self.device)
            weights = torch.ones(batch_size, device=self.device)
        else:
            slots, weights = self._sample_prioritized(batch_size, generator, beta)
        return self._n_step_batch(slots, weights)

    def _sample_prioritized(
        self, batch_size: int, generator: torch.Generator, beta: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified prefix sums: one uniform draw in each of ``batch_size`` equal segments."""
        total = self.tree.total()
        offsets = torch.rand(
            batch_size, generator=generator, device=generator.device, dtype=torch.float64
        ).to(self.device)
        segment = total / batch_size
        prefix = torch.arange(batch_size, device=self.device, dtype=torch.float64) + offsets
        slots = self.tree.find(prefix * segment)
        probability = self.tree.leaves()[slots] / total
        weights = (len(self) * probability) ** -beta
        return slots, (weights / weights.max()).to(torch.float32)

    def _n_step_batch(self, slots: torch.Tensor, weights: torch.Tensor) -> Batch:
        """Gather ``slots`` and the ``n_step - 1`` transitions after each in its column."""
        row, column = slots // self.num_envs, slots % self.num_envs
        steps = torch.arange(self.n_step, device=self.device)
        # Transitions from ``row`` up to the newest one of the column (inclusive).
        available = (self.position - 1 - row) % self.rows + 1
        window = (row.unsqueeze(1) + steps) % self.rows  # [B, n]
        cols = column.unsqueeze(1).expand_as(window)
        ended = self.terminated[window, cols] | self.truncated[window, cols]
        # Step j counts when no episode ended before it and it has been written.
        ended_before = torch.cumsum(ended.to(torch.int64), dim=1) - ended.to(torch.int64)
        used = (ended_before == 0) & (steps < available.unsqueeze(1))
        length = used.sum(dim=1)  # k >= 1
        powers = self.gamma ** steps.to(torch.float64)
        reward = (self.reward[window, cols] * powers * used).sum(dim=1)
        last = (row + length - 1) % self.rows
        discount = self.gamma ** length.to(torch.float64) * ~self.terminated[last, column]
        return Batch(
            observ=self.observ[row, column],
            action=self.action[row, column],
            reward=reward.to(torch.float32),
            next_observ=self.next_observ[last, column],
            discount=discount.to(torch.float32),
            weights=weights,
            indices=slots,
        )

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities (e.g. ``|TD error|``) of the slots ``indices`` a batch came from.

        A no-op without prioritization, so callers need not branch.
        """
        if self.tree is None:
            return
        priorities = priorities.detach().to(device=self.device, dtype=torch.float64)
        if not bool(torch.all(priorities >= 0)):
            raise ValueError("ReplayMemory.update_priorities needs priorities >= 0 (e.g. |TD|)")
        self.tree.set(indices, (priorities + self.eps) ** self.alpha)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict:
        """Everything needed to resume exactly: contents, ring position, priorities."""
        state = {name: getattr(self, name) for name in _TENSORS}
        state.update(position=self.position, filled=self.filled, max_priority=self.max_priority)
        if self.tree is not None:
            state["tree"] = self.tree.nodes
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output of a memory built with the same arguments."""
        for name in _TENSORS:
            mine, theirs = getattr(self, name), state[name]
            if tuple(theirs.shape) != tuple(mine.shape) or theirs.dtype != mine.dtype:
                raise ValueError(
                    f"ReplayMemory state {name} has shape {tuple(theirs.shape)} {theirs.dtype}, "
                    f"this memory expects {tuple(mine.shape)} {mine.dtype}; build it with the "
                    f"capacity, num_envs and spaces of the saved run"
                )
        if (self.tree is None) != ("tree" not in state):
            raise ValueError(
                f"ReplayMemory state prioritized={'tree' in state}, this memory "
                f"prioritized={self.prioritized}; build it as the saved run did"
            )
        for name in _TENSORS:
            getattr(self, name).copy_(state[name])
        if self.tree is not None:
            self.tree.nodes.copy_(state["tree"])
        self.position = int(state["position"])
        self.filled = int(state["filled"])
        self.max_priority = float(state["max_priority"])


_TENSORS = ("observ", "action", "reward", "next_observ", "terminated", "truncated")
