"""EpisodeMemory: each row's running episode, and the finished episodes awaiting an update.

Episodes are stored raw (unnormalised), padded to ``max_length`` steps, with a length vector
(batch-ppo v1.4; docs/batchppo.md). Per step a row keeps its observation, action, reward
and the behaviour
policy's distribution parameters; per finished episode the memory also keeps whether it was
truncated (time limit) and its last next-observation, to bootstrap truncated episodes.

Unlike batch-ppo, finished episodes are never dropped: when more episodes finish in one step
than the update needs, the store grows and the update uses them all.

    >>> memory = EpisodeMemory(num_rows=2, max_length=3, observ_size=1, action_shape=(),
    ...                        action_dtype=torch.int64, param_size=2)
    >>> memory.append(torch.zeros(2, 1), torch.zeros(2, dtype=torch.int64), torch.ones(2),
    ...               torch.zeros(2, 2))
    >>> memory.commit(torch.tensor([1]), torch.zeros(2, 1), torch.tensor([False, True]))
    >>> memory.take().length
    tensor([1])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["EpisodeMemory", "Episodes", "Steps"]


@dataclass
class Episodes:
    """A batch of ``N`` finished episodes padded to ``T`` steps (padding zeroed)."""

    observ: torch.Tensor
    """``[N, T, O]`` observations the actions were chosen on."""
    action: torch.Tensor
    """``[N, T, *action_shape]`` actions taken."""
    reward: torch.Tensor
    """``[N, T]`` rewards received."""
    params: torch.Tensor
    """``[N, T, P]`` behaviour-policy distribution parameters."""
    length: torch.Tensor
    """``[N]`` int64 number of valid steps."""
    truncated: torch.Tensor
    """``[N]`` bool: ended by a time limit (bootstrap), not by termination."""
    last_observ: torch.Tensor
    """``[N, O]`` observation after the last step (the value bootstrap of truncated ones)."""

    @property
    def mask(self) -> torch.Tensor:
        """``[N, T]`` bool: True on valid steps."""
        steps = torch.arange(self.reward.shape[1], device=self.length.device)
        return steps < self.length.unsqueeze(1)

    def __len__(self) -> int:
        return self.length.shape[0]

    def select(self, index: torch.Tensor) -> Episodes:
        """The episodes at ``index`` (a minibatch)."""
        return Episodes(*(getattr(self, name)[index] for name in self.__dataclass_fields__))

    def pack(self, observ: torch.Tensor, advantage: torch.Tensor, target: torch.Tensor) -> Steps:
        """The valid steps only, episode after episode, with the update's per-step inputs
        (``observ`` ``[N, T, O]`` normalised, ``advantage`` and ``target`` ``[N, T]``).

            >>> steps = episodes.pack(observ, advantage, target)   # steps.observ: [R, O]
        """
        mask = self.mask
        return Steps(
            observ=observ[mask],
            action=self.action[mask],
            params=self.params[mask],
            advantage=advantage[mask],
            target=target[mask],
            episode=mask.nonzero()[:, 0],
            length=self.length,
            padded_observ=observ,
            mask=mask,
        )


@dataclass
class Steps:
    """The ``R = length.sum()`` valid steps of ``N`` episodes, packed without padding."""

    observ: torch.Tensor
    """``[R, O]`` normalised observations."""
    action: torch.Tensor
    """``[R, *action_shape]`` actions taken."""
    params: torch.Tensor
    """``[R, P]`` behaviour-policy distribution parameters."""
    advantage: torch.Tensor
    """``[R]`` normalised advantages."""
    target: torch.Tensor
    """``[R]`` value targets."""
    episode: torch.Tensor
    """``[R]`` int64: the row's episode, 0 to N - 1."""
    length: torch.Tensor
    """``[N]`` int64 number of steps of each episode."""
    padded_observ: torch.Tensor
    """``[N, T, O]`` the same observations padded (a recurrent policy replays episodes)."""
    mask: torch.Tensor
    """``[N, T]`` bool: where the rows sit in ``padded_observ``."""


