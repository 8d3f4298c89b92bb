"""BatchEnv behaviour, the same for every kind of batch.

Kinds: "shm" (``batchenv.make``, shared memory, several envs per worker), "per-env" (a
BatchEnv of ExternalProcess workers) and "in-process" (a BatchEnv of Gymnasium envs).
"""

from __future__ import annotations

import functools
import importlib.util

import gymnasium
import numpy as np
import pytest

import batchenv
from batchenv import BatchEnv, ExternalProcess
from batchenv.errors import NotResetError
from tests import faulty_envs as fe

KINDS = ("shm", "per-env", "in-process")
HAS_COMPAT = importlib.util.find_spec("batchenv.compat") is not None


def plain_actions(value: float, num_envs: int) -> np.ndarray:
    return np.full((num_envs, 1), value, np.float32)


# ---------------------------------------------------------------------- same as Gymnasium


def _reference_actions(space: gymnasium.Space, num_envs: int, rng) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, num_envs)
    return rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(space.dtype)


@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 120), ("Pendulum-v1", 60)])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_plain_gymnasium_envs(kind, env_id, steps, batches):
    num_envs = 3
    env = batches(kind, env_id, num_envs)
    references = [gymnasium.make(env_id) for _ in range(num_envs)]
    rng = np.random.default_rng(0)
    try:
        observ, infos = env.reset(seed=7)
        for i, reference in enumerate(references):
            np.testing.assert_array_equal(observ[i], reference.reset(seed=7 + i)[0])
        assert len(infos) == num_envs
        for _ in range(steps):
            action = _reference_actions(env.action_space, num_envs, rng)
            observ, reward, terminated, truncated, infos = env.step(action)
            assert observ.dtype == env.observation_space.dtype
            assert reward.dtype == np.float64 and terminated.dtype == truncated.dtype == bool
            for i, reference in enumerate(references):
                ref_observ, ref_reward, ref_term, ref_trunc, _ = reference.step(action[i])
                np.testing.assert_array_equal(observ[i], ref_observ)
                assert (reward[i], terminated[i], truncated[i]) == (
                    ref_reward,
                    ref_term,
                    ref_trunc,
                )
            done = np.flatnonzero(terminated | truncated)
            if len(done):
                observ, _ = env.reset(indices=done)
                for row, value in zip(done, observ):
                    np.testing.assert_array_equal(value, references[row].reset()[0])
    finally:
        for reference in references:
            reference.close()


# ---------------------------------------------------------------------- reset and seeding


@pytest.mark.parametrize("kind", KINDS)
def test_reset_indices_returns_only_those_rows(kind, batches):
    env = batches(kind, fe.PlainEnv, 4)
    observ, infos = env.reset(seed=0)
    assert observ.shape == (4, 3) and len(infos) == 4
    env.step(plain_actions(0.5, 4))
    observ, infos = env.reset(indices=[3, 1])
    assert observ.shape == (2, 3)
    np.testing.assert_array_equal(observ[:, 0], [3, 1])  # rows in the order asked
    np.testing.assert_array_equal(observ[:, 1], 0)  # freshly reset
    assert [info["index"] for info in infos] == [3, 1]
    observ, _ = env.reset(indices=np.array([2]))
    assert observ.shape == (1, 3)
    observ, infos = env.reset(indices=[])
    assert observ.shape == (0, 3) and infos == ()
    observ, *_ = env.step(plain_actions(0.25, 4))
    np.testing.assert_array_equal(observ[:, 1], [2, 1, 1, 1])  # steps since each reset


@pytest.mark.parametrize("kind", KINDS)
def test_reset_indices_are_validated(kind, batches):
    env = batches(kind, fe.PlainEnv, 2)
    with pytest.raises(IndexError, match="out of range"):
        env.reset(indices=[2])
    with pytest.raises(IndexError):
        env.reset(indices=[-1])
    with pytest.raises(ValueError, match="unique"):
        env.reset(indices=[0, 0])
    with pytest.raises(ValueError, match="seeds"):
        env.reset(seed=[1, 2, 3])
    env.reset(seed=0)  # still usable


