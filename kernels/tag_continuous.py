"""WarpDrive's continuous Tag (docs/tag.md) as a batched torch or Triton environment.

Agents ``0 .. num_taggers-1`` are taggers, the next ``num_runners`` ids are runners;
``N = num_taggers + num_runners``. They move in the square ``[0, L]^2``.

State layout (shared by the torch step and the Triton kernel)::

    state    [E, N, 6]  float32: x, y, v (speed), a (acceleration), theta (heading), alive
    elapsed  [E]        int32: steps since the env's last reset

Actions: int64 ``[E, N, 2]``, indices ``(acceleration, turn)`` into the grids
``accel = [0, *linspace(min_acceleration, max_acceleration, num_acceleration_levels)]`` and
``turn = [0, *linspace(min_turn, max_turn, num_turn_levels)]`` (index 0 is an exact 0).

One step, every agent at once (a runner that left is frozen and its action ignored):

1. ``a += accel[i]``; ``theta = theta + turn[j]``, then ``theta - floor(theta / 2pi) * 2pi``;
   ``v = clip(v + a, 0, max_speed * skill)`` (skill: ``skill_level_tagger`` or
   ``skill_level_runner``), and ``a = 0`` when ``v`` ends on either bound;
   ``x = clip(x + v cos theta, 0, L)``, ``y = clip(y + v sin theta, 0, L)``.
2. Tagging, on the moved positions: each runner still in the game finds its nearest tagger
   (Euclidean distance, ties to the lowest id); if that distance is below
   ``tagging_distance * L`` the runner is tagged: it gets ``tag_penalty_for_runner`` (a
   signed amount added, -1 by default, as in WarpDrive), that tagger gets
   ``tag_reward_for_tagger``, and the runner leaves the game (``alive = 0``).
3. ``elapsed += 1``. On the step where ``elapsed`` reaches ``T``, every runner still in the
   game gets ``end_of_game_reward_for_runner``.
4. ``terminated`` = no runner left; ``truncated`` = ``elapsed >= T``.

WarpDrive's two CPU/GPU divergences, and what this module does instead (both backends):

- **End bonus.** It is paid on the step on which ``elapsed`` reaches ``T`` -- the last step
  of the episode, the one whose transition ``experience()`` sees as truncated -- to exactly
  the runners alive after that step's tagging. Not a step later, not on reset.
- **A tagger that catches several runners at once.** WarpDrive's GPU threads race on the
  tagger's reward. Here every runner is assigned to its own nearest tagger (lowest id on a
  tie) and a tagger is rewarded once *per runner it caught*: catching two runners in one step
  earns ``2 * tag_reward_for_tagger``, independent of thread or lane order.

A runner that left stays where it was tagged with ``v = a = 0``, gets reward 0 after the
step it was tagged in, and its observation keeps being computed like everyone else's (from
its frozen state); other agents see it with ``alive = 0``.

Observations, float32 ``[E, N, 7K + 1]``: for each of ``K`` other agents the seven features
``dx / (sqrt2 L), dy / (sqrt2 L), dv / max_speed, da / max_speed, dtheta / 2pi, type,
alive`` (``d`` = other minus self; ``type`` 1 for a tagger, 0 for a runner), feature-major
(``obs[f * K + k]``), then ``t / T``. With ``num_other_agents_observed=None`` every other
agent is observed in id order (``K = N - 1``); with ``K`` given, the ``K`` nearest others
(runners that left included), nearest first, ties to the lowest id.

Starts: ``x, y ~ U[0, L]``, heading uniform in ``{0, pi/2, pi, 3pi/2}``, ``v = a = 0``, all in
the game: a pure function of ``(seed, env, restart count, agent)`` -- Philox in the triton
kernel, an integer hash on the torch backend -- so no two restarts repeat.

Example::

    >>> import torch
    >>> from batchenv.kernels import ContinuousTag
    >>> env = ContinuousTag(num_envs=2, num_taggers=1, num_runners=3, seed=0)
    >>> env.reset(torch.arange(2)).shape
    torch.Size([2, 4, 22])
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(2, 4, 2, dtype=torch.int64))
    >>> reward.shape, terminated.shape
    (torch.Size([2, 4]), torch.Size([2]))

``ContinuousTag(..., device="cuda", backend="triton")`` runs one fused kernel per step,
:func:`_step_kernel` (one program per env), launched by ``KernelEnv._launch`` (``_base.py``).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._tag import TagEnvBase, agent_starts, check_float, check_int
from ._triton import add_combine, tl, triton
from .tag_discrete import minimum_combine

TWO_PI = 2 * math.pi
#: Features per observed agent.
FEATURES = 7
#: Columns of the state: x, y, v, a, theta, alive.
X, Y, V, A, THETA, ALIVE = range(6)
FEATURES_TL = tl.constexpr(FEATURES)  # the same, as a global a Triton kernel may read


# -- the torch step ---------------------------------------------------------------------------


def continuous_tag_step(
    state: torch.Tensor,
    elapsed: torch.Tensor,
    action: torch.Tensor,
    env: ContinuousTag,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of a batch: ``(state [E, N, 6], elapsed [E], action [E, N, 2]) -> (state,
    reward [E, N] float32, terminated [E])``; rules 1-3 of the module docstring."""
    x, y, v, a, theta, alive = state.unbind(2)
    nt = env.num_taggers
    moving = alive > 0
    accel = env._accel_grid[action[..., 0].clamp(0, len(env.acceleration_actions) - 1)]
    turn = env._turn_grid[action[..., 1].clamp(0, len(env.turn_actions) - 1)]
    new_a = a + accel
    new_theta = theta + turn
    new_theta = new_theta - torch.floor(new_theta / env._two_pi) * env._two_pi
    vmax = env._vmax
    new_v = torch.minimum(torch.maximum(v + new_a, torch.zeros_like(v)), vmax)
    new_a = torch.where((new_v == 0) | (new_v == vmax), 0.0, new_a)
    new_x = (x + new_v * torch.cos(new_theta)).clamp(0.0, env._length)
    new_y = (y + new_v * torch.sin(new_theta)).clamp(0.0, env._length)
    x, y = torch.where(moving, new_x, x), torch.where(moving, new_y, y)
    v, a = torch.where(moving, new_v, v), torch.where(moving, new_a, a)
    theta = torch.where(moving, new_theta, theta)
    # Tagging: each runner's nearest tagger (ties to the lowest id: argmin's first minimum).
    dx = x[:, nt:, None] - x[:, None, :nt]  # [E, runners, taggers]
    dy = y[:, nt:, None] - y[:, None, :nt]
    dist2, nearest = (dx * dx + dy * dy).min(dim=2)
    tagged = moving[:, nt:] & (dist2 < env._tag_dist2)  # [E, runners]
    caught = torch.zeros_like(x[:, :nt]).scatter_add(1, nearest, tagged.to(x.dtype))
    runner_alive = moving[:, nt:] & ~tagged
    last = (elapsed + 1 == env.episode_length)[:, None]
    runner_reward = torch.where(tagged, env.tag_penalty_for_runner, 0.0) + torch.where(
        runner_alive & last, env.end_of_game_reward_for_runner, 0.0
    )
    reward = torch.cat((caught * env.tag_reward_for_tagger, runner_reward), dim=1)
    alive = torch.cat((alive[:, :nt], runner_alive.to(alive.dtype)), dim=1)
    left_now = torch.cat((torch.zeros_like(moving[:, :nt]), tagged), dim=1)  # stops there
    v, a = torch.where(left_now, 0.0, v), torch.where(left_now, 0.0, a)
    state = torch.stack((x, y, v, a, theta, alive), dim=2)
    return state, reward.to(torch.float32), ~runner_alive.any(dim=1)


