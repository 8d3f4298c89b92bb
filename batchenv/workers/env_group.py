"""A group of envs that reads its commands and actions from the shared memory block and
writes its results back: the work of one worker process, or of the parent's own share.

The worker server (:mod:`batchenv.workers.server`) runs an :class:`EnvGroup` for the rows
its parent gave it; with ``parent_share`` the parent runs one itself for its rows, on the
same block, while the workers step theirs.
"""

from __future__ import annotations

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv.workers.autoreset import IDLE, RESET, STEP, STEP_AHEAD, end_episode
from batchenv.workers.protocol import EnvFailure
from batchenv.workers.shared_memory import Buffers


def call_env(env, name: str, args: tuple, kwargs: dict):
    """Gymnasium's ``VectorEnv.call`` for one env: resolve ``name`` through the wrappers,
    call it when callable, else return its value."""
    target = get_env_attr(env, name)
    return target(*args, **kwargs) if callable(target) else target


def get_env_attr(env, name: str):
    """Attribute ``name`` of the outermost wrapper that has it, else of the env."""
    try:
        return getattr(env, name)
    except AttributeError:
        if not hasattr(env, "get_wrapper_attr"):
            raise
        return env.get_wrapper_attr(name)


def set_env_attr(env, name: str, value) -> None:
    """Set ``name`` where it is defined: the wrapper or env that has it (the env itself
    when none has), as Gymnasium's ``set_wrapper_attr`` does."""
    if hasattr(env, "set_wrapper_attr"):
        env.set_wrapper_attr(name, value)
    else:
        setattr(env, name, value)