@pytest.mark.parametrize("kind", KINDS)
def test_seed_s_seeds_env_i_with_s_plus_i(kind, batches):
    env = batches(kind, "CartPole-v1", 3)
    reference = gymnasium.make("CartPole-v1")

    def expected(seed):
        return reference.reset(seed=seed)[0]

    observ, _ = env.reset(seed=40)
    for i in range(3):
        np.testing.assert_array_equal(observ[i], expected(40 + i))
    observ, _ = env.reset(indices=[2], seed=100)  # env 2 gets 100 + 2, not 100
    np.testing.assert_array_equal(observ[0], expected(102))
    observ, _ = env.reset(indices=[0, 2], seed=[5, 6])  # one seed per reset row
    np.testing.assert_array_equal(observ[0], expected(5))
    np.testing.assert_array_equal(observ[1], expected(6))
    observ, _ = env.reset(seed=np.int64(40))
    np.testing.assert_array_equal(observ[1], expected(41))
    reference.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_seed_sequence_may_hold_numpy_integers(kind, batches):
    env = batches(kind, "CartPole-v1", 2)
    reference = gymnasium.make("CartPole-v1")
    observ, _ = env.reset(seed=np.array([5, 6]))
    np.testing.assert_array_equal(observ[1], reference.reset(seed=6)[0])
    reference.close()


@pytest.mark.parametrize("kind", KINDS)
def test_reset_options_reach_the_env(kind, batches):
    env = batches(kind, "CartPole-v1", 2)
    observ, _ = env.reset(seed=0, options={"low": 0.2, "high": 0.2})
    np.testing.assert_allclose(observ, 0.2)


# ---------------------------------------------------------------------- nested spaces


def _nested_actions(num_envs: int, step: int):
    return (
        np.arange(num_envs) % 3,
        np.linspace(-1, 1, num_envs * 2).reshape(num_envs, 2) * (step % 2),
        {
            "md": np.stack([np.arange(num_envs) % 2, (np.arange(num_envs) + step) % 3], 1),
            "mb": np.stack([np.arange(num_envs) % 2, np.full(num_envs, step % 2)], 1),
        },
    )


def _row(nest, i):
    if isinstance(nest, dict):
        return {key: _row(value, i) for key, value in nest.items()}
    if isinstance(nest, tuple):
        return tuple(_row(value, i) for value in nest)
    return nest[i]


def _assert_batched(batched, single, num_envs: int, row: int) -> None:
    """``batched`` has the nesting of ``single``; its leaf arrays hold it in row ``row``."""
    if isinstance(single, dict):
        assert isinstance(batched, dict) and set(batched) == set(single)
        for key in single:
            _assert_batched(batched[key], single[key], num_envs, row)
    elif isinstance(single, tuple):
        assert isinstance(batched, tuple) and len(batched) == len(single)
        for part, single_part in zip(batched, single):
            _assert_batched(part, single_part, num_envs, row)
    else:
        assert isinstance(batched, np.ndarray) and len(batched) == num_envs
        assert batched.shape[1:] == np.shape(single)
        np.testing.assert_array_equal(batched[row], single)


@pytest.mark.parametrize("kind", KINDS)
def test_nested_spaces_come_back_as_the_same_nest_of_batched_arrays(kind, batches):
    num_envs = 3
    env = batches(kind, fe.NestedEnv, num_envs)
    references = [fe.NestedEnv() for _ in range(num_envs)]
    observ, _ = env.reset(seed=0)
    for i, reference in enumerate(references):
        _assert_batched(observ, reference.reset(seed=i)[0], num_envs, i)
    assert observ["pos"].dtype == np.float32 and observ["flags"].dtype == np.int8
    assert observ["inner"][0].dtype == observ["inner"][1].dtype == np.int64
    for step in range(3):
        action = _nested_actions(num_envs, step)
        observ, reward, terminated, truncated, infos = env.step(action)
        for i, reference in enumerate(references):
            ref_observ, ref_reward, *_ = reference.step(_row(action, i))
            _assert_batched(observ, ref_observ, num_envs, i)
            assert reward[i] == ref_reward
        assert [info["t"] for info in infos] == [step + 1] * num_envs
    observ, _ = env.reset(indices=[1], seed=0)
    _assert_batched(observ, references[1].reset(seed=1)[0], 1, 0)


# ---------------------------------------------------------------------- construction