def continuous_tag_observe(
    state: torch.Tensor, elapsed: torch.Tensor, env: ContinuousTag
) -> torch.Tensor:
    """Observations ``[E, N, 7K + 1]`` of states (module docstring layout)."""
    e, n, _ = state.shape
    k = env.num_observed
    other = state[:, None, :, :]  # [E, 1, N(j), 6]
    me = state[:, :, None, :]  # [E, N(i), 1, 6]
    diff = other - me  # [E, i, j, 6]
    is_tagger = (torch.arange(n, device=state.device) < env.num_taggers).to(torch.float32)
    features = torch.stack(
        (
            diff[..., X] / env._diag,
            diff[..., Y] / env._diag,
            diff[..., V] / env._max_speed,
            diff[..., A] / env._max_speed,
            diff[..., THETA] / env._two_pi,
            is_tagger.expand(e, n, n),
            other[..., ALIVE].expand(e, n, n),
        ),
        dim=3,
    )  # [E, i, j, 7]
    ids = torch.arange(n, device=state.device)
    if env.num_other_agents_observed is None:  # all others in id order: j = k + (k >= i)
        slots = torch.arange(n - 1, device=state.device)
        chosen = (slots[None, :] + (slots[None, :] >= ids[:, None]).long()).expand(e, n, n - 1)
    else:
        dist2 = diff[..., X] * diff[..., X] + diff[..., Y] * diff[..., Y]
        dist2 = dist2.masked_fill(ids[:, None] == ids[None, :], float("inf"))
        chosen = torch.sort(dist2, dim=2, stable=True).indices[:, :, :k]  # ties: lowest id
    picked = features.gather(2, chosen[..., None].expand(e, n, k, FEATURES))  # [E, i, K, 7]
    time = (elapsed.to(torch.float32) / env.episode_length)[:, None, None].expand(e, n, 1)
    return torch.cat((picked.transpose(2, 3).reshape(e, n, FEATURES * k), time), dim=2)


