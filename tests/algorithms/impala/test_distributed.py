"""IMPALA's distributed mode: actors as Ray actors, unrolls through the object store.

The fast tests share the session's local Ray instance (tests/ray_session.py) and check the
guarantees of the other modes: every unroll consumed once, a killed or hanging actor
restarted within the budget, ActorDiedError with the remote traceback past it, no actor
left. The slow test runs a 2-node ``ray.cluster_utils.Cluster`` in a subprocess (one
process joins one Ray cluster) and compares the learning with sync mode's.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
import time

import pytest

from batchenv.algorithms.impala.errors import ActorDiedError
from tests import ray_session
from tests.algorithms.impala.impala_envs import CountingEnv, FaultAfterEnv
from tests.algorithms.impala.trainer_helpers import check_accounting, small_config
from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from batchenv.algorithms.impala.distributed import DistributedTrainer  # noqa: E402

ray_cluster = ray_session.ray_cluster  # the session's one Ray instance


def _config(**changes):
    return small_config("distributed", placement="PACK", **changes)


def _no_actor_left(timeout: float = 10.0) -> None:
    from ray._private import state

    deadline = time.monotonic() + timeout
    while True:
        alive = [
            actor
            for actor in state.actors().values()
            if actor["State"] != "DEAD" and "SamplerHost" in actor.get("ActorClassName", "")
        ]
        if not alive:
            return
        assert time.monotonic() < deadline, f"Ray actors left: {alive}"
        time.sleep(0.1)


def test_every_unroll_is_consumed_once(ray_cluster):
    trainer = DistributedTrainer(
        _config(), env=functools.partial(CountingEnv, 10), record_unrolls=True
    )
    result = trainer.train()
    assert result.steps == 400 and result.learner_steps == 40
    check_accounting(result)
    assert result.actor_restarts == 0 and result.abandoned_unrolls == 0
    assert {actor for actor, _, _ in result.consumed_ids} == {0, 1}
    _no_actor_left()


def test_a_killed_actor_is_restarted(ray_cluster, tmp_path, caplog):
    env = functools.partial(FaultAfterEnv, "kill", at_step=7, marker=str(tmp_path / "fired"))
    with caplog.at_level("WARNING"):
        trainer = DistributedTrainer(_config(total_steps=4000), env=env, record_unrolls=True)
        result = trainer.train()
    assert result.actor_restarts == 1
    assert result.abandoned_unrolls == 2  # the unroll of both its envs in progress
    assert result.steps == 4000
    check_accounting(result)
    assert {incarnation for _, incarnation, _ in result.consumed_ids} == {0, 1}
    assert "died while sampling" in caplog.text
    assert "restarting it (restart 1 of 3)" in caplog.text
    _no_actor_left()


def test_a_hanging_actor_is_killed_and_restarted(ray_cluster, tmp_path):
    env = functools.partial(FaultAfterEnv, "hang", at_step=7, marker=str(tmp_path / "fired"))
    started = time.monotonic()
    # One actor: training waits for it, so its hang must be cut by actor_timeout.
    result = DistributedTrainer(_config(num_actors=1, actor_timeout=2.0), env=env).train()
    assert result.actor_restarts == 1 and result.steps == 400
    assert time.monotonic() - started < 30.0  # not the env's 60 s sleep
    _no_actor_left()


def test_failures_past_the_budget_stop_training_with_the_remote_traceback(ray_cluster):
    env = functools.partial(FaultAfterEnv, "raise", at_step=3)  # every incarnation raises
    trainer = DistributedTrainer(_config(max_actor_restarts=1), env=env)
    with pytest.raises(ActorDiedError, match=r"1 restarts already spent") as caught:
        trainer.train()
    assert caught.value.restarts == 1
    cause = caught.value.__cause__
    assert "RuntimeError" in str(cause) and "planned failure at step 3" in str(cause.__cause__)
    _no_actor_left()


@pytest.mark.slow
def test_learns_cartpole_on_two_nodes_as_sync_mode_does_and_survives_a_killed_actor():
    """A 2-node Cluster (2 CPUs each), actors SPREAD over it, actor 0 killed after the
    first log; the final mean return is within noise of sync mode's at equal steps."""
    script = textwrap.dedent(
        """
        import json, sys
        import ray
        from ray.cluster_utils import Cluster
        from batchenv.algorithms.impala.config import ImpalaConfig
        from batchenv.algorithms.impala.distributed import DistributedTrainer
        from batchenv.algorithms.impala.sync import SyncTrainer

        common = dict(env="CartPole-v1", num_actors=2, envs_per_actor=16, total_steps=600_000,
                      batch_size=8, unroll_length=20, log_interval=2.0, seed=1)
        sync = SyncTrainer(ImpalaConfig(mode="sync", **common)).train()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, include_dashboard=False, logging_level="WARNING")
        killed = []
        def kill_once(step, row):
            if not killed:
                killed.append(step)
                trainer.kill_actor(0)
        trainer = DistributedTrainer(
            ImpalaConfig(mode="distributed", placement="SPREAD", **common), on_log=kill_once
        )
        result = trainer.train()
        nodes = sorted(set(trainer.groups.nodes))
        ray.shutdown()
        cluster.shutdown()
        print("RESULT " + json.dumps({
            "sync": [sync.returns[-1][1], sync.sps],
            "distributed": [result.returns[-1][1], result.sps],
            "restarts": result.actor_restarts, "nodes": len(nodes), "killed": killed,
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    print(result)  # (pytest -s) the returns and SPS of both modes, for benchmarks/RESULTS.md
    assert result["nodes"] == 2 and result["killed"] and result["restarts"] == 1
    sync_return, distributed_return = result["sync"][0], result["distributed"][0]
    assert distributed_return > 100, result
    assert distributed_return > 0.5 * sync_return, result
