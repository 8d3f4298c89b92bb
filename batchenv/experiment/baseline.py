"""The random baseline: mean episode return of uniformly random actions, cached per env.

SLM Lab measures every env's random-policy return once (100 episodes) and subtracts it from
the learning curve to get local strengths (``batchenv.experiment.metrics``). Here it is
measured on demand and kept in a JSON file, one entry per (env, episodes, seed)::

    >>> random_return("CartPole-v1")  # a Gymnasium id
    23.68
    >>> random_return("batchenv.kernels:CartPole")  # an in-graph env class
    23.19

The cache lives at ``$BATCHENV_CACHE/random_returns.json`` when that variable names a
folder, else ``~/.cache/batchenv/random_returns.json``; it is rewritten atomically, and a
corrupt one is measured over and replaced.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from batchenv.atomic_file import write_atomic

#: Episode length cap when the env declares no time limit.
DEFAULT_MAX_STEPS = 10_000
#: Most in-graph envs stepped side by side.
MAX_PARALLEL = 100
CACHE_NAME = "random_returns.json"


def default_cache_path() -> Path:
    """``$BATCHENV_CACHE/random_returns.json``, else ``~/.cache/batchenv/random_returns.json``."""
    root = os.environ.get("BATCHENV_CACHE")
    folder = Path(root) if root else Path.home() / ".cache" / "batchenv"
    return folder / CACHE_NAME


def cache_key(env: str, episodes: int, seed: int) -> str:
    """The cache entry of one measurement, e.g. ``"CartPole-v1|episodes=100|seed=0"``."""
    return f"{env}|episodes={episodes}|seed={seed}"


def is_in_graph(env: str) -> bool:
    """Whether ``env`` names an in-graph env class (``"module:Class"``).

    Gymnasium also accepts ``"module:EnvId-v0"`` (import a module, then make a registered
    id); those are told apart by the part after the colon: a class name is a Python
    identifier, an env id is not (``-v0``).
    """
    module, sep, name = env.rpartition(":")
    return bool(sep and module and name.isidentifier())


def random_return(
    env: str,
    episodes: int = 100,
    seed: int = 0,
    cache: str | os.PathLike | None = None,
) -> float:
    """Mean return of uniformly random actions over ``episodes`` episodes, cached.

    Args:
        env: a Gymnasium id (``"CartPole-v1"``) or an in-graph env class
            (``"batchenv.kernels:CartPole"``); see :func:`measure_random_return`.
        episodes: how many episodes to average.
        seed: seeds the env and the action sampler; the result is a pure function of
            ``(env, episodes, seed)``.
        cache: the JSON cache file; None means :func:`default_cache_path`.

    Example::

        >>> random_return("CartPole-v1", episodes=20, cache="/tmp/random_returns.json")
        22.9
    """
    path = Path(cache) if cache is not None else default_cache_path()
    key = cache_key(env, episodes, seed)
    value = _read_cache(path).get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    value = measure_random_return(env, episodes, seed)
    entries = _read_cache(path, quiet=True)  # again: another process may have added some
    entries[key] = value
    _write_cache(path, entries)
    return value


def measure_random_return(env: str, episodes: int = 100, seed: int = 0) -> float:
    """Measure the random-policy mean return, without the cache.

    A Gymnasium id is made with ``gymnasium.make``; episode ``k`` starts from
    ``reset(seed=seed + k)`` and actions come from ``action_space`` seeded once with
    ``seed``. An in-graph class is built as ``Class(num_envs=min(episodes, 100),
    device="cpu", seed=seed)`` and its rows are stepped together; row ``r`` plays a fixed
    share of the episodes (``episodes // n``, one more for the first ``episodes % n``
    rows) and is reset with ``env.reset(rows)`` after each. (Keeping the first
    ``episodes`` episodes to finish instead would favour short episodes.) Rewards are
    summed over any agent axis.

    Each episode is capped at the env's time limit (Gymnasium's ``max_episode_steps``,
    the class's ``max_episode_steps``), else at :data:`DEFAULT_MAX_STEPS` steps.

    Example::

        >>> measure_random_return("CartPole-v1", episodes=5, seed=0)
        17.0
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    if is_in_graph(env):
        return _measure_in_graph(env, episodes, seed)
    return _measure_gymnasium(env, episodes, seed)


def _measure_gymnasium(env_id: str, episodes: int, seed: int) -> float:
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        limit = env.spec.max_episode_steps if env.spec is not None else None
        limit = limit or DEFAULT_MAX_STEPS
        env.action_space.seed(seed)
        totals = []
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            total = 0.0
            for _ in range(limit):
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(np.sum(reward))
                if terminated or truncated:
                    break
            totals.append(total)
    finally:
        env.close()
    return float(np.mean(totals))


def _measure_in_graph(target: str, episodes: int, seed: int) -> float:
    import torch
    from gymnasium.vector.utils import batch_space

    module_name, _, class_name = target.rpartition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    rows = min(episodes, MAX_PARALLEL)
    env = cls(num_envs=rows, device="cpu", seed=seed)
    limit = int(getattr(env, "max_episode_steps", None) or DEFAULT_MAX_STEPS)
    actions = batch_space(env.single_action_space, rows)
    actions.seed(seed)

    quota = np.full(rows, episodes // rows)
    quota[: episodes % rows] += 1
    played = np.zeros(rows, dtype=np.int64)
    elapsed = np.zeros(rows, dtype=np.int64)
    running = np.zeros(rows)
    totals: list[float] = []
    env.reset(torch.arange(rows))
    with torch.no_grad():
        while (played < quota).any():
            action = torch.as_tensor(np.asarray(actions.sample()))
            _, reward, terminated, truncated = env.step(action)
            running += reward.reshape(rows, -1).sum(dim=1).double().numpy()
            elapsed += 1
            done = (terminated | truncated).numpy() | (elapsed >= limit)
            finished = np.flatnonzero(done & (played < quota))
            totals.extend(running[finished].tolist())
            played[finished] += 1
            ended = np.flatnonzero(done)
            if len(ended):
                env.reset(torch.as_tensor(ended, dtype=torch.int64))
                running[ended] = 0.0
                elapsed[ended] = 0
    return float(np.mean(totals))


def _read_cache(path: Path, quiet: bool = False) -> dict:
    """The cache's entries; {} when it is missing or corrupt (with a warning unless quiet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        entries = json.loads(text)
    except ValueError:
        entries = None
    if not isinstance(entries, dict):
        if quiet:
            return {}
        warnings.warn(
            f"random-return cache {path} is not a JSON object; measuring again and overwriting it.",
            RuntimeWarning,
            stacklevel=3,
        )
        return {}
    return entries


def _write_cache(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
