"""The MinAtar Triton backend: bit for bit the torch backend's results for one seed.

Each game is stepped on both backends side by side on random actions (sticky actions on),
with ``reset_mask`` resets, ``reset_where`` and ``reset`` calls, and start states that reach
the rare events (a cleared wall, the time limit, difficulty ramps) within a few hundred
steps: observations, rewards, flags, every state tensor and the draw counters must be equal
after every call. Without CUDA the kernels run in Triton's interpreter (slow: small
batches, few steps).
"""

from __future__ import annotations

import pytest
import torch

from batchenv.kernels.minatar import Asterix, Breakout, Freeway, Seaquest, SpaceInvaders

N = 8


def assert_same(a, b, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (
        f"{what}: {a.dtype} {a.shape} vs {b.dtype} {b.shape}"
    )
    assert torch.equal(a.cpu(), b.cpu()), f"{what} differs"


def assert_same_states(ours, theirs, when: str) -> None:
    mine, other = ours.get_state(), theirs.get_state()
    assert mine.keys() == other.keys()
    for key in mine:
        assert_same(mine[key], other[key], f"state[{key!r}] {when}")
    assert_same(ours._restarts, theirs._restarts, f"draw counters {when}")


def side_by_side(env_class, device, steps, start=None, action_probs=None, **kwargs):
    """Step the torch and the triton backend together; return what happened (totals)."""
    torch_env = env_class(N, device=device, seed=7, **kwargs)
    triton_env = env_class(N, device=device, seed=7, backend="triton", **kwargs)
    assert_same_states(torch_env, triton_env, "after construction")
    if start is not None:
        for env in (torch_env, triton_env):
            env.set_state(start)
    generator = torch.Generator().manual_seed(0)
    actions = env_class(1).single_action_space.n
    probs = torch.ones(actions) if action_probs is None else torch.tensor(action_probs)
    seen = {"reward": 0.0, "terminated": 0, "truncated": 0, "fresh": 0}
    done = torch.zeros(N, dtype=torch.bool)
    for step in range(steps):
        action = torch.multinomial(probs, N, replacement=True, generator=generator)
        if step % 25 == 10:  # the traceable reset of some rows
            mask = torch.rand(N, generator=generator) < 0.3
            observ = [env.reset_where(mask.to(device)) for env in (torch_env, triton_env)]
            assert_same(*observ, f"reset_where observ at step {step}")
        elif step % 25 == 20:  # reset of an index set
            rows = torch.randperm(N, generator=generator)[:3].to(device)
            observ = [env.reset(rows) for env in (torch_env, triton_env)]
            assert_same(*observ, f"reset observ at step {step}")
        # Finished rows restart through reset_mask on odd steps, and on even steps are
        # stepped as they are (terminal rows stay frozen).
        reset_mask = done.to(device) if step % 2 else None
        seen["fresh"] += int(done.sum()) if step % 2 else 0
        results = [env.step(action.to(device), reset_mask) for env in (torch_env, triton_env)]
        names = ("observ", "reward", "terminated", "truncated")
        for name, ours, theirs in zip(names, *results):
            assert_same(ours, theirs, f"{name} at step {step}")
        assert_same_states(torch_env, triton_env, f"after step {step}")
        _, reward, terminated, truncated = results[0]
        seen["reward"] += float(reward.sum())
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
        done = (terminated | truncated).cpu()
    return seen


def test_breakout_is_the_torch_backend(triton_device):
    brick = Breakout(N).get_state()["brick"]
    brick[:2] = 0  # two rows without bricks: their walls refill at the bottom row
    seen = side_by_side(
        Breakout,
        triton_device,
        steps=240,
        start={"brick": brick},
        sticky_action_prob=0.25,
        max_episode_steps=20,
    )
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["truncated"] > 0
    assert seen["fresh"] > 0


def test_freeway_is_the_torch_backend(triton_device):
    # Four rows close to the time limit, so terminal rows and their resets happen.
    timer = torch.tensor([3, 30, 70, 120, 2500, 2500, 2500, 2500])
    seen = side_by_side(
        Freeway,
        triton_device,
        steps=240,
        start={"terminate_timer": timer},
        action_probs=(0.1, 0.8, 0.1),  # mostly up: the chicken reaches the top
        sticky_action_prob=0.2,
    )
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["fresh"] > 0


def test_asterix_is_the_torch_backend(triton_device):
    # Rows on the brink of a ramp, at both parities of the ramp index.
    start = {
        "ramp_timer": torch.tensor([0, 1, 2, 5, 0, 1, 100, 100]),
        "ramp_index": torch.tensor([0, 1, 2, 3, 7, 8, 0, 0]),
        "spawn_speed": torch.tensor([10, 3, 2, 2, 1, 5, 10, 10]),
        "move_speed": torch.tensor([5, 2, 2, 1, 2, 1, 5, 5]),
    }
    seen = side_by_side(Asterix, triton_device, steps=240, start=start)
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["fresh"] > 0


def test_asterix_without_ramping_and_all_six_actions(triton_device):
    start = {"ramp_timer": torch.zeros(N, dtype=torch.int64)}
    seen = side_by_side(
        Asterix,
        triton_device,
        steps=120,
        start=start,
        difficulty_ramping=False,
        minimal_action_set=False,
        sticky_action_prob=0.5,
    )
    assert seen["terminated"] > 0


def test_space_invaders_is_the_torch_backend(triton_device):
    # Rows 0 and 1 clear their wave on the first step (a cannon bullet under the last
    # alien; row 0's next wave is ramped, row 1's interval is at its floor), rows 2 and 3
    # have one low alien left, row 4 an alien bullet above the cannon.
    alien = SpaceInvaders(N).get_state()["alien"]  # row masks [N, 10]: bit x of row y
    alien[:4] = 0
    for row, (y, x) in enumerate([(5, 5), (5, 5), (8, 4), (9, 7)]):
        alien[row, y] = 1 << x
    f_bullet = torch.zeros(N, 10, dtype=torch.int64)
    f_bullet[:2, 6] = 1 << 5
    e_bullet = torch.zeros(N, 10, dtype=torch.int64)
    e_bullet[4, 8] = 1 << 5
    start = {
        "alien": alien,
        "f_bullet": f_bullet,
        "e_bullet": e_bullet,
        "enemy_move_interval": torch.tensor([7, 6, 12, 8, 12, 12, 12, 12]),
        "alien_move_timer": torch.tensor([5, 5, 12, 12, 12, 12, 12, 12]),
    }
    seen = side_by_side(
        SpaceInvaders,
        triton_device,
        steps=150,
        start=start,
        action_probs=(0.2, 0.2, 0.2, 0.4),  # firing often
    )
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["fresh"] > 0


def test_seaquest_is_the_torch_backend(triton_device):
    # Rows about to surface with 6, 2, 3 and -1 (MinAtar's quirk) divers on board, one low on
    # oxygen, two spawning an enemy every step with fast enemies, one at an odd ramp index.
    def column(values):
        return torch.tensor(values)

    start = {
        "sub_y": column([1, 1, 5, 4, 1, 4, 1, 3]),
        "surface": column([False] * 8),
        "diver_count": column([6, 2, 0, 0, 3, 0, -1, 1]),
        "oxygen": column([150, 50, 3, 200, 120, 200, 90, 200]),
        "e_spawn_speed": column([20, 20, 20, 1, 2, 20, 20, 1]),
        "e_spawn_timer": column([5, 5, 5, 0, 0, 5, 5, 0]),
        "d_spawn_timer": column([9, 9, 9, 9, 9, 0, 9, 0]),
        "move_speed": column([5, 5, 5, 1, 3, 5, 5, 2]),
        "ramp_index": column([0, 0, 0, 0, 3, 0, 0, 0]),
    }
    seen = side_by_side(
        Seaquest,
        triton_device,
        steps=160,
        start=start,
        action_probs=(0.1, 0.15, 0.3, 0.15, 0.1, 0.2),  # often up (surfacing) and firing
    )
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["fresh"] > 0


def test_seaquest_fights_and_rescues_as_the_torch_backend(triton_device):
    # Deep below, firing often: bullets in flight toward fish and subs on the sub's row,
    # divers at and next to the sub, enemies spawning every step and moving fast.
    base = Seaquest(N).get_state()
    fish, esub, diver, bullet = base["fish"], base["esub"], base["diver"], base["bullet"]
    bullet[:, 0] = torch.tensor([1, 6, 4, 1])  # alive, x, y, right: toward column 7
    fish[:4, 0] = torch.tensor([1, 7, 4, 0, 0])  # alive, x, y, right, move timer
    esub[2:6, 0] = torch.tensor([1, 7, 4, 0, 1, 0])  # ... and a shot timer at 0: it fires
    esub[6:, 0] = torch.tensor([1, 8, 4, 0, 0, 3])
    diver[:, 0] = torch.tensor([1, 5, 4, 1, 2])  # under the sub: picked up
    diver[:, 1] = torch.tensor([1, 6, 4, 0, 0])  # moves onto the sub
    start = {
        "sub_y": torch.full((N,), 4),
        "surface": torch.zeros(N, dtype=torch.bool),
        "fish": fish,
        "esub": esub,
        "diver": diver,
        "bullet": bullet,
        "e_spawn_speed": torch.tensor([1, 1, 1, 1, 3, 3, 20, 20]),
        "e_spawn_timer": torch.zeros(N, dtype=torch.int64),
        "move_speed": torch.tensor([1, 1, 2, 2, 3, 5, 5, 5]),
    }
    seen = side_by_side(
        Seaquest,
        triton_device,
        steps=160,
        start=start,
        action_probs=(0.15, 0.2, 0.02, 0.2, 0.03, 0.4),
    )
    assert seen["reward"] > 0 and seen["terminated"] > 0 and seen["fresh"] > 0


def trajectory(env, steps: int = 30) -> list[torch.Tensor]:
    """Everything a seeded run of random actions (finished rows reset) hands out."""
    generator = torch.Generator().manual_seed(1)
    seen, reset_mask = [], None
    for _ in range(steps):
        action = torch.randint(0, env.single_action_space.n, (env.num_envs,), generator=generator)
        observ, reward, terminated, _ = env.step(action.to(env.device), reset_mask)
        seen += [observ, reward, terminated]
        reset_mask = terminated
    return seen + list(env.get_state().values())


def same(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize(
    "env_class",
    # One game in the default run: the seeding code is the base's, the same for each game.
    [
        Breakout,
        *(
            pytest.param(c, marks=pytest.mark.slow)
            for c in (Freeway, Asterix, SpaceInvaders, Seaquest)
        ),
    ],
)
def test_triton_backend_is_seeded(triton_device, env_class):
    def make(seed: int):
        return env_class(N, device=triton_device, seed=seed, backend="triton")

    first = trajectory(make(3))
    assert same(first, trajectory(make(3)))
    assert not same(first, trajectory(make(5)))
    reseeded = make(4)
    reseeded.seed(3)  # every row's next fresh start is its first one under seed 3
    reseeded.reset(torch.arange(N, device=triton_device))
    assert same(first, trajectory(reseeded))


def test_triton_backend_seeded_per_block_draws_as_the_torch_backend(triton_device):
    # Two seeds in one env: the kernel hashes each row under its block's key, at its row
    # within the block, as the torch backend does.
    def make(backend: str):
        return Breakout(N, device=triton_device, seed=[3, 11], backend=backend)

    assert same(trajectory(make("triton")), trajectory(make("torch")))
    assert not same(
        trajectory(make("triton")), trajectory(Breakout(N, device=triton_device, seed=3))
    )


def test_triton_backend_refuses_given_draws(triton_device):
    env = Breakout(2, device=triton_device, backend="triton")
    action = torch.zeros(2, dtype=torch.int64, device=triton_device)
    with pytest.raises(ValueError, match=r"draws=\.\.\. needs backend='torch'"):
        env.step(action, draws={"sticky": torch.zeros(2, 1)})
    with pytest.raises(ValueError, match=r"draws=\.\.\. needs backend='torch'"):
        env.reset(torch.tensor([0]), draws={"ball_start": torch.zeros(1, 1)})
