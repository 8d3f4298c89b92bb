"""Bad data crossing the batch: malformed or out-of-space actions are refused before any
IPC; observations an env gets wrong are env errors naming the row.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from batchenv import BatchEnv
from batchenv.errors import ClosedError, EnvWorkerError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import KINDS, NUM_ENVS, K, S, actions, step_ok

# ---------------------------------------------------------------------- 10, 11. bad actions


def _no_ipc(env: BatchEnv, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the transport was used for an invalid action")

    monkeypatch.setattr(env._transport, "start", refuse)


@pytest.mark.parametrize(
    "bad, error_type, match",
    [
        pytest.param(actions(num_envs=3), ValueError, r"\(3, 1\).*\(4, 1\)", id="batch-size"),
        pytest.param(np.zeros((4, 2), np.float32), ValueError, r"\(4, 2\)", id="shape"),
        pytest.param(np.zeros(4, np.float32), ValueError, r"\(4,\)", id="no-action-axis"),
        pytest.param(np.full((4, 1), "a"), TypeError, "dtype", id="dtype-str"),
        pytest.param(np.zeros((4, 1), np.complex64), TypeError, "dtype", id="dtype-complex"),
        pytest.param({"a": actions()}, ValueError, "shape", id="dict"),
    ],
)
@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_malformed_action_batch_is_refused_before_any_ipc(
    kind, bad, error_type, match, batches, monkeypatch
):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    with monkeypatch.context() as patch:
        _no_ipc(env, patch)
        with pytest.raises(error_type, match=match):
            env.step(bad)
    assert not env.closed
    observ, reward, *_ = env.step(actions(0.25))
    np.testing.assert_array_equal(reward, 0.25)


@pytest.mark.parametrize(
    "value, match",
    [
        pytest.param(np.nan, "not finite", id="nan"),
        pytest.param(np.inf, "not finite", id="inf"),
        pytest.param(-np.inf, "not finite", id="-inf"),
        pytest.param(1.5, "outside the action space", id="above-high"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_action_outside_space_names_the_row(kind, value, match, batches, monkeypatch):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    bad = actions()
    bad[2] = value
    with monkeypatch.context() as patch:
        _no_ipc(env, patch)
        with pytest.raises(ValueError, match=f"env 2.*{match}|{match}.*env 2"):
            env.step(bad)
    env.step(actions())


@pytest.mark.parametrize("kind", KINDS)
def test_check_actions_false_lets_out_of_range_values_through(kind, batches):
    env = batches(kind, fe.PlainEnv, check_actions=False)
    env.reset(seed=0)
    observ, reward, *_ = env.step(actions(5.0))
    np.testing.assert_array_equal(observ[:, 2], 5.0)  # the env saw the raw action
    np.testing.assert_array_equal(reward, 5.0)


@pytest.mark.parametrize(
    "part, value, match",
    [
        pytest.param(0, 3, "Discrete", id="discrete-too-big"),
        pytest.param(0, -1, "Discrete", id="discrete-negative"),
        pytest.param(1, 1.01, "Box", id="box"),
        pytest.param("md", [2, 0], "MultiDiscrete", id="multidiscrete"),
        pytest.param("mb", [0, 2], "MultiBinary", id="multibinary"),
    ],
)
def test_nested_action_outside_space_names_the_row_and_leaf(part, value, match, batches):
    env = batches("in-process", fe.NestedEnv, 3)
    env.reset(seed=0)
    batch = [
        np.zeros(3, np.int64),
        np.zeros((3, 2)),
        {"md": np.zeros((3, 2), np.int64), "mb": np.zeros((3, 2), np.int8)},
    ]
    leaf = batch[2][part] if isinstance(part, str) else batch[part]
    leaf[1] = value
    with pytest.raises(ValueError, match=f"env 1 is outside the action space {match}"):
        env.step(tuple(batch))
    leaf[1] = 0
    env.step(tuple(batch))


# ---------------------------------------------------------------------- 12. bad observation


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_observation_of_wrong_shape_is_an_env_error(kind, batches):
    env = batches(kind, functools.partial(fe.BadObservationEnv, at_step=S, only_index=K))
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match=r"shape \(4,\).*expects \(3,\)") as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K
    with pytest.raises(ClosedError):
        env.step(actions())


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_observation_that_cannot_be_stored_is_an_env_error(kind, batches):
    # The right shape, but strings: the shared-memory worker writes a group's observations
    # in one assignment, and must still name the row that broke it.
    env = batches(kind, functools.partial(fe.TextObservationEnv, at_step=S, only_index=K))
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match="could not convert string to float") as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K


@pytest.mark.parametrize(
    "bad_value, message",
    [
        (7.9, r"observation 7\.9 has dtype float64, but the space Discrete\(3\)"),
        (5, r"observation 5 is outside the space Discrete\(3\) \(\[0, 2\]\)"),
    ],
    ids=["float-cast", "out-of-range"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_observation_value_outside_the_space_is_an_env_error(kind, batches, bad_value, message):
    env = batches(
        kind,
        functools.partial(fe.DiscreteObservationEnv, bad_value=bad_value, at_step=S, only_index=K),
    )
    observ, _ = env.reset(seed=0)
    assert observ.dtype == np.int64 and observ.tolist() == [0] * NUM_ENVS
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match=message) as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K
