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

import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import logger, spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from batchenv.batch_env import BatchEnv, per_env_seeds
from batchenv.errors import (
    AlreadyPendingCallError,
    EnvWorkerError,
    NoPendingCallError,
    RemoteTraceback,
    SpacesMismatchError,
    with_env_type,
)
from batchenv.make import start_workers
from batchenv.multi_agent import AgentRows, AgentSpaces
from batchenv.workers.autoreset import RESET, split_same_step, vector_commands


class BatchVectorEnv(VectorEnv):
    """Vectorised envs in batchenv worker processes, as a ``gymnasium.vector.VectorEnv``.

    Args:
        env_fns: one constructor per env.
        autoreset_mode: ``AutoresetMode`` (or its string value); NEXT_STEP by default.
        observation_mode: "same" (default: every env must have the same observation
            space), "different" (spaces of one shape and dtype but other bounds, batched
            with ``batch_differing_spaces``) or a ``(batch_space, single_space)`` pair, as
            in Gymnasium's vector envs.
        parent_share: "auto" (default) lets the parent step a share of the envs while
            it waits for its workers, or all of them when a worker would cost more than it
            saves (cheap envs, few of them), as ``SyncVectorEnv`` does; a fraction in
            [0, 1] fixes the share, None or 0 puts every env in a worker (each env then
            keeps its own process: crash isolation and deadlines). See
            ``batchenv.workers.parent_share``.
        num_workers: worker processes, as in ``batchenv.make``.
        start_method: "forkserver" or "spawn", as in ``batchenv.make``.
        timeout: deadline of each step in seconds, as in ``batchenv.make``.
        check_actions: check that actions are inside the action space (the actions of
            rows being reset under NEXT_STEP autoreset are ignored, and not checked).
        copy: return copies of the results (False: views into shared memory).
        pin_workers: pin worker i to a core of its own, as in ``batchenv.make``.

    Differences from Gymnasium's classes: Graph, Sequence and custom spaces cannot be
    batched (``UnsupportedSpaceError``, as ``AsyncVectorEnv(shared_memory=True)``);
    actions are checked against the action space (``check_actions``); a failing env
    raises its own exception type (or ``EnvWorkerError``) after closing the whole batch
    and logging AsyncVectorEnv's lines for every env that failed in the call; ``envs``
    holds handles to envs in workers, whose attribute reads are copies.

    Constructors of PettingZoo ``ParallelEnv`` s give one row per agent, env by env, with
    ``infos["agent_mask"]`` (see :mod:`batchenv.multi_agent`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable],
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
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
        _check_observation_mode(observation_mode)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self._pending_call: str | None = None
        self.closed = False
        try:
            self._batch: BatchEnv = start_workers(
                env_fns,
                num_workers=num_workers,
                start_method=start_method,
                timeout=timeout,
                check_actions=check_actions,
                copy=copy,
                pin_workers=pin_workers,
                parent_share=parent_share,
                exact_spaces=False,  # checked below, as observation_mode asks
            )
        except SpacesMismatchError as error:  # not even one layout: Gymnasium's words first
            kind = "action" if " action space " in str(error) else "observation"
            mode = observation_mode if isinstance(observation_mode, str) else "same"
            raise SpacesMismatchError(
                f"{type(self).__name__}(..., observation_mode='{mode}') however the "
                f"sub-environments {kind} spaces are not equivalent. {error}"
            ) from None
        space = self._batch.observation_space
        self._agents = (
            AgentRows(space, self._batch.num_envs) if isinstance(space, AgentSpaces) else None
        )
        try:
            self._set_spaces(observation_mode)
            self.metadata = dict(self._batch[0].get_attr("metadata") or {})
            self.render_mode = self._batch[0].get_attr("render_mode")
            self.spec = self._batch[0].get_attr("spec")
        except BaseException:
            self._batch.close()
            raise
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self._autoreset = np.zeros(self._batch.num_envs, bool)  # per env (not agent row)

    def _set_spaces(self, observation_mode) -> None:
        """The single and batch spaces, after checking the envs' spaces as
        ``observation_mode`` asks (Gymnasium's RuntimeError where they differ)."""
        self.num_envs = self._batch.num_envs
        if self._agents is not None:
            self._set_agent_spaces(observation_mode)
            return
        observation_spaces = self._batch.get_attr("observation_space")
        action_spaces = self._batch.get_attr("action_space")
        owner = type(self).__name__
        if isinstance(observation_mode, tuple):
            self.observation_space, self.single_observation_space = observation_mode
            _check_layout(owner, self.single_observation_space, observation_spaces)
        elif observation_mode == "same":
            _check_equal(owner, "observation", observation_spaces, "same")
            self.single_observation_space = observation_spaces[0]
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        else:
            _check_layout(owner, observation_spaces[0], observation_spaces)
            self.single_observation_space = observation_spaces[0]
            self.observation_space = batch_differing_spaces(observation_spaces)
        _check_equal(owner, "action", action_spaces, "")
        self.single_action_space = action_spaces[0]
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def _set_agent_spaces(self, observation_mode) -> None:
        """PettingZoo envs: one row per agent, with the agents' (shared) spaces."""
        if observation_mode != "same":
            raise ValueError(
                "observation_mode must be 'same' for PettingZoo envs (their agents share one "
                f"observation space), got {observation_mode!r}"
            )
        _check_equal(
            type(self).__name__, "observation", self._batch.get_attr("observation_space"), "same"
        )
        self.num_envs = self._agents.num_rows
        self.single_observation_space = self._agents.space.agent_observation_space
        self.single_action_space = self._agents.space.agent_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def envs(self) -> tuple:
        """One entry per env (as ``SyncVectorEnv.envs``): the env itself when the parent
        steps it (``parent_share``), else a handle whose ``call``, ``get_attr``,
        ``set_attr`` and attribute reads go to the env in its worker and return copies
        (``envs[0].metadata``). For PettingZoo envs, one per env, not per agent row."""
        return tuple(self._batch[i] for i in range(self._batch.num_envs))

    @property
    def np_random_seed(self) -> tuple:
        """The seed of each env's ``np_random`` (``seed + i`` after ``reset(seed=seed)``)."""
        return self.get_attr("np_random_seed")

    # ------------------------------------------------------------------ reset / step

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        """Send the reset to the envs without waiting; :meth:`reset_wait` collects it."""
        self._check_not_pending("reset_async")
        seeds = per_env_seeds(seed, self._batch.num_envs)
        options = dict(options) if options is not None else None
        mask = np.ones(self.num_envs, bool)
        if options is not None and "reset_mask" in options:
            mask = _check_mask(options.pop("reset_mask"), self.num_envs)
        if self._agents is not None:  # the agents of a PettingZoo env reset together
            mask = self._agents.env_mask(mask)
        reset_args = {int(i): (seeds[i], options) for i in np.flatnonzero(mask)}
        command = np.where(mask, RESET, 0).astype(np.uint8)
        try:
            self._batch.exchange_async(command, None, reset_args)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise
        self._pending_call, self._reset_mask = "reset", mask

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The result of :meth:`reset_async`; TimeoutError after ``timeout`` seconds."""
        self._check_pending("reset")
        self._pending_call = None
        try:
            observ, _, _, _, raw = self._batch.exchange_wait(timeout, count_step=False)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise
        mask = self._reset_mask
        self._autoreset[mask] = False
        infos: dict[str, Any] = {}
        if self._agents is not None:
            observ, _, _, _, agent_mask = self._agents.flatten(observ)
            infos["agent_mask"] = agent_mask
            for env in np.flatnonzero(mask):
                for row, info in self._agents.row_infos(int(env), raw.get(int(env), {})):
                    infos = self._add_info(infos, info, row)
            return observ, infos
        for row in np.flatnonzero(mask):
            infos = self._add_info(infos, raw.get(int(row), {}), int(row))
        return observ, infos

    def step(self, actions: Any):
        """Step every env, autoresetting finished ones as ``autoreset_mode`` says."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Send the actions to the envs without waiting; :meth:`step_wait` collects it."""
        self._check_not_pending("step_async")
        if not isinstance(actions, (tuple, list, dict)) and np.ndim(actions) == 0:
            raise TypeError(
                f"actions must be a batch of {self.num_envs} actions (a sequence or array), "
                f"got the scalar {actions!r}"
            )
        if self._agents is not None:
            actions = self._agents.joint_actions(actions)
        command = vector_commands(self.autoreset_mode, self._autoreset)
        unused = self._autoreset if command is not None and self._autoreset.any() else None
        try:
            self._batch.exchange_async(command, actions, unused_rows=unused)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise
        self._pending_call = "step"

    def step_wait(self, timeout: float | None = None):
        """The result of :meth:`step_async`; TimeoutError after ``timeout`` seconds."""
        self._check_pending("step")
        self._pending_call = None
        try:
            observ, reward, terminated, truncated, raw = self._batch.exchange_wait(timeout)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise
        self._autoreset = terminated | truncated
        if self._agents is not None:
            return self._agent_rows(observ, raw)
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
        return observ, reward, terminated, truncated, infos

    def _agent_rows(self, joint_observ: dict, raw: dict):
        """A step's results of PettingZoo envs as one row per agent."""
        agents = self._agents
        observ, reward, terminated, truncated, agent_mask = agents.flatten(joint_observ)
        infos: dict[str, Any] = {"agent_mask": agent_mask}
        for env in sorted(raw):
            info = raw[env]
            same_step = split_same_step(info)
            if same_step is not None:  # the episode ended: every agent's final row
                reward = reward.copy()  # may be a view of shared memory (copy=False)
                final_observ, final_info, info = same_step
                finals = agents.split_observ(final_observ)
                final_infos = dict(agents.row_infos(env, final_info))
                for k, row in enumerate(agents.rows_of(env)):
                    final = {"final_obs": finals[k], "final_info": final_infos.get(row, {})}
                    infos = self._add_info(infos, final, row)
                    # The reset observation replaced the final one: flags and rewards too.
                    reward[row], terminated[row], truncated[row] = (
                        final_observ["reward"][k],
                        bool(final_observ["terminated"][k]),
                        bool(final_observ["truncated"][k]),
                    )
            for row, agent_info in agents.row_infos(env, info):
                infos = self._add_info(infos, agent_info, row)
        return observ, reward, terminated, truncated, infos

    def _check_not_pending(self, call: str) -> None:
        self._batch._check_usable(call)
        if self._pending_call is not None:
            raise AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{self._pending_call}` "
                f"to complete; call `{self._pending_call}_wait` first",
                self._pending_call,
            )

    def _check_pending(self, call: str) -> None:
        self._batch._check_usable(f"{call}_wait")
        if self._pending_call != call:
            raise NoPendingCallError(
                f"Calling `{call}_wait` without any prior call to `{call}_async`.", call
            )

    # ------------------------------------------------------------------ attributes

    def call(self, name: str, *args, **kwargs) -> tuple:
        """Per env: ``name`` resolved through the wrappers, called with the arguments
        when callable, else its value (as Gymnasium's ``VectorEnv.call``)."""
        self._check_not_pending("call")
        try:
            return self._batch.call(name, *args, **kwargs)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise

    def get_attr(self, name: str) -> tuple:
        """Per env: attribute ``name``, resolved through the wrappers."""
        self._check_not_pending("get_attr")
        try:
            return self._batch.get_attr(name)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise

    def set_attr(self, name: str, values: Any | Sequence[Any]) -> None:
        """Set ``name`` where the wrappers or the env define it (one value each when a
        list or tuple), as Gymnasium's ``set_wrapper_attr`` does."""
        self._check_not_pending("set_attr")
        try:
            self._batch.set_attr(name, values)
        except EnvWorkerError as error:
            _raise_with_env_type(error)
            raise

    def render(self) -> tuple | None:
        return self.call("render")

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """End the workers; a pending call is dropped with a warning, as in Gymnasium."""
        if self._pending_call is not None:
            warnings.warn(
                f"Calling `close` while waiting for a pending call to `{self._pending_call}` "
                "to complete.",
                UserWarning,
                stacklevel=3,
            )
            self._pending_call = None
        if hasattr(self, "_batch"):
            self._batch.close() if timeout is None else self._batch.close(timeout)


def _raise_with_env_type(error: EnvWorkerError) -> None:
    """Raise an env's exception as an EnvWorkerError that is also of the env's own
    exception type (``except ValueError`` catches it, as with Gymnasium's classes); return
    when there is no such type to add (the caller re-raises ``error``). First log every
    failing env as AsyncVectorEnv logs its failing workers."""
    _log_failures(error)
    typed = with_env_type(error)
    if typed is not error:
        raise typed from error.__cause__


def _log_failures(error: EnvWorkerError) -> None:
    """AsyncVectorEnv's error lines (through ``gymnasium.logger``): for each env that
    failed in the call, which one and its traceback, then the last line."""
    for failure in getattr(error, "errors", None) or [error]:
        index = failure.env_index if failure.env_index is not None else failure.worker
        logger.error("%s", f"Received the following error from Worker-{index} - Shutting it down")
        logger.error("%s", _remote_traceback(failure) or str(failure))
    logger.error("%s", "Raising the last exception back to the main process.")


def _remote_traceback(error: BaseException) -> str | None:
    """The traceback text of the worker's exception chained under ``error``, if any."""
    seen = set()
    cause = error.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, RemoteTraceback):
            return cause.text
        cause = cause.__cause__
    if error.__cause__ is not None:  # an env the parent steps (parent_share): its own
        return "".join(traceback.format_exception(error.__cause__))
    return None


def _check_observation_mode(mode) -> None:
    if isinstance(mode, tuple):
        if len(mode) == 2 and all(isinstance(s, spaces.Space) for s in mode):
            return
    elif mode in ("same", "different"):
        return
    raise ValueError(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
        f"batch observation space, actual got {mode}"
    )


def _check_equal(owner: str, kind: str, env_spaces: Sequence, mode: str) -> None:
    """SpacesMismatchError (a RuntimeError, as Gymnasium raises) unless all are equal."""
    for index, space in enumerate(env_spaces):
        if space != env_spaces[0]:
            hint = (
                "If this is intentional, use `observation_mode='different'` instead."
                if mode
                else "All sub-environments must share one action space."
            )
            raise SpacesMismatchError(
                f"{owner}(..., observation_mode='{mode or 'same'}') however the "
                f"sub-environments {kind} spaces are not equivalent. env {index} has "
                f"{space}, env 0 has {env_spaces[0]}. {hint}"
            )


def _check_layout(owner: str, single: spaces.Space, env_spaces: Sequence) -> None:
    """SpacesMismatchError unless every env's observation space has the shape and dtype
    of ``single`` (what ``observation_mode='different'`` allows to differ is bounds)."""
    for index, space in enumerate(env_spaces):
        if not is_space_dtype_shape_equiv(space, single):
            raise SpacesMismatchError(
                f"{owner}(..., observation_mode='different') needs observation spaces of one "
                f"shape and dtype, but env {index} has {space} and the single observation "
                f"space is {single}; give every env spaces of that shape and dtype"
            )


def _check_mask(mask: Any, num_envs: int) -> np.ndarray:
    """``options["reset_mask"]`` checked as Gymnasium checks it, with its messages."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(
            f"`options['reset_mask']` must be a numpy array, got {type(mask)}; "
            "pass np.array([...], dtype=bool)"
        )
    if mask.shape != (num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}"
        )
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True "
            f"value, got reset_mask={mask}"
        )
    return mask
