"""Legacy Gym API support, without depending on ``gym``.

A *legacy* env follows the Gym API before 0.26: ``reset()`` returns only the observation,
``seed(s)`` seeds it, ``step(a)`` returns ``(obs, reward, done, info)`` and a time limit
shows as ``info["TimeLimit.truncated"]``. Its spaces come from ``gym.spaces``.
:class:`LegacyGymEnv` adapts such an env to ``gymnasium.Env``; :func:`to_gymnasium` wraps
what needs it and passes Gymnasium envs through. Legacy spaces are recognised by their
class name (Box, Discrete, MultiDiscrete, MultiBinary, Tuple, Dict) and attributes, so
``gym`` itself is never imported. Gym 0.26 envs (5-tuple ``step``) are not legacy in this
sense; shimmy's ``GymV26CompatibilityV0`` adapts those.

Worker processes import this module: it needs only NumPy and Gymnasium.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = ["LegacyGymEnv", "convert_space", "is_legacy_env", "to_gymnasium"]

_TRUNCATED_KEY = "TimeLimit.truncated"


def _attrs(space: Any, *names: str) -> list[Any]:
    missing = [name for name in names if not hasattr(space, name)]
    if missing:
        raise TypeError(
            f"cannot convert the legacy {type(space).__name__} space {space!r}: it has no "
            f"attribute {', '.join(missing)}"
        )
    return [getattr(space, name) for name in names]


def convert_space(space: Any) -> spaces.Space:
    """The ``gymnasium.spaces`` equivalent of a legacy ``gym.spaces`` space.

    Gymnasium spaces pass through unchanged; Tuple and Dict spaces are converted
    recursively (Dict keeps the legacy key order).

    >>> from gymnasium import spaces
    >>> convert_space(spaces.Discrete(3))
    Discrete(3)
    """
    if isinstance(space, spaces.Space):
        return space
    kind = type(space).__name__
    if kind == "Box":
        low, high, shape, dtype = _attrs(space, "low", "high", "shape", "dtype")
        dtype = np.dtype(dtype)
        low, high = np.asarray(low).astype(dtype), np.asarray(high).astype(dtype)
        return spaces.Box(low, high, tuple(shape), dtype)
    if kind == "Discrete":
        (n,) = _attrs(space, "n")
        return spaces.Discrete(int(n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        (nvec,) = _attrs(space, "nvec")
        dtype = getattr(space, "dtype", None)  # np.dtype is falsy: no `or` here
        return spaces.MultiDiscrete(np.asarray(nvec), dtype=np.int64 if dtype is None else dtype)
    if kind == "MultiBinary":
        (n,) = _attrs(space, "n")
        return spaces.MultiBinary(n if np.isscalar(n) else [int(x) for x in np.ravel(n)])
    if kind == "Tuple":
        (subspaces,) = _attrs(space, "spaces")
        return spaces.Tuple([convert_space(sub) for sub in subspaces])
    if kind == "Dict":
        (subspaces,) = _attrs(space, "spaces")
        items = {key: convert_space(sub) for key, sub in subspaces.items()}
        return spaces.Dict(items, sort_keys=False)
    raise TypeError(
        f"cannot convert the space {space!r} (class {type(space).__module__}.{kind}) to "
        "Gymnasium: supported legacy spaces are Box, Discrete, MultiDiscrete, MultiBinary, "
        "Tuple and Dict"
    )


class LegacyGymEnv(gymnasium.Env):
    """A legacy Gym env (``reset() -> obs``, 4-tuple ``step``) as a ``gymnasium.Env``.

    ``reset(seed=s)`` calls the legacy ``env.seed(s)`` first (a warning if it has none) and
    returns ``(obs, {})``. ``step`` returns ``(obs, reward, terminated, truncated, info)``
    with ``truncated = info.get("TimeLimit.truncated", False)`` and
    ``terminated = done and not truncated``; ``info`` is a copy. The spaces are converted
    once, at construction; the legacy metadata keys ``render.modes`` and
    ``video.frames_per_second`` are also given their Gymnasium names. ``render()`` and
    ``close()`` are forwarded; the legacy env is ``self.env``.

    Args:
        env: the legacy env.
        render_mode: passed to the legacy ``env.render(mode=...)``; ``None`` calls
            ``env.render()`` with its own default.

    >>> class Legacy:  # a legacy env with Gymnasium spaces, for brevity
    ...     observation_space = spaces.Discrete(5)
    ...     action_space = spaces.Discrete(2)
    ...     def reset(self):
    ...         self.t = 0
    ...         return self.t
    ...     def step(self, action):
    ...         self.t += 1
    ...         return self.t, 1.0, self.t == 3, {"TimeLimit.truncated": True}
    >>> env = LegacyGymEnv(Legacy())
    >>> env.reset()
    (0, {})
    >>> env.step(0)[2:4]  # not done: truncated, but not terminated
    (False, True)
    """

    def __init__(self, env: Any, render_mode: str | None = None):
        for name in ("reset", "step"):
            if not callable(getattr(env, name, None)):
                raise TypeError(f"LegacyGymEnv needs an env with a {name}() method, got {env!r}")
        for name in ("observation_space", "action_space"):
            if getattr(env, name, None) is None:
                raise TypeError(f"LegacyGymEnv needs an env with an {name}, got {env!r}")
        self.env = env
        self.observation_space = convert_space(env.observation_space)
        self.action_space = convert_space(env.action_space)
        metadata = dict(getattr(env, "metadata", None) or {})
        metadata.setdefault("render_modes", list(metadata.get("render.modes", [])))
        if "video.frames_per_second" in metadata:  # the legacy name of render_fps
            metadata.setdefault("render_fps", metadata["video.frames_per_second"])
        self.metadata = metadata
        self.render_mode = render_mode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the legacy env, seeding it first through ``env.seed(seed)`` if given."""
        if options:
            raise ValueError(
                f"LegacyGymEnv.reset(options={options!r}): a legacy Gym env takes no reset "
                "options; pass options=None"
            )
        super().reset(seed=seed)
        if seed is not None:
            seed_method = getattr(self.env, "seed", None)
            if callable(seed_method):
                seed_method(seed)
            else:
                gymnasium.logger.warn(
                    f"LegacyGymEnv.reset(seed={seed}): the legacy env {self.env!r} has no "
                    "seed() method, so the seed is ignored and resets are not reproducible"
                )
        return self.env.reset(), {}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the legacy env and split its ``done`` into terminated and truncated."""
        result = self.env.step(action)
        if not isinstance(result, tuple) or len(result) != 4:
            count = len(result) if isinstance(result, tuple) else type(result).__name__
            raise TypeError(
                f"LegacyGymEnv: the legacy env's step() returned {count} values, expected "
                "(obs, reward, done, info); a 5-tuple env already follows the Gym 0.26 API "
                "(adapt it with shimmy's GymV26CompatibilityV0)"
            )
        observ, reward, done, info = result
        info = dict(info or {})
        truncated = bool(info.get(_TRUNCATED_KEY, False))
        terminated = bool(done) and not truncated
        return observ, reward, terminated, truncated, info

    def render(self) -> Any:
        """Forward to the legacy ``env.render(mode=render_mode)``."""
        if self.render_mode is None:
            return self.env.render()
        return self.env.render(mode=self.render_mode)

    def close(self) -> None:
        """Forward to the legacy ``env.close()`` if it has one."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return f"LegacyGymEnv({self.env!r})"