class EnvGroup:
    """Envs for batch rows ``rows``, stepped one after another into shared memory."""

    def __init__(self, rows: list[int]):
        self.rows: list[int] = [int(row) for row in rows]
        self.row_array = np.asarray(self.rows, dtype=np.int64)
        self.position = {row: k for k, row in enumerate(self.rows)}
        self.envs: list = []
        self.fast = None

    def build(self, constructors: list) -> list:
        """Build one env per row; returns their (observation_space, action_space) pairs."""
        from batchenv.compat import to_gymnasium

        for row, constructor in zip(self.rows, constructors):
            try:
                self.envs.append(to_gymnasium(constructor()))
            except BaseException as error:
                raise EnvFailure(row, error) from error
        return [(env.observation_space, env.action_space) for env in self.envs]

    def attach(self, buffers: Buffers, observation_space, action_space) -> None:
        """Read commands and actions from ``buffers``, write results to them."""
        self.block = _observ_block(observation_space, buffers.observ, self.rows)
        self.fast = (
            buffers.command,
            batch_spaces.make_rows_reader(action_space, buffers.action),
            batch_spaces.make_row_writer(observation_space, buffers.observ),
            batch_spaces.make_row_writer(observation_space, buffers.ahead),
            buffers.reward,
            buffers.terminated,
            buffers.truncated,
        )

    def run_commands(self, reset_args: dict | None, rows: np.ndarray | None = None) -> dict | None:
        """Run the shared per-row commands of ``rows`` (default: all of this group's);
        IDLE rows are left alone. Returns the non-empty infos by row, or None."""
        command = self.fast[0]
        if rows is None:
            rows, envs = self.row_array, self.envs
        else:
            envs = [self.envs[self.position[row]] for row in rows.tolist()]
        todos = command[rows].tolist()
        if IDLE in todos:
            busy = [k for k, todo in enumerate(todos) if todo != IDLE]
            rows, envs, todos = rows[busy], [envs[k] for k in busy], [todos[k] for k in busy]
        return self._run(envs, rows, todos, reset_args)

    def step_all(self, ahead: bool) -> dict | None:
        """Step every env of this group: STEP, or STEP_AHEAD when ``ahead``, with no
        per-row command to read (the common case of a training loop)."""
        return self._run(self.envs, self.row_array, None, None, STEP_AHEAD if ahead else STEP)

    def _run(self, envs, rows: np.ndarray, todos, reset_args, todo: int = STEP) -> dict | None:
        """Run command ``todos[k]`` (or ``todo`` for all) on ``envs[k]``, batch row
        ``rows[k]``, and write the results to the shared block.

        Actions are read with one NumPy call, rewards and flags written with one call each,
        and observations of a flat space with one assignment when the rows are the whole
        group: per env only ``env.step`` (or ``env.reset``) and list appends remain.
        """
        _, read_actions, write_observ, write_ahead, reward, terminated, truncated = self.fast
        labels = rows.tolist()
        actions = read_actions(rows)
        block = self.block if rows is self.row_array else None  # the whole group, in order
        shape = block[0] if block is not None else None
        observs, rewards, terms, truncs = [], [], [], []
        infos = None
        failures: list[EnvFailure] = []
        for k, env in enumerate(envs):
            row = labels[k]
            if todos is not None:
                todo = todos[k]
            try:
                if todo == RESET:
                    seed, options = (reset_args or {}).get(row, (None, None))
                    observ, info = env.reset(seed=seed, options=options)
                    rew, term, trunc = 0.0, False, False
                else:
                    observ, rew, term, trunc, info = env.step(actions[k])
                    if (term or trunc) and todo != STEP:
                        observ, info = end_episode(env, todo, observ, info, write_ahead, row)
                if shape is None or getattr(observ, "shape", None) != shape:
                    write_observ(row, observ)  # its checks name what was expected
            except Exception as error:  # the others still step: every failure is reported
                failure = EnvFailure(row, error)
                failure.__cause__ = error
                failures.append(failure)
                continue
            except BaseException as error:  # KeyboardInterrupt, SystemExit: at once
                raise EnvFailure(row, error) from error
            observs.append(observ)
            rewards.append(rew)
            terms.append(term)
            truncs.append(trunc)
            if info:
                if infos is None:
                    infos = {}
                infos[row] = info
        if failures:
            failures[0].others = failures[1:]
            raise failures[0]
        if block is not None:
            try:
                block[1][...] = observs
            except (ValueError, TypeError):  # store row by row, naming a row that fails
                for row, observ in zip(labels, observs):
                    try:
                        write_observ(row, observ)
                    except BaseException as error:
                        raise EnvFailure(row, error) from error
        reward[rows] = rewards
        terminated[rows] = terms
        truncated[rows] = truncs
        return infos

    def call(self, slot: int, name: str, args: tuple, kwargs: dict):
        try:
            return call_env(self.envs[slot], name, args, kwargs)
        except BaseException as error:
            raise EnvFailure(self.rows[slot], error) from error

    def get_attr(self, slot: int, name: str):
        try:
            return get_env_attr(self.envs[slot], name)
        except AttributeError as error:
            raise EnvFailure(self.rows[slot], error) from error

    def set_attr(self, slot: int, name: str, value) -> None:
        try:
            set_env_attr(self.envs[slot], name, value)
        except BaseException as error:
            raise EnvFailure(self.rows[slot], error) from error

    def close_envs(self) -> list[str]:
        problems = []
        for env, row in zip(self.envs, self.rows):
            try:
                env.close()
            except BaseException as error:
                problems.append(f"env {row}: {type(error).__name__}: {error}")
        return problems


def _observ_block(space, observ: list[np.ndarray], rows: list[int]):
    """``(shape, block)`` when this group's observations can be written in one
    assignment: a single float leaf (integer leaves need per-value range checks) and
    consecutive rows; ``block`` is the view of those rows. None otherwise."""
    leaves = batch_spaces.leaves(space)
    if len(leaves) != 1 or observ[0].dtype.kind != "f":
        return None
    if rows != list(range(rows[0], rows[0] + len(rows))):
        return None
    shape = batch_spaces.leaf_layout(leaves[0])[0]
    return shape, observ[0][rows[0] : rows[0] + len(rows)]