@pytest.mark.parametrize("kind", ["per-env", "in-process"])
def test_mismatched_spaces_are_refused_at_construction(kind):
    dims = (3, 4)
    if kind == "in-process":
        envs = [fe.PlainEnv(obs_dim=dim) for dim in dims]
    else:
        envs = [ExternalProcess(functools.partial(fe.PlainEnv, obs_dim=dim)) for dim in dims]
    try:
        with pytest.raises(ValueError, match="env 1 has observation space.*share"):
            BatchEnv(envs)
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize("num_workers", [1, 2], ids=["same-worker", "across-workers"])
def test_make_refuses_mismatched_spaces(num_workers, tmp_path):
    with pytest.raises(ValueError, match="share observation and action spaces"):
        batchenv.make(
            functools.partial(fe.CountedSpaceEnv, str(tmp_path)), 2, num_workers=num_workers
        )


def test_make_validates_its_arguments():
    with pytest.raises(ValueError, match="num_envs"):
        batchenv.make(fe.PlainEnv, 0)
    with pytest.raises(ValueError, match="num_workers"):
        batchenv.make(fe.PlainEnv, 2, num_workers=0)
    with pytest.raises(TypeError, match="Gymnasium id"):
        batchenv.make(fe.PlainEnv, 2, max_episode_steps=3)
    with pytest.raises(TypeError):
        batchenv.make(42, 2)
    with pytest.raises(ValueError, match="start_method"):
        batchenv.make(fe.PlainEnv, 1, start_method="fork")
    with pytest.raises(ValueError, match="at least one"):
        BatchEnv([])


@pytest.mark.parametrize("num_envs, num_workers", [(1, 1), (5, 2), (3, 8)])
def test_make_spreads_envs_over_workers(num_envs, num_workers, batches):
    env = batches("shm", fe.PlainEnv, num_envs, num_workers=num_workers)
    assert len(env) == num_envs == env.num_envs
    assert len(env.processes()) == min(num_envs, num_workers)
    observ, _ = env.reset(seed=0)
    np.testing.assert_array_equal(observ[:, 0], np.arange(num_envs))


def test_make_passes_gymnasium_kwargs(batches):
    env = batchenv.make("CartPole-v1", 2, num_workers=1, max_episode_steps=3)
    batches.created.append(env)
    env.reset(seed=0)
    for _ in range(3):
        *_, truncated, _ = env.step(np.zeros(2, np.int64))
    assert truncated.all()


@pytest.mark.parametrize("kind", ["shm", "per-env"])
def test_spawn_start_method_works(kind, batches):
    env = batches(kind, lambda: fe.PlainEnv(obs_dim=2), 2, start_method="spawn")
    observ, _ = env.reset(seed=0)
    observ, reward, *_ = env.step(plain_actions(0.5, 2))
    np.testing.assert_array_equal(observ, [[0, 1], [1, 1]])
    np.testing.assert_array_equal(reward, 0.5)


@pytest.mark.parametrize(
    "constructor",
    [
        pytest.param(fe.PlainEnv, id="class-by-reference"),
        pytest.param(functools.partial(fe.PlainEnv, obs_dim=3), id="partial"),
        pytest.param(lambda: fe.PlainEnv(obs_dim=3), id="lambda"),
    ],
)
def test_make_accepts_classes_partials_and_lambdas(constructor, batches):
    env = batches("shm", constructor, 2)
    observ, _ = env.reset(seed=0)
    assert observ.shape == (2, 3)


# ---------------------------------------------------------------------- results


@pytest.mark.parametrize("copy", [True, False], ids=["copy=True", "copy=False"])
def test_copy_false_returns_views_valid_until_the_next_step(copy, batches):
    env = batches("shm", fe.PlainEnv, 3, copy=copy)
    env.reset(seed=0)
    observ, reward, terminated, truncated, _ = env.step(plain_actions(0.5, 3))
    kept = observ.copy(), reward.copy()
    env.step(plain_actions(-0.5, 3))
    changed = not np.array_equal(observ, kept[0])
    assert changed == (not copy)
    assert (not np.array_equal(reward, kept[1])) == (not copy)
    if not copy:
        np.testing.assert_array_equal(observ[:, 1], 2)  # the view shows the newest step
        assert not observ.flags.owndata
    observ, _ = env.reset(indices=[0])
    kept = observ.copy()
    env.step(plain_actions(0.0, 3))
    np.testing.assert_array_equal(observ, kept)  # reset rows are always a copy


