"""The one local Ray instance a test session shares (``ray.init`` takes ~5 s).

Test modules that need Ray import :func:`ray_cluster`; whichever module asks first starts
the instance and shuts it down at the end of the session, the others reuse it.
"""

from __future__ import annotations

import psutil
import pytest

from tests.conftest import live_children, wait_until_gone


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for the test session (its GCS address), shut down at the end.

    Ray's daemons (GCS, raylet, agents, idle workers) are children of this process: they
    start before the first Ray test's snapshot of live children, so tests/conftest.py's
    per-test check ignores them and still catches a trial actor, session process or worker
    group actor that outlives a test. At the end of the session none of them may be left.
    """
    import ray

    if ray.is_initialized():  # started by another module's ray_cluster: share it
        yield ray.get_runtime_context().gcs_address
        return
    before = live_children()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        left = wait_until_gone(live_children() - before, 30)
        for pid in left:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        assert not left, f"Ray processes left after ray.shutdown(): {sorted(left)}"
