"""Hold a batched MinAtar game to the reference ``minatar`` package, step by step, exactly.

:func:`check_minatar` runs ``num_envs`` reference ``minatar.Environment`` objects beside one
batched env of the same game. Each reference env's ``RandomState`` (shared by the wrapper
and the game, as after ``Environment.seed``) is a recording one, so every ``rand()`` and
``randint()`` it makes is known together with the reference method that made it. At every
step both sides take the same random actions, and the reference's draws are handed to
``env.step(action, draws=...)``: the k-th call a step makes from a method goes to the k-th
:class:`~batchenv.kernels.minatar.Draw` the game declares for that method (its ``site``).
A ``rand()`` value is passed on as it is, a ``randint(lo, hi)`` value k as
``(k - lo + 0.5) / (hi - lo)``, which the game's ``lo + floor(u * (hi - lo))`` maps back to
k. Draws the reference did not make this step are filled with fresh uniforms, so a game
that reads a draw it should not read shows up as a mismatch.

Compared exactly at every step: the observation, the reward, the terminal flag and every
state tensor (the game's ``state_from_reference`` of the reference object, plus
``terminal`` and ``last_action``). Finished rows are reset on both sides, ours fed the
reference's reset draws, and compared again.

    >>> from batchenv.kernels.minatar import Breakout
    >>> check_minatar(Breakout, num_envs=4, steps=100, seed=0).passed
    True
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchenv.kernels.consistency import ConsistencyReport, Mismatch

from ._base import STICKY, Draw, MinAtarEnv


@dataclass(frozen=True)
class MinAtarReport(ConsistencyReport):
    """A :class:`ConsistencyReport` with the reference's total reward (how much of the game
    the random policy reached)."""

    rewards: float = 0.0


def check_minatar(
    env_class: type[MinAtarEnv],
    num_envs: int = 20,
    steps: int = 1000,
    seed: int = 0,
    *,
    episodes: int | None = None,
    difficulty_ramping: bool = True,
    sticky_action_prob: float = 0.1,
    minimal_action_set: bool = True,
    device: str | torch.device = "cpu",
    action_probs: Sequence[float] | None = None,
) -> MinAtarReport:
    """Step ``env_class`` and the reference side by side; report the first mismatch.

    Args:
        env_class: a :class:`MinAtarEnv` subclass (``Breakout``, ...).
        num_envs: reference envs, and rows of the batched env.
        steps: the most steps to compare.
        seed: seeds reference env i with ``seed + i``, and the random actions.
        episodes: stop once this many episodes have finished (None: run all ``steps``).
        difficulty_ramping, sticky_action_prob, minimal_action_set: the game's settings,
            the same on both sides.
        device: where the batched env runs.
        action_probs: the random policy's probability of each action (None: uniform), e.g.
            mostly "up" for Freeway, whose uniform policy rarely reaches the top.

    Returns:
        A :class:`MinAtarReport` (tolerances 0: every value must be equal);
        ``report.mismatch`` names the first disagreement, ``report.rewards`` is the total
        reward the reference envs earned.
    """
    try:
        import minatar
    except ImportError as error:
        raise ImportError(
            "check_minatar needs the reference MinAtar package: pip install 'batchenv[minatar]'"
        ) from error
    if not (isinstance(env_class, type) and issubclass(env_class, MinAtarEnv)):
        raise ValueError(
            f"check_minatar: env_class must be a MinAtarEnv subclass, got {env_class!r}"
        )
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"check_minatar(num_envs={num_envs!r}): must be an int >= 1")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"check_minatar(steps={steps!r}): must be an int >= 0")
    refs, recorders = [], []
    for i in range(num_envs):
        ref = minatar.Environment(env_class.game, sticky_action_prob, difficulty_ramping)
        recorder = _RecordingRandom(seed + i)
        ref.random = ref.env.random = recorder  # one shared RandomState, as Environment.seed
        refs.append(ref)
        recorders.append(recorder)
    env = env_class(
        num_envs,
        device=device,
        seed=seed,
        minimal_action_set=minimal_action_set,
        sticky_action_prob=sticky_action_prob,
        difficulty_ramping=difficulty_ramping,
    )
    actions = env.single_action_space.n
    if action_probs is not None and (
        len(action_probs) != actions or not np.isclose(sum(action_probs), 1.0)
    ):
        raise ValueError(
            f"check_minatar(action_probs={action_probs!r}): needs {actions} probabilities "
            "summing to 1, one per action"
        )
    check = _Checker(env, refs, recorders, np.random.default_rng(seed))
    everyone = np.arange(num_envs)
    mismatch = check.reset(everyone, step=-1)
    table = np.asarray(env._action_table.cpu())
    finished = 0
    step = -1
    for step in range(steps if mismatch is None else 0):
        action = check.rng.choice(actions, size=num_envs, p=action_probs)
        mismatch = check.step(step, action, table[action])
        if mismatch is not None:
            break
        done = np.flatnonzero(check.terminal)
        finished += done.size
        if done.size:
            mismatch = check.reset(done, step)
            if mismatch is not None:
                break
        if episodes is not None and finished >= episodes:
            break
    return MinAtarReport(
        name_a=f"minatar.Environment({env_class.game!r})",
        name_b=repr(env),
        num_envs=num_envs,
        steps=steps,
        steps_compared=step + 1,
        values_compared=check.values,
        episodes=finished,
        atol=0.0,
        rtol=0.0,
        mismatch=mismatch,
        rewards=check.rewards,
    )


class _RecordingRandom(np.random.RandomState):
    """A RandomState that logs each ``rand``/``randint`` call: (site, uniforms)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.calls: list[tuple[str, np.ndarray]] = []

    def rand(self, *size: int) -> Any:
        value = super().rand(*size)
        self._log(np.atleast_1d(np.asarray(value, dtype=np.float64)))
        return value

    def randint(self, low: int, high: int | None = None, size: Any = None, dtype: Any = int) -> Any:
        value = super().randint(low, high, size, dtype)
        lo, hi = (0, low) if high is None else (low, high)
        self._log((np.atleast_1d(np.asarray(value, dtype=np.float64)) - lo + 0.5) / (hi - lo))
        return value

    def _log(self, uniforms: np.ndarray) -> None:
        caller = sys._getframe(2)  # the reference method that drew
        owner = caller.f_locals.get("self")
        site = f"{type(owner).__name__}.{caller.f_code.co_name}"
        self.calls.append((site, uniforms.ravel()))