@pytest.mark.parametrize("kind", ["per-env", "in-process"])
def test_results_of_other_kinds_are_never_overwritten(kind, batches):
    env = batches(kind, fe.PlainEnv, 2)
    env.reset(seed=0)
    observ, reward, *_ = env.step(plain_actions(0.5, 2))
    kept = observ.copy(), reward.copy()
    env.step(plain_actions(-0.5, 2))
    np.testing.assert_array_equal(observ, kept[0])
    np.testing.assert_array_equal(reward, kept[1])


@pytest.mark.parametrize("kind", KINDS)
def test_infos_are_returned_per_env(kind, batches):
    env = batches(kind, fe.PlainEnv, 3)
    _, infos = env.reset(seed=0)
    assert infos == tuple({"index": i, "t": 0} for i in range(3))
    *_, infos = env.step(plain_actions(0.0, 3))
    assert isinstance(infos, tuple)
    assert infos == tuple({"index": i, "t": 1} for i in range(3))


@pytest.mark.parametrize("kind", KINDS)
def test_empty_infos_are_empty_dicts(kind, batches):
    env = batches(kind, "CartPole-v1", 3)
    _, infos = env.reset(seed=0)
    assert infos == ({}, {}, {})
    *_, infos = env.step(np.zeros(3, np.int64))
    assert infos == ({}, {}, {})


@pytest.mark.parametrize("kind", KINDS)
def test_terminated_flags_and_reset_of_finished_rows(kind, batches):
    env = batches(kind, functools.partial(fe.PlainEnv, episode_length=2), 3)
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(plain_actions(0.0, 3))
    assert not terminated.any()
    _, _, terminated, truncated, _ = env.step(plain_actions(0.0, 3))
    assert terminated.all() and not truncated.any()
    observ, _ = env.reset(indices=np.flatnonzero(terminated))
    np.testing.assert_array_equal(observ[:, 1], 0)


@pytest.mark.parametrize("blocking", [False, True], ids=["blocking=False", "blocking=True"])
def test_blocking_list_batch_steps_the_same(blocking):
    workers = [ExternalProcess(fe.PlainEnv) for _ in range(2)]
    env = BatchEnv(workers, blocking=blocking)
    try:
        env.reset(seed=0)
        observ, reward, *_ = env.step(plain_actions(0.75, 2))
        np.testing.assert_array_equal(observ, [[0, 1, 0.75], [1, 1, 0.75]])
    finally:
        env.close()


# ---------------------------------------------------------------------- attributes


@pytest.mark.parametrize("kind", KINDS)
def test_get_attr_call_and_set_attr(kind, batches):
    env = batches(kind, fe.PlainEnv, 3)
    env.reset(seed=0)
    env.step(plain_actions(0.0, 3))
    assert env.get_attr("t") == (1, 1, 1)
    assert env.get_attr("index") == (0, 1, 2)
    assert env.call("add", 10, b=5) == (15, 16, 17)
    env.set_attr("episode_length", [7, 8, 9])
    assert env.get_attr("episode_length") == (7, 8, 9)
    env.set_attr("episode_length", 4)
    assert env.get_attr("episode_length") == (4, 4, 4)
    with pytest.raises(ValueError, match="values for 3 envs"):
        env.set_attr("episode_length", [1, 2])
    *_, infos = env.step(plain_actions(0.0, 3))  # still usable
    assert infos[2]["t"] == 2


@pytest.mark.parametrize("kind", ["shm", "per-env"])
def test_indexing_gives_explicit_calls_into_one_env(kind, batches):
    env = batches(kind, fe.PlainEnv, 3)
    env.reset(seed=0)
    row = env[2]
    assert row.observation_space == env.observation_space
    assert row.action_space == env.action_space
    assert row.get_attr("index") == 2
    assert row.call("add", 1) == 3
    row.set_attr("t", 5)
    assert env.get_attr("t") == (0, 0, 5)
    np.testing.assert_array_equal(row.render(), np.full((2, 2, 3), 5, np.uint8))


def test_in_process_indexing_gives_the_env_itself(batches):
    env = batches("in-process", fe.PlainEnv, 2)
    assert isinstance(env[1], fe.PlainEnv)
    assert env.processes() == []