class EpisodeMemory:
    """Running episodes of ``num_rows`` batch rows plus a growing store of finished ones.

    Args:
        num_rows: batch rows B (each has one running episode).
        max_length: longest episode T; a row stepping past it raises.
        observ_size: size of a flattened observation.
        action_shape, action_dtype: one action (``()`` int64 for Discrete indices).
        param_size: size of the policy's distribution parameters.
        capacity: finished episodes the store holds before it grows.
    """

    def __init__(
        self,
        num_rows: int,
        max_length: int,
        observ_size: int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        param_size: int,
        capacity: int = 1,
        device: torch.device | str = "cpu",
    ):
        self.num_rows, self.max_length = num_rows, max_length
        self.device = torch.device(device)
        self._steps = {  # per-step fields: (shape of one step, dtype)
            "observ": ((observ_size,), torch.float32),
            "action": (tuple(action_shape), action_dtype),
            "reward": ((), torch.float32),
            "params": ((param_size,), torch.float32),
        }
        self.running = self._buffers(num_rows)
        self.running_length = torch.zeros(num_rows, dtype=torch.int64, device=self.device)
        self.store = self._buffers(max(1, capacity))
        self.store["length"] = torch.zeros(max(1, capacity), dtype=torch.int64, device=device)
        self.store["truncated"] = torch.zeros(max(1, capacity), dtype=torch.bool, device=device)
        self.store["last_observ"] = torch.zeros(max(1, capacity), observ_size, device=device)
        self.episodes = 0
        """Number of finished episodes in the store."""
        self._rows = torch.arange(num_rows, device=self.device)

    def _buffers(self, count: int) -> dict[str, torch.Tensor]:
        return {
            name: torch.zeros(count, self.max_length, *shape, dtype=dtype, device=self.device)
            for name, (shape, dtype) in self._steps.items()
        }

    def begin(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` start new episodes: their unfinished ones are discarded."""
        self.running_length[rows] = 0

    def append(
        self, observ: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, params: torch.Tensor
    ) -> None:
        """Add one step to every row's running episode (all ``[B, ...]``)."""
        if bool((self.running_length >= self.max_length).any()):
            rows = torch.nonzero(self.running_length >= self.max_length).flatten().tolist()
            raise RuntimeError(
                f"BatchPPO: rows {rows} ran max_length={self.max_length} steps without their "
                f"episode ending; limit the env's episodes to max_length steps (Gymnasium "
                f"TimeLimit / max_episode_steps) or raise config.max_length"
            )
        step = dict(observ=observ, action=action, reward=reward, params=params)
        for name, value in step.items():
            self.running[name][self._rows, self.running_length] = value
        self.running_length += 1

    def commit(
        self, rows: torch.Tensor, next_observ: torch.Tensor, truncated: torch.Tensor
    ) -> None:
        """Rows ``rows`` finished their episodes: move them to the store.

        ``next_observ`` and ``truncated`` are the full ``[B, ...]`` batches of this step.
        """
        count = rows.shape[0]
        self._reserve(self.episodes + count)
        slots = slice(self.episodes, self.episodes + count)
        for name in self._steps:
            self.store[name][slots] = self.running[name][rows]
        self.store["length"][slots] = self.running_length[rows]
        self.store["truncated"][slots] = truncated[rows]
        self.store["last_observ"][slots] = next_observ[rows]
        self.running_length[rows] = 0
        self.episodes += count

    def take(self) -> Episodes:
        """All finished episodes, padded to the longest of them (padding zeroed); the store
        is emptied.

        Padding only to the longest episode, not to ``max_length``, changes no loss (they
        are all means over valid steps) and makes an update of short episodes (CartPole's
        early ones: ~40 of 500 steps) an order of magnitude cheaper.
        """
        count = self.episodes
        length = self.store["length"][:count].clone()
        steps = max(1, int(length.max())) if count else 1
        mask = torch.arange(steps, device=self.device) < length.unsqueeze(1)
        padded = {}
        for name in self._steps:
            value = self.store[name][:count, :steps]
            step_mask = mask.reshape(*mask.shape, *[1] * (value.dim() - 2))
            padded[name] = torch.where(step_mask, value, torch.zeros((), dtype=value.dtype))
        self.episodes = 0
        return Episodes(
            length=length,
            truncated=self.store["truncated"][:count].clone(),
            last_observ=self.store["last_observ"][:count].clone(),
            **padded,
        )

    def _reserve(self, needed: int) -> None:
        """Grow the store (doubling) until it holds ``needed`` episodes."""
        capacity = self.store["length"].shape[0]
        if needed <= capacity:
            return
        extra = max(needed, 2 * capacity) - capacity
        for name, value in self.store.items():
            pad = value.new_zeros(extra, *value.shape[1:])
            self.store[name] = torch.cat((value, pad))

    def state_dict(self) -> dict[str, object]:
        """Running and stored episodes (references to the live tensors)."""
        return {
            "running": dict(self.running),
            "running_length": self.running_length,
            "store": dict(self.store),
            "episodes": self.episodes,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` output (copied onto this memory's device)."""
        running_length = state["running_length"]
        if running_length.shape[0] != self.num_rows:
            raise ValueError(
                f"EpisodeMemory.load_state_dict: saved for {running_length.shape[0]} rows, "
                f"this memory has {self.num_rows}"
            )
        self.running = {k: v.to(self.device, copy=True) for k, v in state["running"].items()}
        self.running_length = running_length.to(self.device, copy=True)
        self.store = {k: v.to(self.device, copy=True) for k, v in state["store"].items()}
        self.episodes = int(state["episodes"])
