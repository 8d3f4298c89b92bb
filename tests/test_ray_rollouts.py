"""Rollout fragments on Ray (``RolloutGroups``): weights loaded once per version in each
actor, fragments handed out as they finish, failures as typed values, restarts into the
same placement bundle, nothing left after ``close()``.

The tests share the session's one local Ray instance (tests/ray_session.py).
"""

from __future__ import annotations

import functools
import os
import time

import pytest

from batchenv.errors import EnvWorkerError, WorkerDiedError
from tests import ray_session

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from batchenv.workers.ray_rollouts import RolloutGroups  # noqa: E402

ray_cluster = ray_session.ray_cluster  # the session's one Ray instance


class CountingSampler:
    """Returns its group, incarnation, weights and how often it loaded weights."""

    def __init__(self, group: int, incarnation: int, fail_at: int | None = None):
        self.group, self.incarnation, self.fail_at = group, incarnation, fail_at
        self.weights, self.loads, self.calls = None, 0, 0

    def load_weights(self, weights) -> None:
        self.weights, self.loads = weights, self.loads + 1

    def sample(self) -> dict:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise ValueError(f"sampler {self.group} failed at call {self.calls}")
        return {
            "group": self.group,
            "incarnation": self.incarnation,
            "weights": self.weights,
            "loads": self.loads,
            "pid": os.getpid(),
        }

    def close(self) -> None:
        pass


def collect(groups: RolloutGroups, count: int, timeout: float = 30.0) -> list:
    results, deadline = [], time.monotonic() + timeout
    while len(results) < count:
        assert time.monotonic() < deadline, f"only {len(results)} of {count} fragments"
        results.extend(groups.wait(1.0))
    return results


def assert_nothing_left(groups: RolloutGroups, timeout: float = 10.0) -> None:
    from ray._private import state

    ids = [actor._actor_id.hex() for actor in groups.actors]
    deadline = time.monotonic() + timeout
    while True:
        table = state.actors()
        alive = [i for i in ids if table.get(i, {}).get("State") != "DEAD"]
        removed = ray.util.placement_group_table(groups.placement_group)["state"] == "REMOVED"
        if not alive and removed:
            return
        assert time.monotonic() < deadline, f"actors {alive} alive, group removed: {removed}"
        time.sleep(0.1)


def test_weights_are_loaded_once_per_version_and_reach_every_group(ray_cluster):
    groups = RolloutGroups(functools.partial(CountingSampler), 2)
    try:
        with pytest.raises(RuntimeError, match="set_weights"):
            groups.submit(0)
        groups.set_weights({"w": 1})
        groups.submit_all()
        first = dict(collect(groups, 2))
        assert {g: f["weights"] for g, f in first.items()} == {0: {"w": 1}, 1: {"w": 1}}
        groups.submit(0)  # same version: not loaded again
        ((group, again),) = collect(groups, 1)
        assert group == 0 and again["loads"] == 1
        groups.set_weights({"w": 2})
        groups.submit_all()
        second = dict(collect(groups, 2))
        assert {g: (f["weights"], f["loads"]) for g, f in second.items()} == {
            0: ({"w": 2}, 2),
            1: ({"w": 2}, 2),
        }
        assert groups.pending == 0
    finally:
        groups.close()
    assert_nothing_left(groups)


def test_a_sampler_that_raises_is_an_env_worker_error_and_the_group_restarts(ray_cluster):
    groups = RolloutGroups(functools.partial(CountingSampler, fail_at=2), 2)
    try:
        groups.set_weights(None)
        groups.submit_all()
        collect(groups, 2)
        groups.submit(1)
        ((group, error),) = collect(groups, 1)
        assert group == 1 and isinstance(error, EnvWorkerError)
        assert "group 1 (incarnation 0" in str(error) and "raised ValueError" in str(error)
        assert "sampler 1 failed at call 2" in str(error.__cause__)
        groups.restart(1)
        groups.submit(1)
        ((group, fragment),) = collect(groups, 1)
        assert (group, fragment["incarnation"], fragment["loads"]) == (1, 1, 1)
    finally:
        groups.close()
    assert_nothing_left(groups)


def test_a_killed_actor_is_a_worker_died_error_naming_its_group(ray_cluster):
    groups = RolloutGroups(functools.partial(CountingSampler), 2, description="test sampler")
    try:
        groups.set_weights(None)
        groups.kill(0)
        groups.submit_all()
        results = dict(collect(groups, 2))
        assert isinstance(results[0], WorkerDiedError) and results[0].worker == 0
        assert "test sampler group 0" in str(results[0]) and "died while sampling" in str(
            results[0]
        )
        assert results[1]["group"] == 1
    finally:
        groups.close()
    assert_nothing_left(groups)


def test_groups_that_cannot_be_placed_fail_within_the_start_timeout_leaving_nothing(ray_cluster):
    started = time.monotonic()
    with pytest.raises(EnvWorkerError, match="could not place 3 .* groups of 1 CPUs"):
        RolloutGroups(functools.partial(CountingSampler), 3, start_timeout=2.0)
    assert time.monotonic() - started < 10.0