def is_legacy_env(env: Any) -> bool:
    """Whether ``env`` follows the legacy Gym API, judged without calling it.

    A ``gymnasium.Env`` is never legacy. Any other object is legacy when one of its spaces
    is not a Gymnasium space, or when it has a ``seed()`` method (which Gymnasium dropped).

    >>> import gymnasium
    >>> is_legacy_env(gymnasium.make("CartPole-v1"))
    False
    """
    if isinstance(env, gymnasium.Env):
        return False
    env_spaces = [getattr(env, "observation_space", None), getattr(env, "action_space", None)]
    if not all(isinstance(space, spaces.Space) for space in env_spaces):
        return True
    return callable(getattr(env, "seed", None))


def to_gymnasium(env: Any, legacy: bool | None = None) -> gymnasium.Env:
    """``env`` as a Gymnasium env: legacy envs wrapped in :class:`LegacyGymEnv`, PettingZoo
    parallel envs in :class:`batchenv.multi_agent.JointEnv`.

    Args:
        env: a Gymnasium env (returned unchanged) or a legacy Gym env.
        legacy: ``None`` detects the API with :func:`is_legacy_env`; ``True`` or ``False``
            overrides the detection.

    >>> import gymnasium
    >>> env = gymnasium.make("CartPole-v1")
    >>> to_gymnasium(env) is env
    True
    """
    from batchenv import multi_agent

    if multi_agent.is_parallel_env(env):
        return multi_agent.JointEnv(env)
    if multi_agent.is_aec_env(env):
        raise TypeError(
            f"{type(env).__name__} is a PettingZoo AEC env (agents act in turn); batchenv "
            "batches parallel envs: build it with the module's parallel_env(), or convert it "
            "with pettingzoo.utils.conversions.aec_to_parallel"
        )
    if legacy is None:
        legacy = is_legacy_env(env)
    if not legacy or isinstance(env, LegacyGymEnv):
        return env
    return LegacyGymEnv(env)
