"""WarpDrive's discrete Tag (docs/tag.md) as a batched torch or Triton environment.

``num_taggers`` taggers (agent ids ``0 .. N-2``) chase one runner (id ``N-1``) on the integer
grid ``[0, L]^2`` (both ends inclusive), ``N = num_taggers + 1``.

State layout (shared by the torch step and the Triton kernel)::

    state    [E, N, 2]  int32: x, y of every agent
    elapsed  [E]        int32: steps since the env's last reset

Rules of one step, all agents at once:

1. Actions (int64 ``[E, N]``): 0 stay, 1 ``+x``, 2 ``-x``, 3 ``+y``, 4 ``-y``. The new
   position is clipped to ``[0, L]``; an agent whose move was clipped pays
   ``wall_hit_penalty`` (taggers and runner alike).
2. Tagged: some tagger stands on the runner's cell after the move.
3. Rewards: tagged -> every tagger ``+tag_reward_for_tagger``, the runner
   ``-tag_penalty_for_runner``; not tagged -> every tagger ``-step_cost_for_tagger``, the
   runner ``+step_cost_for_tagger``. The wall penalty is subtracted on top.
4. ``terminated`` = tagged, ``truncated`` = ``elapsed >= episode_length`` (per env).

A finished env stepped again without a reset keeps playing by the same rules.

Observations, float32 ``[E, N, obs_dim]``, ``t = elapsed`` after the step:

- full (``4N + 1``): ``x/L`` of agents ``0..N-1``, then ``y/L`` of them, then ``is_runner``
  of them, then one-hot of the observing agent's id, then ``t/T``;
- partial (``6``): own ``x/L, y/L``, target ``x/L, y/L``, own ``is_runner``, ``t/T``. A
  tagger's target is the runner; the runner's target is its nearest tagger (squared
  Euclidean distance on the grid, exact in integers), ties to the lowest id.

Starts: ``random_start=False`` is WarpDrive's fixed start (taggers at ``(L//2, L//2)``,
runner at ``(0, 0)``). ``random_start=True`` puts every agent on an independent uniform cell
(agents may share a cell; a runner that starts under a tagger is tagged at the first step
unless it moves away): a pure function of ``(seed, env, restart count, agent)`` -- Philox in
the triton kernel, an integer hash on the torch backend -- so no two restarts repeat. The
two backends draw different starts from one seed.

Example::

    >>> import torch
    >>> from batchenv.kernels import DiscreteTag
    >>> env = DiscreteTag(num_envs=3, num_taggers=4, random_start=False, seed=0)
    >>> observ = env.reset(torch.arange(3))
    >>> observ.shape
    torch.Size([3, 5, 21])
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(3, 5, dtype=torch.int64))
    >>> [round(r, 4) for r in reward[0].tolist()]  # taggers pay the step cost, the runner earns it
    [-0.01, -0.01, -0.01, -0.01, 0.01]

``DiscreteTag(..., device="cuda", backend="triton")`` runs one fused kernel per step,
:func:`_step_kernel` (one program per env, all its agents), launched by
``KernelEnv._launch`` (``_base.py``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from ._tag import TagEnvBase, agent_starts, check_float, check_int
from ._triton import add_combine, maximum_combine, tl, triton

#: Per-axis moves of the five actions: stay, +x, -x, +y, -y.
MOVES = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))


# -- the torch step ---------------------------------------------------------------------------


def discrete_tag_step(
    pos: torch.Tensor,
    action: torch.Tensor,
    grid_length: int,
    wall_hit_penalty: float,
    tag_reward_for_tagger: float,
    tag_penalty_for_runner: float,
    step_cost_for_tagger: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of a batch: ``(pos [E, N, 2] int32, action [E, N]) -> (pos, reward [E, N]
    float32, terminated [E])``; rules 1-3 of the module docstring."""
    moves = torch.tensor(MOVES, dtype=torch.int32, device=pos.device)
    valid = (action >= 0) & (action < len(MOVES))  # anything else stays, as in the kernel
    raw = pos + moves[torch.where(valid, action, 0)]
    new = raw.clamp(0, grid_length)
    hit = (new != raw).any(dim=2)
    runner = new[:, -1:, :]  # [E, 1, 2]
    tagged = (new[:, :-1, :] == runner).all(dim=2).any(dim=1)  # [E]
    num_agents = pos.shape[1]
    is_runner = torch.arange(num_agents, device=pos.device) == num_agents - 1
    tagger_reward = torch.where(tagged, tag_reward_for_tagger, -step_cost_for_tagger)
    runner_reward = torch.where(tagged, -tag_penalty_for_runner, step_cost_for_tagger)
    reward = torch.where(is_runner, runner_reward[:, None], tagger_reward[:, None])
    reward = reward - torch.where(hit, wall_hit_penalty, 0.0)
    return new, reward.to(torch.float32), tagged


