"""Helpers of the Asterix, Seaquest and Space Invaders tests.

:func:`play`: scripted play against the reference. One ``minatar`` game object and a
one-row batched game are stepped together by a policy that reads the reference's state,
and compared exactly at every step (``check_minatar`` covers random play; a script reaches
what random play rarely does: cleared waves, six divers, deep ramps, crowded screens).
:func:`step` and :func:`cells` read the observation of a hand-built scene's step."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchenv.kernels.minatar import MinAtarEnv


class Recorder(np.random.RandomState):
    """A RandomState that logs each ``rand``/``randint`` with the method that called it,
    as a uniform our games map back to the same value."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.calls: list[tuple[str, float]] = []

    def rand(self, *size: int) -> Any:
        value = super().rand(*size)
        self._log(float(value))
        return value

    def randint(self, low: int, high: int | None = None, size: Any = None, dtype: Any = int) -> Any:
        value = super().randint(low, high, size, dtype)
        lo, hi = (0, low) if high is None else (low, high)
        self._log((int(value) - lo + 0.5) / (hi - lo))
        return value

    def _log(self, uniform: float) -> None:
        caller = sys._getframe(2)
        owner = type(caller.f_locals.get("self")).__name__
        self.calls.append((f"{owner}.{caller.f_code.co_name}", uniform))


def play(
    env_class: type[MinAtarEnv],
    policy: Callable[[Any], int],
    steps: int,
    seed: int = 0,
    *,
    difficulty_ramping: bool = True,
    setup: Callable[[Any], None] | None = None,
) -> list[tuple[dict, float, bool]]:
    """Play ``steps`` steps; return each step's ``(reference state, reward, terminal)``.

    ``policy(game)`` gets the reference's game object and returns a full-set action;
    ``setup(game)`` edits each fresh game (both sides start from its state). Sticky actions
    are on (0.1), their draws shared. Fails with the step and field at the first difference.
    """
    import minatar

    reference = minatar.Environment(env_class.game, 0.1, difficulty_ramping)
    reference.random = reference.env.random = recorder = Recorder(seed)
    env = env_class(1, seed=seed, minimal_action_set=False, difficulty_ramping=difficulty_ramping)
    rng = np.random.default_rng(seed)

    def start() -> None:
        reference.reset()
        if setup is not None:
            setup(reference.env)
        env.reset(torch.tensor([0]))
        env.set_state(_one_row(env_class.state_from_reference(reference.env)))

    start()
    history = []
    for step in range(steps):
        recorder.calls.clear()
        action = policy(reference.env)
        reward, terminal = reference.act(action)
        draws = {"sticky": rng.random((1, 1))}  # what the reference did not draw: noise
        draws.update({d.name: rng.random((1, d.count)) for d in env.step_draws})
        sites = [("Environment.act", "sticky")] + [(d.site, d.name) for d in env.step_draws]
        for site, uniform in recorder.calls:  # the k-th call from a site: its k-th Draw
            k = next(i for i, (s, _) in enumerate(sites) if s == site)
            draws[sites.pop(k)[1]][0, 0] = uniform
        observ, ours, terminated, _ = env.step(
            torch.tensor([action]), draws={k: torch.as_tensor(v) for k, v in draws.items()}
        )
        where = f"{env_class.__name__} step {step}"
        assert np.array_equal(observ[0].numpy(), reference.state()), f"{where}: observation"
        assert float(ours[0]) == float(reward), f"{where}: reward {float(ours[0])} != {reward}"
        assert bool(terminated[0]) == bool(terminal), f"{where}: terminal"
        expected = env_class.state_from_reference(reference.env)
        state = env.get_state()
        for key, value in expected.items():
            assert np.array_equal(state[key][0].numpy(), np.asarray(value)), f"{where}: {key}"
        history.append((expected, float(reward), bool(terminal)))
        if terminal:
            start()
    return history


def step(env: MinAtarEnv, action: int) -> tuple[torch.Tensor, float, bool]:
    """``(observation [10, 10, C], reward, terminated)`` of one step of a one-row scene
    (``action`` a minimal-set index; the scene's own draws)."""
    observ, reward, terminated, _ = env.step(torch.tensor([action]))
    return observ[0], float(reward[0]), bool(terminated[0])


def cells(observ: torch.Tensor, channel: int) -> list[tuple[int, int]]:
    """The ``(row, column)`` cells set in one channel of an observation ``[10, 10, C]``."""
    return [tuple(c) for c in torch.nonzero(observ[:, :, channel]).tolist()]


def _one_row(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(np.asarray(value))[None] for key, value in state.items()}
