"""Misuse of the API: stepping before reset or after close, and async calls out of
order, raise one error class each and break nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchenv.errors import (
    AlreadyPendingCallError,
    BatchEnvError,
    ClosedError,
    EnvIdsError,
    NoPendingCallError,
    NotResetError,
)
from tests import faulty_envs as fe
from tests.faults.fault_helpers import KINDS, NUM_ENVS, actions

# ---------------------------------------------------------------------- 8, 9. misuse


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_step_before_reset_and_after_close(kind, batches):
    env = batches(kind, fe.PlainEnv)
    with pytest.raises(NotResetError, match="reset"):
        env.step(actions())
    env.reset(indices=[0, 1], seed=0)
    with pytest.raises(NotResetError, match=r"\[2, 3\]"):
        env.step(actions())
    env.reset(indices=[2, 3], seed=0)
    env.step(actions())  # the failed calls did not break anything
    env.close()
    for call in (
        lambda: env.step(actions()),
        lambda: env.reset(),
        lambda: env.step_async(actions()),
        lambda: env.call("add", 1),
        lambda: env.get_attr("t"),
    ):
        with pytest.raises(ClosedError, match="closed BatchEnv"):
            call()


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_async_misuse_raises_one_error_class_each(kind, batches):
    env = batches(kind, fe.PlainEnv)
    with pytest.raises(NoPendingCallError, match="nothing is pending"):
        env.step_wait()
    with pytest.raises(NoPendingCallError):
        env.reset_wait()
    env.reset_async(seed=0)
    with pytest.raises(NoPendingCallError, match="a reset is pending"):
        env.step_wait()
    with pytest.raises(AlreadyPendingCallError, match="reset_wait"):
        env.reset_async()
    observ, _ = env.reset_wait()
    assert observ.shape == (NUM_ENVS, 3)
    env.step_async(actions(0.5))
    with pytest.raises(AlreadyPendingCallError, match="step_wait"):
        env.step_async(actions())
    with pytest.raises(AlreadyPendingCallError):
        env.reset()
    observ, reward, *_ = env.step_wait()
    np.testing.assert_array_equal(reward, 0.5)
    with pytest.raises(NoPendingCallError):
        env.step_wait()
    env.step(actions())  # still usable
    assert env.steps == 2


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_bad_reset_indices_are_a_typed_error_and_break_nothing(kind, batches):
    env = batches(kind, fe.PlainEnv)
    for indices, error_type, match in [
        ([1, 1], ValueError, r"reset indices must be unique, got \[1, 1\]"),
        ([0, 4], IndexError, r"reset indices \[0, 4\] out of range for 4 envs"),
    ]:
        for call in (env.reset, env.reset_async):
            with pytest.raises(EnvIdsError, match=match) as info:
                call(indices)
            assert isinstance(info.value, BatchEnvError) and isinstance(info.value, error_type)
    observ, _ = env.reset(seed=0)
    assert observ.shape == (NUM_ENVS, 3)
