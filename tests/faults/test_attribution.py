"""Who and when: for every fault in ``FAULTS``, the error names the worker, the env
rows and the batch step.
"""

from __future__ import annotations

import pytest

from batchenv.errors import ClosedError
from tests.faults.fault_helpers import FAULTS, KINDS, WHOLE_WORKER, K, S, actions, provoke

# ------------------------------------------------------ who and when: one test for every fault


@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_error_names_the_worker_and_env(kind, case, batches, request):
    _, error, _ = provoke(case, kind, batches)
    message = str(error)
    worker = 1 if kind == "shm" else K
    assert error.worker == worker and f"worker {worker}" in message
    if kind == "shm" and case in WHOLE_WORKER:
        rows = (2, 3)
        assert "envs [2, 3]" in message
    else:
        rows = (K,)
        assert error.env_index == K and type(error.env_index) is int
        assert f"env {K}" in message or f"envs [{K}]" in message
    if case == "hangs":
        assert error.env_indices == rows
        assert all(type(row) is int for row in error.env_indices)


@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_error_names_the_batch_step(kind, case, batches, request):
    env, error, _ = provoke(case, kind, batches)
    assert error.step == S and f"at step {S}" in str(error)
    assert env.steps == S
    with pytest.raises(ClosedError, match=f"broke at step {S}"):
        env.step(actions())