# -- the Triton kernel: the same step, one program per env ------------------------------------


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def _step_kernel(
    state_ptr,  # [E, N, 6] float32, in and out: x, y, v, a, theta, alive
    elapsed_ptr,  # [E] int32, in and out: steps since the env's last fresh start
    restarts_ptr,  # [E] int64, in and out: fresh starts drawn so far (the env's RNG counter)
    action_ptr,  # [E, N, 2] int64: acceleration and turn indices (read when STEP)
    reset_mask_ptr,  # [E] bool: envs that start afresh in this call (read when RESET)
    observ_ptr,  # [E, N, 7K + 1] float32, out: the observation after the call
    reward_ptr,  # [E, N] float32, out (when STEP)
    terminated_ptr,  # [E] bool, out (when STEP): no runner left
    truncated_ptr,  # [E] bool, out (when STEP): elapsed >= T
    key_lo,  # low 32 bits of the Philox key (the env's seed)
    key_hi,  # high 32 bits of the Philox key
    accel_ptr,  # [NUM_ACCEL] float32: the acceleration grid
    turn_ptr,  # [NUM_TURN] float32: the turn grid
    length,  # float32: L, the side of the square
    vmax_tagger,  # float32: max_speed * skill_level_tagger
    vmax_runner,  # float32: max_speed * skill_level_runner
    tag_dist2,  # float32: (tagging_distance * L) ** 2
    tag_reward,  # float32: a tagger's reward per runner it catches
    tag_penalty,  # float32: added to a tagged runner's reward
    end_bonus,  # float32: runners in the game on the step elapsed reaches T
    diag,  # float32: sqrt(2) * L
    max_speed,  # float32
    two_pi,  # float32
    E: tl.constexpr,  # envs (one program each)
    N: tl.constexpr,  # agents per env
    NT: tl.constexpr,  # taggers: agents 0..NT-1
    K: tl.constexpr,  # other agents observed
    ALL_OBSERVED: tl.constexpr,  # K = N - 1 in id order (else the K nearest)
    T: tl.constexpr,  # episode_length
    NUM_ACCEL: tl.constexpr,  # length of the acceleration grid
    NUM_TURN: tl.constexpr,  # length of the turn grid
    STEP: tl.constexpr,  # step the env; False: only the fresh starts happen (a reset)
    RESET: tl.constexpr,  # reset_mask_ptr is given
    BLOCK_A: tl.constexpr,  # lanes: next_power_of_2(N)
    BLOCK_I: tl.constexpr,  # observing agents per observation tile
):
    """One continuous-Tag step of one env, rule for rule :func:`continuous_tag_step` and
    :func:`continuous_tag_observe`; an env in the reset mask starts afresh instead."""
    env = tl.program_id(0).to(tl.int64)
    agents = tl.arange(0, BLOCK_A)
    valid = agents < N
    env_ok = env < E  # always true (grid = E); keeps the per-env loads and stores masked
    is_tagger = agents < NT
    runner = valid & (agents >= NT)
    rows = env * N + agents
    base = state_ptr + rows * 6
    x = tl.load(base + 0, mask=valid, other=0.0)
    y = tl.load(base + 1, mask=valid, other=0.0)
    v = tl.load(base + 2, mask=valid, other=0.0)
    a = tl.load(base + 3, mask=valid, other=0.0)
    theta = tl.load(base + 4, mask=valid, other=0.0)
    alive = tl.load(base + 5, mask=valid, other=0.0)
    elapsed = tl.load(elapsed_ptr + env, mask=env_ok, other=0)
    if STEP:
        moving = valid & (alive > 0)
        accel_index = tl.load(action_ptr + rows * 2 + 0, mask=valid, other=0)
        turn_index = tl.load(action_ptr + rows * 2 + 1, mask=valid, other=0)
        accel_index = tl.minimum(tl.maximum(accel_index, 0), NUM_ACCEL - 1)
        turn_index = tl.minimum(tl.maximum(turn_index, 0), NUM_TURN - 1)
        new_a = a + tl.load(accel_ptr + accel_index, mask=valid, other=0.0)
        new_theta = theta + tl.load(turn_ptr + turn_index, mask=valid, other=0.0)
        new_theta = new_theta - tl.floor(new_theta / two_pi) * two_pi
        vmax = tl.where(is_tagger, vmax_tagger, vmax_runner)
        new_v = tl.minimum(tl.maximum(v + new_a, 0.0), vmax)
        new_a = tl.where((new_v == 0.0) | (new_v == vmax), 0.0, new_a)
        new_x = tl.minimum(tl.maximum(x + new_v * tl.cos(new_theta), 0.0), length)
        new_y = tl.minimum(tl.maximum(y + new_v * tl.sin(new_theta), 0.0), length)
        x, y = tl.where(moving, new_x, x), tl.where(moving, new_y, y)
        v, a = tl.where(moving, new_v, v), tl.where(moving, new_a, a)
        theta = tl.where(moving, new_theta, theta)
        # Tagging: every runner's nearest tagger, the lowest id winning ties (strict <).
        best = tl.full((BLOCK_A,), float("inf"), tl.float32)
        nearest = tl.zeros((BLOCK_A,), dtype=tl.int32)
        for tagger in range(NT):
            tx = tl.reduce(tl.where(agents == tagger, x, 0.0), 0, add_combine)
            ty = tl.reduce(tl.where(agents == tagger, y, 0.0), 0, add_combine)
            dx = x - tx
            dy = y - ty
            dist2 = dx * dx + dy * dy
            closer = dist2 < best
            nearest = tl.where(closer, tagger, nearest)
            best = tl.where(closer, dist2, best)
        tagged = runner & moving & (best < tag_dist2)
        reward = tl.where(tagged, tag_penalty, 0.0)
        for tagger in range(NT):  # a tagger earns the reward once per runner it caught
            caught = tl.reduce((tagged & (nearest == tagger)).to(tl.float32), 0, add_combine)
            reward = tl.where(agents == tagger, caught * tag_reward, reward)
        alive = tl.where(tagged, 0.0, alive)
        v = tl.where(tagged, 0.0, v)  # a runner that left stops where it was tagged
        a = tl.where(tagged, 0.0, a)
        elapsed = elapsed + 1
        last = (agents * 0 + elapsed) == T
        reward = tl.where(runner & (alive > 0) & last, reward + end_bonus, reward)
        left = tl.reduce((runner & (alive > 0)).to(tl.int32), 0, add_combine)
        terminated = left == 0
    if RESET:
        fresh, fresh_lanes, u0, u1, u2 = agent_starts(
            reset_mask_ptr, restarts_ptr, key_lo, key_hi, env, env_ok, agents, valid
        )
        quarter = tl.minimum((u2 * 4.0).to(tl.int32), 3)
        x = tl.where(fresh_lanes, u0 * length, x)
        y = tl.where(fresh_lanes, u1 * length, y)
        theta = tl.where(fresh_lanes, quarter.to(tl.float32) * (two_pi / 4.0), theta)
        v = tl.where(fresh_lanes, 0.0, v)
        a = tl.where(fresh_lanes, 0.0, a)
        alive = tl.where(fresh_lanes, 1.0, alive)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            reward = tl.where(fresh_lanes, 0.0, reward)
            terminated = terminated & (fresh == 0)
    tl.store(base + 0, x, mask=valid)
    tl.store(base + 1, y, mask=valid)
    tl.store(base + 2, v, mask=valid)
    tl.store(base + 3, a, mask=valid)
    tl.store(base + 4, theta, mask=valid)
    tl.store(base + 5, alive, mask=valid)
    tl.store(elapsed_ptr + env, elapsed, mask=env_ok)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + env, terminated, mask=env_ok)
        tl.store(truncated_ptr + env, elapsed >= T, mask=env_ok)
    # Observations: tiles of BLOCK_I observers x BLOCK_A others. The observers' own values
    # are read back from the state just written: make every lane's stores visible first.
    tl.debug_barrier()
    obs_dim = FEATURES_TL * K + 1
    time = (agents * 0 + elapsed).to(tl.float32) / T
    tl.store(observ_ptr + rows * obs_dim + FEATURES_TL * K, time, mask=valid)
    other = agents[None, :]  # [1, BLOCK_A]
    for first in range(0, N, BLOCK_I):
        me = first + tl.arange(0, BLOCK_I)[:, None]  # [BLOCK_I, 1]
        me_ok = me < N
        mine = state_ptr + (env * N + me) * 6
        my_x = tl.load(mine + 0, mask=me_ok, other=0.0)
        my_y = tl.load(mine + 1, mask=me_ok, other=0.0)
        my_v = tl.load(mine + 2, mask=me_ok, other=0.0)
        my_a = tl.load(mine + 3, mask=me_ok, other=0.0)
        my_theta = tl.load(mine + 4, mask=me_ok, other=0.0)
        out = observ_ptr + (env * N + me) * obs_dim  # [BLOCK_I, 1]
        if ALL_OBSERVED:
            slot = other - (other > me).to(tl.int32)  # others in id order, self skipped
            keep = me_ok & (other < N) & (other != me)
            zeros = tl.zeros((BLOCK_I, BLOCK_A), dtype=tl.float32)
            tl.store(out + 0 * K + slot, (x[None, :] - my_x) / diag, mask=keep)
            tl.store(out + 1 * K + slot, (y[None, :] - my_y) / diag, mask=keep)
            tl.store(out + 2 * K + slot, (v[None, :] - my_v) / max_speed, mask=keep)
            tl.store(out + 3 * K + slot, (a[None, :] - my_a) / max_speed, mask=keep)
            tl.store(out + 4 * K + slot, (theta[None, :] - my_theta) / two_pi, mask=keep)
            tl.store(out + 5 * K + slot, zeros + is_tagger.to(tl.float32)[None, :], mask=keep)
            tl.store(out + 6 * K + slot, zeros + alive[None, :], mask=keep)
        else:
            dx = x[None, :] - my_x
            dy = y[None, :] - my_y
            dist2 = dx * dx + dy * dy
            dist2 = tl.where((other < N) & (other != me), dist2, float("inf"))
            for slot in range(K):  # the K nearest, nearest first, ties to the lowest id
                closest = tl.reduce(dist2, 1, minimum_combine)  # [BLOCK_I]
                pick = tl.reduce(
                    tl.where(dist2 == closest[:, None], other, BLOCK_A), 1, minimum_combine
                )
                picked = pick[:, None]  # [BLOCK_I, 1]
                theirs = state_ptr + (env * N + picked) * 6
                tl.store(
                    out + 0 * K + slot, (tl.load(theirs + 0, mask=me_ok) - my_x) / diag, mask=me_ok
                )
                tl.store(
                    out + 1 * K + slot, (tl.load(theirs + 1, mask=me_ok) - my_y) / diag, mask=me_ok
                )
                tl.store(
                    out + 2 * K + slot,
                    (tl.load(theirs + 2, mask=me_ok) - my_v) / max_speed,
                    mask=me_ok,
                )
                tl.store(
                    out + 3 * K + slot,
                    (tl.load(theirs + 3, mask=me_ok) - my_a) / max_speed,
                    mask=me_ok,
                )
                tl.store(
                    out + 4 * K + slot,
                    (tl.load(theirs + 4, mask=me_ok) - my_theta) / two_pi,
                    mask=me_ok,
                )
                tl.store(out + 5 * K + slot, (picked < NT).to(tl.float32), mask=me_ok)
                tl.store(out + 6 * K + slot, tl.load(theirs + 5, mask=me_ok), mask=me_ok)
                dist2 = tl.where(other == picked, float("inf"), dist2)


