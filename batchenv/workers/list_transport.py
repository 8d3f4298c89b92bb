"""ListTransport: one env object per row, the TF Agents way.

The rows are in-process Gymnasium envs (stepped one after another) or ExternalProcess
workers hosting one env each (the actions are sent to every worker before any result is
collected, so the workers step in parallel).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv.errors import EnvWorkerError, WorkerTimeoutError
from batchenv.workers.env_group import call_env, get_env_attr, set_env_attr
from batchenv.workers.external_process import ExternalProcess, remaining
from batchenv.workers.transport import Results, check_same_spaces, slow_rows_error


class ListTransport:
    """One env object per row: Gymnasium envs stepped in-process, or ExternalProcess."""

    reset_ahead = False

    def __init__(self, envs: Sequence[Any], blocking: bool = False):
        self.envs = list(envs)
        self.blocking = blocking
        self.num_envs = len(self.envs)
        for row, env in enumerate(self.envs):
            if isinstance(env, ExternalProcess):
                if len(env.rows) != 1:
                    raise ValueError(
                        f"env {row} is an ExternalProcess hosting {len(env.rows)} envs; a BatchEnv "
                        "takes one env per ExternalProcess (use batchenv.make for groups)"
                    )
                env.label(row, [row])  # errors then name the batch row
        check_same_spaces([(env.observation_space, env.action_space) for env in self.envs])
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self._pending: list = []
        self._kind = "step"

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args,
        command: None = None,
        step: int | None = None,
    ) -> None:
        if command is not None:
            raise ValueError("per-row commands need a shared-memory BatchEnv (batchenv.make)")
        read = (
            batch_spaces.make_row_reader(self.action_space, actions)
            if actions is not None
            else None
        )
        pending = []
        for row in rows:
            env = self.envs[row]
            if kind == "step":
                args = (read(row),)
                call = lambda e=env, a=args: e.step(*a)
            else:
                seed, options = reset_args[row] if reset_args else (None, None)
                call = lambda e=env, s=seed, o=options: e.reset(seed=s, options=o)
            if isinstance(env, ExternalProcess) and not self.blocking:
                if kind == "step":
                    pending.append((row, env.step(args[0], blocking=False)))
                else:
                    pending.append((row, env.reset(seed=seed, options=options, blocking=False)))
            else:
                pending.append((row, _Immediate(call)))
        self._pending = pending
        self._kind = kind

    def finish(self, deadline: float | None, step: int) -> Results:
        raw, pending, self._pending = [], self._pending, []
        for index, (row, promise) in enumerate(pending):
            try:
                raw.append(promise(remaining(deadline), step=step))
            except WorkerTimeoutError as error:
                slow = [int(row)] + [int(r) for r, p in pending[index + 1 :] if not p.ready()]
                raise slow_rows_error(error, slow) from error
            except EnvWorkerError:
                raise
            except Exception as error:
                raise EnvWorkerError(
                    f"env {row} ({type(self.envs[row]).__name__}) raised {type(error).__name__} "
                    f"at step {step}: {error}",
                    env_index=row,
                    step=step,
                    env_description=str(self.envs[row]),
                    remote_type=type(error).__name__,
                ) from error
        return self._assemble([row for row, _ in pending], raw, step)

    def _assemble(self, rows: list[int], raw: list, step: int) -> Results:
        """Stack what each env returned into the arrays of a :class:`Results`."""
        observ = batch_spaces.allocate(self.observation_space, len(rows))
        writer = batch_spaces.make_row_writer(self.observation_space, observ)
        results = Results(observ)
        if self._kind == "step":
            results.reward = np.zeros(len(rows), np.float64)
            results.terminated = np.zeros(len(rows), bool)
            results.truncated = np.zeros(len(rows), bool)
            for i, (obs, reward, terminated, truncated, info) in enumerate(raw):
                self._write_checked(writer, i, obs, rows[i], step)
                results.reward[i], results.terminated[i] = reward, terminated
                results.truncated[i] = truncated
                results.infos[int(rows[i])] = info
        else:
            for i, (obs, info) in enumerate(raw):
                self._write_checked(writer, i, obs, rows[i], step)
                results.infos[int(rows[i])] = info
        return results

    def _write_checked(self, writer, i: int, obs, row: int, step: int) -> None:
        try:
            writer(i, obs)
        except ValueError as error:
            env = self.envs[row]
            in_worker = isinstance(env, ExternalProcess)
            where = f"worker {row} ({env.description}), " if in_worker else ""
            raise EnvWorkerError(
                f"{where}env {row} returned a bad observation at step {step}: {error}",
                worker=int(row) if in_worker else None,
                env_index=int(row),
                step=step,
                remote_type="ValueError",
            ) from error

    def take_ready(self, rows: np.ndarray) -> None:
        return None  # nothing is reset ahead here

    def env_objects(self) -> list:
        return self.envs

    def call(self, row: int, name: str, args: tuple, kwargs: dict):
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            return env.call_at(0, name, args, kwargs)
        return call_env(env, name, args, kwargs)

    def get_attr(self, row: int, name: str):
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            return env.get_attr(name)
        return get_env_attr(env, name)

    def set_attr(self, row: int, name: str, value: Any) -> None:
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            env.set_attr(name, value)
        else:
            set_env_attr(env, name, value)

    def close(self, timeout: float) -> list[str]:
        problems = []
        deadline = time.monotonic() + timeout
        for env in self.envs:
            if isinstance(env, ExternalProcess):
                problems += env.close(max(0.1, deadline - time.monotonic()))
            else:
                try:
                    env.close()
                except Exception as error:
                    problems.append(f"{type(error).__name__}: {error}")
        return problems

    def terminate(self) -> None:
        for env in self.envs:
            if isinstance(env, ExternalProcess):
                env.terminate()

    def processes(self) -> list[ExternalProcess]:
        return [env for env in self.envs if isinstance(env, ExternalProcess)]


class _Immediate:
    """A promise that runs its call when asked (blocking stepping, in-process envs)."""

    def __init__(self, call):
        self.call = call

    def __call__(self, timeout: float | None = None, *, step: int | None = None):
        return self.call()

    def ready(self) -> bool:
        return True