def discrete_tag_observe(
    pos: torch.Tensor, elapsed: torch.Tensor, grid_length: int, episode_length: int, full: bool
) -> torch.Tensor:
    """Observations ``[E, N, 4N+1]`` (full) or ``[E, N, 6]`` (partial) of positions."""
    e, n, _ = pos.shape
    scaled = pos.to(torch.float32) / grid_length  # [E, N, 2]
    time = (elapsed.to(torch.float32) / episode_length)[:, None, None].expand(e, n, 1)
    is_runner = (torch.arange(n, device=pos.device) == n - 1).to(torch.float32)
    if full:
        shared = torch.cat(
            (scaled[:, :, 0], scaled[:, :, 1], is_runner.expand(e, n)), dim=1
        )  # [E, 3N]
        one_hot = torch.eye(n, dtype=torch.float32, device=pos.device).expand(e, n, n)
        return torch.cat((shared[:, None, :].expand(e, n, 3 * n), one_hot, time), dim=2)
    runner = pos[:, -1, :]  # [E, 2]
    dist2 = (pos[:, :-1, :] - runner[:, None, :]).square().sum(dim=2)  # [E, N-1]
    nearest = dist2.argmin(dim=1)  # first minimum: ties go to the lowest id
    target_of_runner = scaled[torch.arange(e, device=pos.device), nearest]  # [E, 2]
    target = scaled[:, -1:, :].expand(e, n, 2).clone()
    target[:, -1, :] = target_of_runner
    return torch.cat(
        (scaled, target, is_runner[None, :, None].expand(e, n, 1), time), dim=2
    ).contiguous()


# -- the Triton kernel: the same step, one program per env ------------------------------------