# -- the env class ----------------------------------------------------------------------------


def _f32(value: float) -> float:
    """``value`` rounded to float32 (the constants both backends compute with)."""
    return float(np.float32(value))


class ContinuousTag(TagEnvBase):
    """A batch of continuous Tag games following the InGraphEnv protocol (multi-agent).

    Args:
        num_envs: games in the batch (>= 1).
        num_taggers: taggers per game (>= 1), agent ids ``0 .. num_taggers - 1``.
        num_runners: runners per game (>= 1), the ids after the taggers.
        grid_length: L, the side of the square (> 0).
        episode_length: T; truncated once ``elapsed >= T`` (>= 1).
        max_speed: speed limit before the skill factor (> 0).
        skill_level_tagger: taggers' speed limit is ``max_speed * skill_level_tagger``.
        skill_level_runner: runners' speed limit is ``max_speed * skill_level_runner``.
        max_acceleration, min_acceleration: ends of the acceleration grid.
        max_turn, min_turn: ends of the turn grid (radians).
        num_acceleration_levels, num_turn_levels: grid points, plus the exact 0 at index 0.
        tagging_distance: a runner closer than ``tagging_distance * L`` to its nearest tagger
            is tagged.
        num_other_agents_observed: K nearest others observed; None: all others, id order.
        tag_reward_for_tagger: a tagger's reward per runner it catches.
        tag_penalty_for_runner: added to a tagged runner's reward (negative).
        end_of_game_reward_for_runner: paid to runners in the game when T is reached.
        device: where the state lives.
        seed: seeds the starts (the torch hash's key or the kernel's Philox key); None: fresh.
        backend: ``"torch"`` or ``"triton"`` (CUDA; CPU only under ``TRITON_INTERPRET=1``).
    """

    state_dtype = torch.float32
    state_dim = 6
    draws_per_agent = 3
    observ_tile = 2048

    def __init__(
        self,
        num_envs: int,
        num_taggers: int = 1,
        num_runners: int = 10,
        grid_length: float = 10.0,
        episode_length: int = 100,
        max_speed: float = 1.0,
        skill_level_tagger: float = 1.0,
        skill_level_runner: float = 1.0,
        max_acceleration: float = 1.0,
        min_acceleration: float = -1.0,
        max_turn: float = math.pi / 2,
        min_turn: float = -math.pi / 2,
        num_acceleration_levels: int = 10,
        num_turn_levels: int = 10,
        tagging_distance: float = 0.01,
        num_other_agents_observed: int | None = None,
        tag_reward_for_tagger: float = 1.0,
        tag_penalty_for_runner: float = -1.0,
        end_of_game_reward_for_runner: float = 1.0,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        backend: str = "torch",
    ) -> None:
        name = type(self).__name__
        self.num_taggers = check_int(name, "num_taggers", num_taggers, 1)
        self.num_runners = check_int(name, "num_runners", num_runners, 1)
        self.num_agents = num_taggers + num_runners
        self.grid_length = check_float(name, "grid_length", grid_length)
        if self.grid_length <= 0:
            raise ValueError(f"{name}(grid_length={grid_length!r}): grid_length must be > 0")
        self.episode_length = check_int(name, "episode_length", episode_length, 1)
        self.max_speed = check_float(name, "max_speed", max_speed)
        if self.max_speed <= 0:
            raise ValueError(f"{name}(max_speed={max_speed!r}): max_speed must be > 0")
        self.skill_level_tagger = check_float(name, "skill_level_tagger", skill_level_tagger, 0.0)
        self.skill_level_runner = check_float(name, "skill_level_runner", skill_level_runner, 0.0)
        levels_a = check_int(name, "num_acceleration_levels", num_acceleration_levels, 1)
        levels_t = check_int(name, "num_turn_levels", num_turn_levels, 1)
        self.acceleration_actions = np.concatenate(
            ([0.0], np.linspace(min_acceleration, max_acceleration, levels_a))
        ).astype(np.float32)
        self.turn_actions = np.concatenate(
            ([0.0], np.linspace(min_turn, max_turn, levels_t))
        ).astype(np.float32)
        self.tagging_distance = check_float(name, "tagging_distance", tagging_distance, 0.0)
        if num_other_agents_observed is not None:
            check_int(name, "num_other_agents_observed", num_other_agents_observed, 1)
            if num_other_agents_observed > self.num_agents - 1:
                raise ValueError(
                    f"{name}(num_other_agents_observed={num_other_agents_observed}): at most "
                    f"{self.num_agents - 1} other agents exist"
                )
        self.num_other_agents_observed = num_other_agents_observed
        self.num_observed = (
            self.num_agents - 1 if num_other_agents_observed is None else num_other_agents_observed
        )
        self.tag_reward_for_tagger = check_float(
            name, "tag_reward_for_tagger", tag_reward_for_tagger
        )
        self.tag_penalty_for_runner = check_float(
            name, "tag_penalty_for_runner", tag_penalty_for_runner
        )
        self.end_of_game_reward_for_runner = check_float(
            name, "end_of_game_reward_for_runner", end_of_game_reward_for_runner
        )
        self.obs_dim = FEATURES * self.num_observed + 1
        self.single_observation_space = gym.spaces.Box(
            -np.inf, np.inf, shape=(self.obs_dim,), dtype=np.float32
        )
        self.single_action_space = gym.spaces.MultiDiscrete(
            [len(self.acceleration_actions), len(self.turn_actions)]
        )
        # float32 constants, identical in both backends.
        self._length = _f32(self.grid_length)
        self._vmax_tagger = _f32(self.max_speed * self.skill_level_tagger)
        self._vmax_runner = _f32(self.max_speed * self.skill_level_runner)
        self._tag_dist2 = _f32((self.tagging_distance * self.grid_length) ** 2)
        self._diag = _f32(math.sqrt(2.0) * self.grid_length)
        self._max_speed = _f32(self.max_speed)
        self._two_pi = _f32(TWO_PI)
        device = torch.device(device)
        self._accel_grid = torch.as_tensor(self.acceleration_actions, device=device)
        self._turn_grid = torch.as_tensor(self.turn_actions, device=device)
        vmax = [self._vmax_tagger] * num_taggers + [self._vmax_runner] * num_runners
        self._vmax = torch.tensor(vmax, dtype=torch.float32, device=device)
        self._setup_tag(num_envs, device, seed, backend)

    def _starts(self, u: torch.Tensor) -> torch.Tensor:
        quarter = torch.clamp((u[..., 2] * 4.0).floor(), max=3.0)
        zeros = torch.zeros_like(u[..., 0])
        return torch.stack(
            (
                u[..., 0] * self._length,
                u[..., 1] * self._length,
                zeros,
                zeros,
                quarter * _f32(self._two_pi / 4.0),
                zeros + 1.0,
            ),
            dim=2,
        )

    def _act(self, state, action, elapsed):
        return continuous_tag_step(state, elapsed, action, self)

    def _observe(self, state, elapsed):
        return continuous_tag_observe(state, elapsed, self)

    @staticmethod
    def _triton_kernel():
        return _step_kernel

    def _game_arguments(self):
        return {
            "accel_ptr": self._accel_grid,
            "turn_ptr": self._turn_grid,
            "length": self._length,
            "vmax_tagger": self._vmax_tagger,
            "vmax_runner": self._vmax_runner,
            "tag_dist2": self._tag_dist2,
            "tag_reward": self.tag_reward_for_tagger,
            "tag_penalty": self.tag_penalty_for_runner,
            "end_bonus": self.end_of_game_reward_for_runner,
            "diag": self._diag,
            "max_speed": self._max_speed,
            "two_pi": self._two_pi,
            "NT": self.num_taggers,
            "K": self.num_observed,
            "ALL_OBSERVED": self.num_other_agents_observed is None,
            "NUM_ACCEL": len(self.acceleration_actions),
            "NUM_TURN": len(self.turn_actions),
        }