class _Checker:
    """The two sides and the comparison; rows are reference envs."""

    def __init__(self, env: MinAtarEnv, refs: list, recorders: list, rng: np.random.Generator):
        self.env, self.refs, self.recorders, self.rng = env, refs, recorders, rng
        self.values = 0
        self.rewards = 0.0
        self.terminal = np.zeros(env.num_envs, dtype=bool)

    def step(self, step: int, action: np.ndarray, full_action: np.ndarray) -> Mismatch | None:
        env = self.env
        declared = (STICKY, *env.step_draws)
        draws = self._empty(declared, env.num_envs)
        rewards = np.zeros(env.num_envs)
        for i, ref in enumerate(self.refs):
            self.recorders[i].calls.clear()
            rewards[i], self.terminal[i] = ref.act(int(full_action[i]))
            self._fill(draws, i, i, declared, "step")
        self.rewards += float(rewards.sum())
        observ, reward, terminated, _ = env.step(
            torch.as_tensor(action, dtype=torch.int64, device=env.device),
            draws={k: torch.as_tensor(v, device=env.device) for k, v in draws.items()},
        )
        ours = {
            "observ": observ.cpu().numpy(),
            "reward": reward.cpu().numpy().astype(np.float64),
            "terminated": terminated.cpu().numpy(),
        }
        theirs = {
            "observ": np.stack([ref.state() for ref in self.refs]),
            "reward": rewards,
            "terminated": self.terminal.copy(),
        }
        return self._compare(step, np.arange(env.num_envs), ours, theirs)

    def reset(self, rows: np.ndarray, step: int) -> Mismatch | None:
        """Reset ``rows`` on both sides (ours with the reference's draws) and compare."""
        env = self.env
        draws = self._empty(env.reset_draws, len(rows))
        for k, i in enumerate(rows):
            self.recorders[i].calls.clear()
            self.refs[i].reset()
            self._fill(draws, k, i, env.reset_draws, "reset")
        observ = env.reset(
            torch.as_tensor(rows, dtype=torch.int64, device=env.device),
            draws={k: torch.as_tensor(v, device=env.device) for k, v in draws.items()},
        )
        self.terminal[rows] = False
        ours = {"observ": observ.cpu().numpy()}
        theirs = {"observ": np.stack([self.refs[i].state() for i in rows])}
        return self._compare(step, rows, ours, theirs)

    def _compare(
        self, step: int, rows: np.ndarray, ours: dict[str, np.ndarray], theirs: dict
    ) -> Mismatch | None:
        state = self.env.get_state()
        for field in (*self.env.fields, "terminal", "last_action"):
            ours[f"state.{field}"] = state[field].cpu().numpy()[rows]
        reference = [self._reference_state(i) for i in rows]
        for field in (*self.env.fields, "terminal", "last_action"):
            theirs[f"state.{field}"] = np.stack([np.asarray(r[field]) for r in reference])
        diffs = {}  # field: (reference values, ours, where they differ), each [K, values]
        for field, mine in ours.items():
            x = np.asarray(theirs[field]).reshape(len(rows), -1).astype(np.float64)
            y = np.asarray(mine).reshape(len(rows), -1).astype(np.float64)
            if x.shape != y.shape:
                raise ValueError(
                    f"check_minatar: {field} has {y.shape[1]} values per row, the reference "
                    f"{x.shape[1]}; state_from_reference must give the game's fields"
                )
            self.values += x.size
            diffs[field] = (x, y, x != y)
        bad_rows = np.zeros(len(rows), dtype=bool)
        for _, _, bad in diffs.values():
            bad_rows |= bad.any(axis=1)
        if not bad_rows.any():
            return None
        k = int(np.argmax(bad_rows))
        for field, (x, y, bad) in diffs.items():
            if bad[k].any():
                j = int(np.argmax(bad[k]))
                feature = j if x.shape[1] > 1 else None
                return Mismatch(step, int(rows[k]), None, field, feature, x[k, j], y[k, j])
        raise AssertionError("unreachable")  # pragma: no cover

    def _reference_state(self, i: int) -> dict[str, Any]:
        ref = self.refs[i]
        state = dict(self.env.state_from_reference(ref.env))
        state["terminal"] = ref.env.terminal
        state["last_action"] = ref.last_action
        return state

    def _empty(self, declared: tuple[Draw, ...], rows: int) -> dict[str, np.ndarray]:
        """Uniform filler for the draws the reference does not make."""
        return {d.name: self.rng.random((rows, d.count)) for d in declared}

    def _fill(self, draws: dict, row: int, ref: int, declared: tuple[Draw, ...], what: str) -> None:
        """Put reference ``ref``'s recorded calls into row ``row`` of ``draws``, by site."""
        by_site: dict[str, list[np.ndarray]] = defaultdict(list)
        for site, uniforms in self.recorders[ref].calls:
            by_site[site].append(uniforms)
        for site, calls in by_site.items():
            targets = [d for d in declared if d.site == site]
            if len(calls) > len(targets):
                raise ValueError(
                    f"check_minatar: in one {what}, the reference made {len(calls)} random "
                    f"call(s) from {site}, but {type(self.env).__name__} declares "
                    f"{len(targets)} Draw(s) with that site; declare one per call"
                )
            for uniforms, draw in zip(calls, targets):
                if uniforms.size != draw.count:
                    raise ValueError(
                        f"check_minatar: the reference drew {uniforms.size} value(s) from "
                        f"{site}, but Draw({draw.name!r}) has count {draw.count}"
                    )
                draws[draw.name][row] = uniforms
