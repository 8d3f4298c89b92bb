"""BatchVectorEnv: the Gymnasium ``VectorEnv`` face of batchenv's shared-memory workers.

A drop-in for ``gymnasium.vector.AsyncVectorEnv`` in CleanRL- or SB3-style code, with the
Gymnasium 1.x autoreset modes (NEXT_STEP by default, SAME_STEP, DISABLED). With equal
seeds and actions it returns exactly what ``gymnasium.vector.SyncVectorEnv`` returns.

    >>> import gymnasium
    >>> from batchenv.vector import BatchVectorEnv
    >>> envs = BatchVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 8)
    >>> observ, infos = envs.reset(seed=42)
    >>> observ, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    >>> envs.close()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from batchenv.batch_env import BatchEnv, per_env_seeds
from batchenv.make import start_workers
from batchenv.workers.autoreset import RESET, split_same_step, vector_commands


class BatchVectorEnv(VectorEnv):
    """Vectorised envs in batchenv worker processes, as a ``gymnasium.vector.VectorEnv``.

    Args:
        env_fns: one constructor per env.
        autoreset_mode: ``AutoresetMode`` (or its string value); NEXT_STEP by default.
        parent_share: "auto" (default) lets the parent step a share of the envs while
            it waits for its workers, or all of them when a worker would cost more than it
            saves (cheap envs, few of them), as ``SyncVectorEnv`` does; a fraction in
            [0, 1] fixes the share, None or 0 puts every env in a worker (each env then
            keeps its own process: crash isolation and deadlines). See
            ``batchenv.workers.parent_share``.
        num_workers: worker processes, as in ``batchenv.make``.
        start_method: "forkserver" or "spawn", as in ``batchenv.make``.
        timeout: deadline of each step in seconds, as in ``batchenv.make``.
        check_actions: check that actions are inside the action space.
        copy: return copies of the results (False: views into shared memory).
        pin_workers: pin worker i to a core of its own, as in ``batchenv.make``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable],
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        num_workers: int | None = None,
        start_method: str = "forkserver",
        timeout: float | None = None,
        check_actions: bool = True,
        copy: bool = True,
        pin_workers: bool | None = None,
        parent_share: float | str | None = "auto",
    ):
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("BatchVectorEnv needs at least one env constructor")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self._batch: BatchEnv = start_workers(
            env_fns,
            num_workers=num_workers,
            start_method=start_method,
            timeout=timeout,
            check_actions=check_actions,
            copy=copy,
            pin_workers=pin_workers,
            parent_share=parent_share,
        )
        self.num_envs = len(env_fns)
        self.single_observation_space = self._batch.observation_space
        self.single_action_space = self._batch.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(self._batch[0].get_attr("metadata") or {})
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = self._batch[0].get_attr("render_mode")
        self.spec = self._batch[0].get_attr("spec")
        self._autoreset = np.zeros(self.num_envs, bool)
        self.closed = False

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``."""
        seeds = per_env_seeds(seed, self.num_envs)
        options = dict(options) if options is not None else None
        mask = np.ones(self.num_envs, bool)
        if options is not None and "reset_mask" in options:
            mask = _check_mask(options.pop("reset_mask"), self.num_envs)
        reset_args = {int(i): (seeds[i], options) for i in np.flatnonzero(mask)}
        command = np.where(mask, RESET, 0).astype(np.uint8)
        observ, _, _, _, raw = self._batch.exchange(command, None, reset_args, count_step=False)
        self._autoreset[mask] = False
        infos: dict[str, Any] = {}
        for row in np.flatnonzero(mask):
            infos = self._add_info(infos, raw.get(int(row), {}), int(row))
        return observ, infos

    def step(self, actions: Any):
        """Step every env, autoresetting finished ones as ``autoreset_mode`` says."""
        command = vector_commands(self.autoreset_mode, self._autoreset)
        observ, reward, terminated, truncated, raw = self._batch.exchange(command, actions)
        infos: dict[str, Any] = {}
        for row in sorted(raw):
            info = raw[row]
            same_step = split_same_step(info)
            if same_step is not None:
                final_observ, final_info, info = same_step
                infos = self._add_info(
                    infos, {"final_obs": final_observ, "final_info": final_info}, row
                )
            infos = self._add_info(infos, info, row)
        self._autoreset = terminated | truncated
        return observ, reward, terminated, truncated, infos

    def call(self, name: str, *args, **kwargs) -> tuple:
        return self._batch.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple:
        return self._batch.get_attr(name)

    def set_attr(self, name: str, values: Any | Sequence[Any]) -> None:
        self._batch.set_attr(name, values)

    def render(self) -> tuple | None:
        return self.call("render")

    def close_extras(self, **kwargs) -> None:
        self._batch.close()


def _check_mask(mask: Any, num_envs: int) -> np.ndarray:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"options['reset_mask'] must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,) or mask.dtype != np.bool_:
        raise ValueError(
            f"options['reset_mask'] must be a bool array of shape ({num_envs},), "
            f"got {mask.dtype} {mask.shape}"
        )
    if not mask.any():
        raise ValueError("options['reset_mask'] must select at least one env")
    return mask