def test_shm_row_handle_checks_its_index(batches):
    env = batches("shm", fe.PlainEnv, 2)
    with pytest.raises(IndexError):
        env[2]


@pytest.mark.parametrize("kind", KINDS)
def test_context_manager_closes(kind, batches):
    with batches(kind, fe.PlainEnv, 2) as env:
        env.reset(seed=0)
    assert env.closed
    assert "closed" in repr(env)


# ---------------------------------------------------------------------- legacy gym envs


@pytest.mark.parametrize("kind", ["shm", "per-env"])
def test_legacy_gym_envs_are_converted_in_the_worker(kind, batches):
    env = batches(kind, fe.LegacyGymEnv, 2)
    observ, infos = env.reset(seed=10)
    np.testing.assert_array_equal(observ, [[10, 0], [11, 0]])  # seeded through env.seed()
    assert len(infos) == 2
    for t in range(1, 4):
        observ, reward, terminated, truncated, infos = env.step(np.array([1, 0]))
        np.testing.assert_array_equal(observ, [[11, t], [11, t]])
        np.testing.assert_array_equal(reward, 1.0)
        assert infos[0]["t"] == t
    assert (terminated | truncated).all()


# ---------------------------------------------------------------------- shm reset-ahead


def test_finished_rows_are_reset_ahead_and_must_be_reset_before_the_next_step(batches):
    env = batches("shm", functools.partial(fe.PlainEnv, episode_length=2), 3)
    env.reset(seed=0)
    env.step(plain_actions(0.0, 3))
    env.set_attr("episode_length", [2, 9, 2])  # rows 0 and 2 finish at the next step
    observ, _, terminated, _, infos = env.step(plain_actions(0.5, 3))
    np.testing.assert_array_equal(terminated, [True, False, True])
    np.testing.assert_array_equal(observ[:, 1], 2)  # the terminal observation
    assert infos == tuple({"index": i, "t": 2} for i in range(3))  # the step's own infos
    with pytest.raises(NotResetError, match=r"\[0, 2\]"):
        env.step(plain_actions(0.0, 3))
    observ, infos = env.reset(indices=[2, 0])
    np.testing.assert_array_equal(observ, [[2, 0, 0], [0, 0, 0]])
    assert infos == ({"index": 2, "t": 0}, {"index": 0, "t": 0})  # the reset infos
    observ, *_ = env.step(plain_actions(0.0, 3))
    np.testing.assert_array_equal(observ[:, 1], [1, 3, 1])


def test_finished_rows_reset_with_a_seed_are_reset_again(batches):
    env = batches("shm", "CartPole-v1", 2)
    reference = gymnasium.make("CartPole-v1")
    env.reset(seed=0)
    for _ in range(200):
        _, _, terminated, truncated, _ = env.step(np.ones(2, np.int64))  # falls over soon
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            break
    observ, _ = env.reset(indices=done, seed=50)
    for position, row in enumerate(done):
        np.testing.assert_array_equal(observ[position], reference.reset(seed=50 + int(row))[0])
    reference.close()


def test_reset_ahead_false_leaves_finished_envs_alone(batches):
    env = batchenv.make(
        functools.partial(fe.PlainEnv, episode_length=1), 2, num_workers=1, reset_ahead=False
    )
    batches.created.append(env)
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(plain_actions(0.0, 2))
    assert terminated.all()
    assert env.get_attr("t") == (1, 1)  # still at the end of its episode: inspectable
    observ, *_ = env.step(plain_actions(0.0, 2))  # no reset demanded
    np.testing.assert_array_equal(observ[:, 1], 2)


@pytest.mark.parametrize(
    "rows", [[0, 1, 2, 3], [3, 0, 2, 1], [2, 0]], ids=["all", "shuffled", "some"]
)
def test_infos_line_up_with_the_rows_asked_for(rows):
    """Worker replies map env index -> info; the tuple follows the order of ``rows``."""
    from batchenv.batch_env import EMPTY_INFO, _infos_for

    raw = {row: {"env": row} for row in rows if row != 0}  # env 0 returned no info
    infos = _infos_for(np.array(rows), raw)
    assert infos == tuple(EMPTY_INFO if row == 0 else {"env": row} for row in rows)