@triton.jit
def minimum_combine(a, b):
    """Combine function for minima (``tl.reduce``)."""
    return tl.minimum(a, b)


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def _step_kernel(
    pos_ptr,  # [E, N, 2] int32, in and out: x, y of every agent
    elapsed_ptr,  # [E] int32, in and out: steps since the env's last fresh start
    restarts_ptr,  # [E] int64, in and out: fresh starts drawn so far (the env's RNG counter)
    action_ptr,  # [E, N] int64: 0 stay, 1 +x, 2 -x, 3 +y, 4 -y (read when STEP)
    reset_mask_ptr,  # [E] bool: envs that start afresh in this call (read when RESET)
    observ_ptr,  # [E, N, OBS_DIM] float32, out: the observation after the call
    reward_ptr,  # [E, N] float32, out (when STEP)
    terminated_ptr,  # [E] bool, out (when STEP): the runner was tagged
    truncated_ptr,  # [E] bool, out (when STEP): elapsed >= T
    key_lo,  # low 32 bits of the Philox key (the env's seed)
    key_hi,  # high 32 bits of the Philox key
    wall_hit_penalty,  # float32: paid by an agent whose move was clipped
    tag_reward,  # float32: every tagger's reward when the runner is tagged
    tag_penalty,  # float32: subtracted from the runner's reward when tagged
    step_cost,  # float32: taggers pay it, the runner earns it, per untagged step
    E: tl.constexpr,  # envs (one program each)
    N: tl.constexpr,  # agents per env; the runner is agent N - 1
    L: tl.constexpr,  # grid_length: cells 0..L on each axis
    T: tl.constexpr,  # episode_length
    FULL_OBS: tl.constexpr,  # full (4N + 1) or partial (6) observations
    OBS_DIM: tl.constexpr,  # 4N + 1 or 6
    RANDOM_START: tl.constexpr,  # fresh starts from Philox, else WarpDrive's fixed start
    STEP: tl.constexpr,  # step the env; False: only the fresh starts happen (a reset)
    RESET: tl.constexpr,  # reset_mask_ptr is given
    BLOCK_A: tl.constexpr,  # lanes: next_power_of_2(N)
    BLOCK_I: tl.constexpr,  # observing agents per tile of the full observation
):
    """One discrete-Tag step of one env, rule for rule :func:`discrete_tag_step` and
    :func:`discrete_tag_observe`; an env in the reset mask starts afresh instead."""
    env = tl.program_id(0).to(tl.int64)
    agents = tl.arange(0, BLOCK_A)
    valid = agents < N
    env_ok = env < E  # always true (grid = E); keeps the per-env loads and stores masked
    is_runner = agents == N - 1
    is_tagger = valid & (agents < N - 1)
    rows = env * N + agents  # [BLOCK_A] int64
    x = tl.load(pos_ptr + rows * 2 + 0, mask=valid, other=0)
    y = tl.load(pos_ptr + rows * 2 + 1, mask=valid, other=0)
    elapsed = tl.load(elapsed_ptr + env, mask=env_ok, other=0)
    if STEP:
        action = tl.load(action_ptr + rows, mask=valid, other=0)
        raw_x = x + (action == 1).to(tl.int32) - (action == 2).to(tl.int32)
        raw_y = y + (action == 3).to(tl.int32) - (action == 4).to(tl.int32)
        x = tl.minimum(tl.maximum(raw_x, 0), L)
        y = tl.minimum(tl.maximum(raw_y, 0), L)
        hit = (x != raw_x) | (y != raw_y)
        runner_x = tl.reduce(tl.where(is_runner, x, 0), 0, add_combine)
        runner_y = tl.reduce(tl.where(is_runner, y, 0), 0, add_combine)
        on_runner = is_tagger & (x == runner_x) & (y == runner_y)
        tagged = tl.reduce(on_runner.to(tl.int32), 0, maximum_combine) > 0  # scalar
        tagged_lanes = (agents * 0 + tagged.to(tl.int32)) != 0
        tagger_reward = tl.where(tagged_lanes, tag_reward, -step_cost)
        runner_reward = tl.where(tagged_lanes, -tag_penalty, step_cost)
        reward = tl.where(is_runner, runner_reward, tagger_reward)
        reward = reward - tl.where(hit, wall_hit_penalty, 0.0)
        elapsed = elapsed + 1
    if RESET:
        fresh, fresh_lanes, u0, u1, _ = agent_starts(
            reset_mask_ptr, restarts_ptr, key_lo, key_hi, env, env_ok, agents, valid
        )
        if RANDOM_START:
            start_x = tl.minimum((u0 * (L + 1)).to(tl.int32), L)
            start_y = tl.minimum((u1 * (L + 1)).to(tl.int32), L)
        else:
            start_x = tl.where(is_runner, 0, L // 2)
            start_y = tl.where(is_runner, 0, L // 2)
        x = tl.where(fresh_lanes, start_x, x)
        y = tl.where(fresh_lanes, start_y, y)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            reward = tl.where(fresh_lanes, 0.0, reward)
            tagged = tagged & (fresh == 0)
    tl.store(pos_ptr + rows * 2 + 0, x, mask=valid)
    tl.store(pos_ptr + rows * 2 + 1, y, mask=valid)
    tl.store(elapsed_ptr + env, elapsed, mask=env_ok)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + env, tagged, mask=env_ok)
        tl.store(truncated_ptr + env, elapsed >= T, mask=env_ok)
    # Observations of the state after the call.
    scaled_x = x.to(tl.float32) / L
    scaled_y = y.to(tl.float32) / L
    runner_flag = is_runner.to(tl.float32)
    time = (agents * 0 + elapsed).to(tl.float32) / T
    if FULL_OBS:
        tl.store(observ_ptr + rows * OBS_DIM + 4 * N, time, mask=valid)
        cols = agents[None, :]
        for first in range(0, N, BLOCK_I):  # tiles of observing agents
            observer = first + tl.arange(0, BLOCK_I)[:, None]  # [BLOCK_I, 1]
            inside = (observer < N) & (cols < N)
            base = observ_ptr + (env * N + observer) * OBS_DIM + cols  # [BLOCK_I, BLOCK_A]
            zeros = tl.zeros((BLOCK_I, BLOCK_A), dtype=tl.float32)
            tl.store(base, zeros + scaled_x[None, :], mask=inside)
            tl.store(base + N, zeros + scaled_y[None, :], mask=inside)
            tl.store(base + 2 * N, zeros + runner_flag[None, :], mask=inside)
            tl.store(base + 3 * N, (observer == cols).to(tl.float32), mask=inside)
    else:
        runner_x = tl.reduce(tl.where(is_runner, x, 0), 0, add_combine)
        runner_y = tl.reduce(tl.where(is_runner, y, 0), 0, add_combine)
        dist2 = (x - runner_x) * (x - runner_x) + (y - runner_y) * (y - runner_y)
        dist2 = tl.where(is_tagger, dist2, 2147483647)
        closest = tl.reduce(dist2, 0, minimum_combine)
        nearest = tl.reduce(tl.where(dist2 == closest, agents, BLOCK_A), 0, minimum_combine)
        near_x = tl.reduce(tl.where(agents == nearest, scaled_x, 0.0), 0, add_combine)
        near_y = tl.reduce(tl.where(agents == nearest, scaled_y, 0.0), 0, add_combine)
        runner_sx = tl.reduce(tl.where(is_runner, scaled_x, 0.0), 0, add_combine)
        runner_sy = tl.reduce(tl.where(is_runner, scaled_y, 0.0), 0, add_combine)
        target_x = tl.where(is_runner, near_x, runner_sx)
        target_y = tl.where(is_runner, near_y, runner_sy)
        out = observ_ptr + rows * 6
        tl.store(out + 0, scaled_x, mask=valid)
        tl.store(out + 1, scaled_y, mask=valid)
        tl.store(out + 2, target_x, mask=valid)
        tl.store(out + 3, target_y, mask=valid)
        tl.store(out + 4, runner_flag, mask=valid)
        tl.store(out + 5, time, mask=valid)


# -- the env class ----------------------------------------------------------------------------


class DiscreteTag(TagEnvBase):
    """A batch of discrete Tag games following the InGraphEnv protocol (multi-agent).

    Args:
        num_envs: games in the batch (>= 1).
        num_taggers: taggers per game (>= 1); the runner is one more agent, the last id.
        grid_length: L; positions are integers in ``[0, L]`` (>= 1).
        episode_length: T; truncated once ``elapsed >= T`` (>= 1).
        wall_hit_penalty: paid by an agent whose move was clipped at the grid's edge.
        tag_reward_for_tagger: every tagger's reward at the step the runner is tagged.
        tag_penalty_for_runner: subtracted from the runner's reward when it is tagged.
        step_cost_for_tagger: taggers pay it and the runner earns it on untagged steps.
        full_observation: ``4N + 1`` features per agent (True) or the partial 6.
        random_start: uniform random cells per agent and game, else WarpDrive's fixed start.
        device: where the state lives.
        seed: seeds the starts (the torch hash's key or the kernel's Philox key); None: fresh.
        backend: ``"torch"`` or ``"triton"`` (CUDA; CPU only under ``TRITON_INTERPRET=1``).
    """

    state_dtype = torch.int32
    state_dim = 2
    draws_per_agent = 2
    observ_tile = 4096

    def __init__(
        self,
        num_envs: int,
        num_taggers: int = 10,
        grid_length: int = 10,
        episode_length: int = 100,
        wall_hit_penalty: float = 0.1,
        tag_reward_for_tagger: float = 10.0,
        tag_penalty_for_runner: float = 2.0,
        step_cost_for_tagger: float = 0.01,
        full_observation: bool = True,
        random_start: bool = True,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        backend: str = "torch",
    ) -> None:
        name = type(self).__name__
        self.num_taggers = check_int(name, "num_taggers", num_taggers, 1)
        self.num_agents = num_taggers + 1
        self.grid_length = check_int(name, "grid_length", grid_length, 1)
        self.episode_length = check_int(name, "episode_length", episode_length, 1)
        self.wall_hit_penalty = check_float(name, "wall_hit_penalty", wall_hit_penalty)
        self.tag_reward_for_tagger = check_float(
            name, "tag_reward_for_tagger", tag_reward_for_tagger
        )
        self.tag_penalty_for_runner = check_float(
            name, "tag_penalty_for_runner", tag_penalty_for_runner
        )
        self.step_cost_for_tagger = check_float(name, "step_cost_for_tagger", step_cost_for_tagger)
        for flag, value in (("full_observation", full_observation), ("random_start", random_start)):
            if not isinstance(value, bool):
                raise ValueError(f"{name}({flag}={value!r}): {flag} must be a bool")
        self.full_observation = full_observation
        self.random_start = random_start
        self.obs_dim = 4 * self.num_agents + 1 if full_observation else 6
        self.single_observation_space = gym.spaces.Box(
            0.0, 1.0, shape=(self.obs_dim,), dtype=np.float32
        )
        self.single_action_space = gym.spaces.Discrete(len(MOVES))
        self._setup_tag(num_envs, device, seed, backend)

    def _starts(self, u: torch.Tensor) -> torch.Tensor:
        size = self.grid_length
        if self.random_start:
            return torch.clamp((u * (size + 1)).to(torch.int32), max=size)
        runner = torch.arange(self.num_agents, device=u.device) == self.num_agents - 1
        start = torch.where(runner, 0, size // 2).to(torch.int32)
        return start[None, :, None].expand(u.shape[0], self.num_agents, 2).contiguous()

    def _act(self, state, action, elapsed):
        return discrete_tag_step(
            state,
            action,
            self.grid_length,
            self.wall_hit_penalty,
            self.tag_reward_for_tagger,
            self.tag_penalty_for_runner,
            self.step_cost_for_tagger,
        )

    def _observe(self, state, elapsed):
        return discrete_tag_observe(
            state, elapsed, self.grid_length, self.episode_length, self.full_observation
        )

    @staticmethod
    def _triton_kernel():
        return _step_kernel

    def _game_arguments(self):
        return {
            "wall_hit_penalty": self.wall_hit_penalty,
            "tag_reward": self.tag_reward_for_tagger,
            "tag_penalty": self.tag_penalty_for_runner,
            "step_cost": self.step_cost_for_tagger,
            "L": self.grid_length,
            "FULL_OBS": self.full_observation,
            "OBS_DIM": self.obs_dim,
            "RANDOM_START": self.random_start,
        }
