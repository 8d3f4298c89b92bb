"""The envs IMPALA actors step: a Gymnasium id or a constructor, grouped and autoreset.

``env_constructor("CartPole-v1")`` makes the plain Gymnasium env; Atari ids
(``PongNoFrameskip-v4``, ``ALE/Pong-v5``) get the DeepMind preprocessing of
``batchenv.wrappers.make_atari`` (frames ``[4, 84, 84]`` uint8); MinAtar ids
(``MinAtar/Breakout-v1``) are the ``minatar`` package's games (frames ``[10, 10, C]`` bool),
registered in each process that makes one. An actor steps its envs as one group:
``InProcessGroup`` steps them one after another in the actor process itself,
``WorkerGroup`` in a ``batchenv.make`` worker group. Both autoreset: the observation
returned for a finished env is the first one of its next episode, as in TorchBeast.

    >>> group = InProcessGroup([env_constructor("CartPole-v1")] * 3)
    >>> group.reset(seed=0).shape
    (3, 4)
    >>> observ, reward, done = group.step(np.zeros(3, np.int64))
    >>> reward.tolist(), done.tolist()
    ([1.0, 1.0, 1.0], [False, False, False])
    >>> group.close()
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import gymnasium
import numpy as np

__all__ = [
    "AsyncWorkerGroup",
    "InProcessGroup",
    "WorkerGroup",
    "describe",
    "env_constructor",
    "is_atari_id",
    "is_minatar_id",
    "minatar_ids",
]


def is_atari_id(env_id: str) -> bool:
    """True for ids of the ALE: ``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ``Pong-v4``..."""
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def is_minatar_id(env: object) -> bool:
    """True for the ``minatar`` package's ids: ``MinAtar/Breakout-v1``, ``MinAtar/Freeway-v0``..."""
    from batchenv.make import MINATAR_PREFIX

    return isinstance(env, str) and env.startswith(MINATAR_PREFIX)


def minatar_ids() -> list[str]:
    """The registered ``MinAtar/`` ids (after :func:`batchenv.make.register_minatar`)."""
    from batchenv.make import MINATAR_PREFIX

    return sorted(i for i in gymnasium.registry if i.startswith(MINATAR_PREFIX))


def _make_gymnasium(env_id: str) -> gymnasium.Env:
    if is_minatar_id(env_id):
        from batchenv.make import make_minatar

        return make_minatar(env_id)
    if is_atari_id(env_id):
        from batchenv.wrappers import make_atari

        return make_atari(env_id)
    return gymnasium.make(env_id, disable_env_checker=True)


def env_constructor(env: str | Callable[[], gymnasium.Env]) -> Callable[[], gymnasium.Env]:
    """A picklable constructor for ``env``: a Gymnasium id or already a constructor."""
    if isinstance(env, str):
        return functools.partial(_make_gymnasium, env)
    if callable(env):
        return env
    raise TypeError(f"env must be a Gymnasium id or a constructor, got {env!r}")


def describe(env: str | Callable) -> str:
    """A short name of ``env`` for messages: the id, or the constructor's name."""
    if isinstance(env, str):
        return env
    if isinstance(env, functools.partial):
        args = ", ".join(repr(a) for a in env.args)
        return f"{getattr(env.func, '__name__', repr(env.func))}({args})"
    return getattr(env, "__qualname__", None) or repr(env)


class InProcessGroup:
    """Envs stepped one after another in the calling process, with autoreset."""

    def __init__(self, constructors: list[Callable[[], gymnasium.Env]]):
        self.envs = [constructor() for constructor in constructors]
        self._observ: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env j with ``seed + j``); the stacked first observations."""
        observs = [
            env.reset(seed=None if seed is None else seed + j)[0] for j, env in enumerate(self.envs)
        ]
        self._observ = np.stack(observs)
        return self._observ.copy()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step every env; finished envs are reset (their row holds the new first frame)."""
        if self._observ is None:
            raise RuntimeError("InProcessGroup.step() before reset()")
        num = len(self.envs)
        reward = np.empty(num, np.float32)
        done = np.empty(num, np.bool_)
        observ = self._observ
        # Python ints: Discrete.contains() checks them several times faster than NumPy ints.
        for j, (env, action) in enumerate(zip(self.envs, np.asarray(actions).tolist())):
            o, r, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                o, _ = env.reset()
                done[j] = True
            else:
                done[j] = False
            observ[j] = o
            reward[j] = r
        return observ, reward, done

    def close(self) -> None:
        for env in self.envs:
            env.close()


class WorkerGroup:
    """Envs in a ``batchenv.make`` worker group (``num_workers`` processes), with autoreset."""

    def __init__(
        self,
        constructors: list[Callable[[], gymnasium.Env]],
        num_workers: int,
        timeout: float,
        start_timeout: float | None = None,
    ):
        import batchenv
        from batchenv.make import DEFAULT_START_TIMEOUT, start_workers

        deadlines = {
            "timeout": timeout,
            "start_timeout": DEFAULT_START_TIMEOUT if start_timeout is None else start_timeout,
        }
        if len(set(map(id, constructors))) == 1:
            self.env = batchenv.make(
                constructors[0], len(constructors), num_workers=num_workers, **deadlines
            )
        else:
            self.env = start_workers(
                constructors, num_workers=num_workers, reset_ahead=True, **deadlines
            )

    def reset(self, seed: int | None = None) -> np.ndarray:
        observ, _ = self.env.reset(seed=seed)
        return observ

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        observ, reward, terminated, truncated, _ = self.env.step(actions)
        done = np.logical_or(terminated, truncated)
        if done.any():
            rows = np.flatnonzero(done)
            observ[rows] = self.env.reset(indices=rows)[0]
        return observ, reward.astype(np.float32, copy=False), done

    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [process.pid for process in self.env.processes()]

    def close(self) -> None:
        self.env.close()


class AsyncWorkerGroup:
    """Envs in a ``batchenv.make`` worker group driven by EnvPool's ``send``/``recv``:
    :meth:`recv` returns the first ``batch_size`` envs to finish, so the actor runs the
    model on them while the workers step the others, and a slow env stalls only itself.
    Finished envs reset at once (their row holds the next episode's first observation and
    ``done``), as in TorchBeast."""

    def __init__(
        self,
        constructor: Callable[[], gymnasium.Env],
        num_envs: int,
        num_workers: int,
        batch_size: int,
        timeout: float,
        start_timeout: float | None = None,
    ):
        import batchenv
        from batchenv.make import DEFAULT_START_TIMEOUT

        self.env = batchenv.make(
            constructor,
            num_envs,
            num_workers=num_workers,
            batch_size=batch_size,
            autoreset_mode="same_step",
            timeout=timeout,
            start_timeout=DEFAULT_START_TIMEOUT if start_timeout is None else start_timeout,
        )

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (env j with ``seed + j``); their first observations come from
        :meth:`recv` (with ``done`` False and reward 0)."""
        self.env.async_reset(seed=seed)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(env_ids, observ, reward, done)`` of the first ``batch_size`` envs to finish."""
        observ, reward, terminated, truncated, info = self.env.recv()
        done = np.logical_or(terminated, truncated)
        return info["env_id"], observ, reward.astype(np.float32, copy=False), done

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        self.env.send(actions, env_ids)

    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [process.pid for process in self.env.processes()]

    def close(self) -> None:
        self.env.close()
