"""Worker groups as Ray actors (``start_ray_workers``): bitwise the local backend's
trajectories, typed errors for a killed actor, a hang, a crashing env and a lost node, and
no actor or placement group left after ``close()`` or an error.

The tests share the session's one local Ray instance (``ray_cluster``, tests/ray_session.py)
and skip when Ray is not installed. The two-node case runs its own ``Cluster`` in a
subprocess, since one process joins only one Ray cluster.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time

import gymnasium
import numpy as np
import pytest

import batchenv
from batchenv.errors import ClosedError, EnvWorkerError, WorkerDiedError, WorkerTimeoutError
from tests import ray_session
from tests.conftest import ROOT
from tests.faulty_envs import (
    ConstructorRaisesEnv,
    FaultyEnvError,
    PlainEnv,
    StepExitsEnv,
    StepHangsEnv,
    StepRaisesEnv,
)

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from batchenv.make import start_ray_workers  # noqa: E402

ray_cluster = ray_session.ray_cluster  # the session's one Ray instance


@pytest.fixture
def start(ray_cluster):
    """``start(constructor, num_envs=4, **kwargs)`` -> a BatchEnv of Ray worker groups,
    closed at the end of the test."""
    created = []

    def start(constructor, num_envs: int = 4, **kwargs):
        kwargs = {"num_workers": 2, "timeout": 30.0, "start_timeout": 60.0, **kwargs}
        created.append(start_ray_workers([constructor] * num_envs, **kwargs))
        return created[-1]

    yield start
    for batch in created:
        batch.close()


def wait_dead(actor, timeout: float = 10.0) -> None:
    from ray._private import state

    deadline = time.monotonic() + timeout
    while state.actors().get(actor._actor_id.hex(), {}).get("State") != "DEAD":
        assert time.monotonic() < deadline, "the killed actor is still alive"
        time.sleep(0.05)


def assert_nothing_left(batch, timeout: float = 10.0) -> None:
    """Every actor of ``batch`` is dead and its placement group removed (Ray's tables)."""
    from ray._private import state

    transport = batch._transport
    ids = [actor._actor_id.hex() for actor in transport.actors]
    deadline = time.monotonic() + timeout
    while True:
        table = state.actors()
        alive = [i for i in ids if table.get(i, {}).get("State") != "DEAD"]
        group = ray.util.placement_group_table(transport.placement_group)
        if not alive and group["state"] == "REMOVED":
            return
        assert time.monotonic() < deadline, f"actors {alive} alive, placement group {group}"
        time.sleep(0.1)


def assert_same(a, b) -> None:
    """Bitwise equal results: arrays of the same dtype and bytes, equal infos."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        else:
            assert x == y


@pytest.mark.parametrize(
    "env_id, groups, cpus",
    [("CartPole-v1", 2, 1), ("Pendulum-v1", 1, 2)],  # envs in the actor / in its processes
)
def test_the_same_trajectories_as_the_local_backend(start, env_id, groups, cpus):
    num_envs = 6
    constructor = functools.partial(gymnasium.make, env_id)
    remote = start(constructor, num_envs, num_workers=groups, num_cpus_per_worker=cpus)
    local = batchenv.make(env_id, num_envs, num_workers=2)
    try:
        space = local.action_space
        space.seed(3)
        assert_same(remote.reset(seed=7), local.reset(seed=7))
        for t in range(250):
            actions = np.stack([space.sample() for _ in range(num_envs)])
            results = remote.step(actions)
            assert_same(results, local.step(actions))
            done = np.flatnonzero(results[2] | results[3])
            if len(done):  # reset ahead in the actors: no round trip
                assert_same(remote.reset(done), local.reset(done))
            if t == 100:  # chosen rows, out of order, seeded
                assert_same(remote.reset([4, 1], seed=[11, 12]), local.reset([4, 1], seed=[11, 12]))
            if t == 150:  # running rows, unseeded
                assert_same(remote.reset([5, 0]), local.reset([5, 0]))
        assert remote.close() == [] and local.close() == []
    finally:
        remote.close()
        local.close()
    assert_nothing_left(remote)


def test_per_row_commands_match_the_local_backend(start):
    from batchenv.workers.autoreset import IDLE, RESET, SAME_STEP, STEP

    remote = start(functools.partial(gymnasium.make, "CartPole-v1"), num_envs=5)
    local = batchenv.make("CartPole-v1", 5, num_workers=2)
    try:
        assert_same(remote.reset(seed=1), local.reset(seed=1))
        rng = np.random.default_rng(0)
        for t in range(80):
            command = rng.choice([IDLE, STEP, STEP, SAME_STEP, RESET], 5).astype(np.uint8)
            actions = rng.integers(0, 2, 5)
            seeds = {int(r): (100 + t, None) for r in np.flatnonzero(command == RESET)}
            results = remote.exchange(command, actions, seeds or None)
            expected = local.exchange(command, actions, seeds or None)
            assert_same(results[:4], expected[:4])
            np.testing.assert_equal(results[4], expected[4])
    finally:
        local.close()


def test_a_killed_actor_is_a_worker_died_error_naming_its_group(start):
    batch = start(PlainEnv, timeout=20.0)
    batch.reset(seed=0)
    batch.step(np.zeros((4, 1), np.float32))
    ray.kill(batch._transport.actors[1])
    wait_dead(batch._transport.actors[1])
    started = time.monotonic()
    with pytest.raises(
        WorkerDiedError, match=r"worker group 1 \(.*envs 2-3\) died during step"
    ) as info:
        batch.step(np.zeros((4, 1), np.float32))
    assert time.monotonic() - started < 20.0
    assert (info.value.worker, info.value.step) == (1, 1)
    assert_nothing_left(batch)
    with pytest.raises(ClosedError, match="broke at step 1"):
        batch.step(np.zeros((4, 1), np.float32))
    batch.close()


def test_an_env_that_exits_its_actor_is_a_worker_died_error(start):
    batch = start(functools.partial(StepExitsEnv, at_step=2, only_index=3))
    batch.reset(seed=0)
    with pytest.raises(WorkerDiedError, match=r"worker group 1 .* died during step at step 2"):
        for _ in range(3):
            batch.step(np.zeros((4, 1), np.float32))
    assert_nothing_left(batch)


def test_a_hanging_env_is_a_worker_timeout_error_within_the_timeout(start):
    batch = start(functools.partial(StepHangsEnv, at_step=1, only_index=0), timeout=1.5)
    batch.reset(seed=0)
    batch.step(np.zeros((4, 1), np.float32))
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match=r"worker group 0 .* within the deadline") as info:
        batch.step(np.zeros((4, 1), np.float32))
    assert 1.4 < time.monotonic() - started < 5.0
    assert info.value.worker == 0 and info.value.env_indices == (0, 1)
    assert_nothing_left(batch)


def test_a_raising_env_is_the_typed_error_with_the_remote_traceback(start):
    batch = start(functools.partial(StepRaisesEnv, at_step=2, only_index=2))
    batch.reset(seed=0)
    with pytest.raises(EnvWorkerError, match=r"worker group 1 .*env 2\) raised FaultyEnvError"):
        for _ in range(3):
            batch.step(np.zeros((4, 1), np.float32))
    error = batch._broken
    assert isinstance(error, FaultyEnvError)  # the env's own type too, as locally
    assert (error.worker, error.env_index, error.step, error.remote_type) == (
        1,
        2,
        2,
        "FaultyEnvError",
    )
    assert isinstance(error.__cause__, FaultyEnvError)
    assert "faulty_envs.py" in str(error.__cause__.__cause__)  # the actor's traceback
    assert_nothing_left(batch)


def test_an_exception_that_cannot_be_unpickled_keeps_its_name_and_message(start):
    from batchenv.errors import RemoteTraceback

    with pytest.raises(EnvWorkerError) as info:
        start(functools.partial(ConstructorRaisesEnv, "bad level", unloadable=True))
    error = info.value
    assert type(error) is EnvWorkerError and error.remote_type == "UnloadableError"
    assert str(error).endswith("raised UnloadableError while being built: bad level")
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "UnloadableError: bad level" in str(error.__cause__)


def test_row_calls_reach_the_env_in_its_actor(start):
    batch = start(PlainEnv, num_envs=3)
    try:
        batch.reset(seed=0)
        assert batch.get_attr("index") == (0, 1, 2)
        batch.set_attr("episode_length", [5, 6, 7])
        assert batch[2].get_attr("episode_length") == 7
        assert batch.call("render")[1].shape == batch[1].render().shape
    finally:
        batch.close()
    assert_nothing_left(batch)


def test_failures_while_starting_leave_no_actor(start):
    from ray._private import state

    before = {i for i, a in state.actors().items() if a["State"] != "DEAD"}
    with pytest.raises(EnvWorkerError, match="worker group 0 .* while being built") as info:
        start(ConstructorRaisesEnv)
    assert isinstance(info.value, FaultyEnvError)
    with pytest.raises(WorkerTimeoutError, match="could not place 3 worker groups"):
        start(PlainEnv, num_workers=3, start_timeout=1.0)  # 3 CPUs on a 2-CPU cluster
    with pytest.raises(ValueError, match="num_workers must be an integer in"):
        start(PlainEnv, num_workers=5)
    time.sleep(0.5)
    assert {i for i, a in state.actors().items() if a["State"] != "DEAD"} <= before
    placed = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    assert not placed, placed


def test_without_ray_the_hint_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[ray\]"'):
        start_ray_workers([PlainEnv], num_workers=1)


def test_an_address_without_a_cluster_fails_fast_in_one_line():
    from batchenv.workers import ray_cluster

    started = time.monotonic()  # (the probe fails before any ray.init)
    with pytest.raises(ConnectionError, match=r"^no Ray cluster answers at '127.0.0.1:1' .*$"):
        ray_cluster.connect(None, "127.0.0.1:1")
    assert time.monotonic() - started < 6.0


# A user's own modules, outside this package and installed nowhere: the driver imports
# them from a folder only it has on sys.path ({helpers} is the second module's name).
USER_ENVS = """
import gymnasium
import numpy as np

from {helpers} import Cell, score


class LevelError(Exception):
    pass


class Maze(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(0.0, 100.0, (1,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, level=1, wall_at=None):
        if level > 3:
            raise LevelError(f"level {{level}} does not exist")
        self.wall_at = wall_at

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([seed or 0.0]), {{}}

    def step(self, action):
        self.t += 1
        if self.t == self.wall_at:
            raise LevelError(f"a wall at step {{self.t}}")
        info = {{"cell": Cell(self.t)}}
        return np.array([self.t], float), score(self.t, action), False, False, info
"""
USER_HELPERS = """
class Cell:
    def __init__(self, t):
        self.t = t


def score(t, action):
    return t / 10 + int(action) / 3
"""


@pytest.fixture
def user_envs(tmp_path, monkeypatch):
    """The module ``user_envs_<id>`` (and its helper module) written to a temporary folder
    that only this process has on sys.path; gone from sys.modules afterwards."""
    import importlib
    import uuid

    name = f"user_envs_{uuid.uuid4().hex[:8]}"
    helpers = f"{name}_helpers"
    (tmp_path / f"{name}.py").write_text(USER_ENVS.format(helpers=helpers))
    (tmp_path / f"{helpers}.py").write_text(USER_HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(name), importlib.import_module(helpers)
    for module in (name, helpers):
        sys.modules.pop(module, None)


def test_shipped_constructors_build_where_the_users_modules_are_not(user_envs, tmp_path):
    """``ship`` sends both of the user's modules by value (the second one only the first
    names), keeps a registration the caller made and drops its own."""
    from batchenv.workers.ray_cluster import ship

    envs, helpers = user_envs
    ray.cloudpickle.register_pickle_by_value(helpers)  # the caller's own
    try:
        payload = ship([functools.partial(envs.Maze, wall_at=5)])
        registered = ray.cloudpickle.list_registry_pickle_by_value()
        assert helpers.__name__ in registered and envs.__name__ not in registered
    finally:
        ray.cloudpickle.unregister_pickle_by_value(helpers)
    (tmp_path / "payload.pkl").write_bytes(payload)
    code = (
        "import pickle, sys\n"
        f"assert not any(p.startswith({str(tmp_path)!r}) for p in sys.path)\n"
        f"[make] = pickle.loads(open({str(tmp_path / 'payload.pkl')!r}, 'rb').read())\n"
        "env = make()\n"
        "env.reset(seed=0)\n"
        "print(env.step(1)[1], type(env).__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(helpers.score(1, 1)), envs.__name__]


@pytest.mark.parametrize("groups, cpus", [(2, 1), (1, 2)])  # envs in the actors / processes
def test_an_env_from_the_users_own_module_steps_on_ray(start, user_envs, groups, cpus):
    envs, helpers = user_envs
    registered = ray.cloudpickle.list_registry_pickle_by_value()
    batch = start(envs.Maze, num_envs=4, num_workers=groups, num_cpus_per_worker=cpus)
    assert ray.cloudpickle.list_registry_pickle_by_value() == registered  # for that call only
    observ, _ = batch.reset(seed=3)
    assert observ.tolist() == [[3.0], [4.0], [5.0], [6.0]]
    for t in (1, 2):
        actions = np.array([(t + i) % 2 for i in range(4)])
        observ, reward, _, _, infos = batch.step(actions)
        assert reward.tolist() == [helpers.score(t, a) for a in actions]
        assert observ.tolist() == [[float(t)]] * 4
        assert all(type(info["cell"]) is helpers.Cell and info["cell"].t == t for info in infos)


def test_a_user_modules_exception_keeps_its_type_on_ray(start, user_envs):
    envs, _ = user_envs
    with pytest.raises(envs.LevelError, match="level 5 does not exist") as info:
        start(functools.partial(envs.Maze, level=5), num_envs=2, num_workers=1)
    assert isinstance(info.value, EnvWorkerError)
    assert "worker group 0 (" in str(info.value) and "while being built" in str(info.value)
    batch = start(functools.partial(envs.Maze, wall_at=2), num_envs=2, num_workers=1)
    batch.reset(seed=0)
    batch.step(np.zeros(2, np.int64))
    with pytest.raises(envs.LevelError, match="a wall at step 2") as info:
        batch.step(np.zeros(2, np.int64))
    assert info.value.step == 1 and info.value.env_index == 0
    assert envs.__file__ in str(info.value.__cause__.__cause__)  # the actor's traceback


def test_make_ships_the_users_module_to_the_ray_actors(ray_cluster, user_envs):
    envs, helpers = user_envs
    env = batchenv.make(envs.Maze, 2, backend="ray", num_workers=1, timeout=30.0)
    try:
        env.reset(seed=0)
        _, reward, *_ = env.step(np.array([1, 0]))
        assert reward.tolist() == [helpers.score(1, 1), helpers.score(1, 0)]
    finally:
        env.close()


TWO_NODES = """
import functools, pathlib, shutil, sys, tempfile, time
import gymnasium, numpy as np, ray
from ray.cluster_utils import Cluster
from batchenv.errors import WorkerDiedError
from batchenv.make import start_ray_workers

folder = tempfile.mkdtemp()  # a module of the user's that no node has on its path
pathlib.Path(folder, "two_node_envs.py").write_text(
    "import gymnasium\\n"
    "class Pole(gymnasium.Wrapper):\\n"
    "    def __init__(self):\\n"
    "        super().__init__(gymnasium.make('CartPole-v1'))\\n"
)
sys.path.insert(0, folder)
import two_node_envs

fast = {"health_check_period_ms": 500, "health_check_failure_threshold": 2,
        "health_check_initial_delay_ms": 0}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "_system_config": fast})
other = cluster.add_node(num_cpus=2)
try:
    ray.init(address=cluster.address, logging_level="WARNING")
    cluster.wait_for_nodes()
    user = start_ray_workers([two_node_envs.Pole] * 2, num_workers=2, strategy="SPREAD",
                             timeout=30.0)
    assert len(set(user._transport.nodes)) == 2, user._transport.nodes
    user.reset(seed=0)
    assert user.step(np.zeros(2, np.int64))[1].tolist() == [1.0, 1.0]
    user.close()
    batch = start_ray_workers([functools.partial(gymnasium.make, "CartPole-v1")] * 4,
                              num_workers=2, strategy="SPREAD", timeout=30.0)
    transport = batch._transport
    assert len(set(transport.nodes)) == 2, transport.nodes
    batch.reset(seed=0)
    batch.step(np.zeros(4, np.int64))
    lost = transport.nodes.index(other.node_id)
    cluster.remove_node(other, allow_graceful=False)
    started = time.monotonic()
    try:  # the lost node's actor may answer a step or two while its process ends
        while time.monotonic() - started < 30.0:
            batch.step(np.zeros(4, np.int64))
            batch.reset(np.arange(4))
        raise AssertionError("no error within 30 s of losing a node")
    except WorkerDiedError as error:
        assert error.worker == lost and f"worker group {lost}" in str(error), error
    seconds = time.monotonic() - started
    from ray._private import state
    ids = [actor._actor_id.hex() for actor in transport.actors]
    deadline = time.monotonic() + 20
    while any(state.actors()[i]["State"] != "DEAD" for i in ids):
        assert time.monotonic() < deadline, state.actors()
        time.sleep(0.1)
    print(f"OK node loss noticed in {seconds:.1f} s")
finally:
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
"""


def test_spread_places_groups_on_two_nodes_and_a_lost_node_is_a_worker_died_error():
    """Also: an env class from a module only the driver can import steps on both nodes."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", TWO_NODES],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr[-3000:]


def test_make_with_the_ray_backend_steps_as_the_local_one(ray_cluster):
    remote = batchenv.make("CartPole-v1", 4, backend="ray", num_workers=2, timeout=30.0)
    local = batchenv.make("CartPole-v1", 4, num_workers=2)
    try:
        assert type(remote._transport).__name__ == "RayTransport"
        assert_same(remote.reset(seed=3), local.reset(seed=3))
        for t in range(60):
            actions = np.array([(t + i) % 2 for i in range(4)])
            results = remote.step(actions)
            assert_same(results, local.step(actions))
            done = np.flatnonzero(results[2] | results[3])
            if len(done):
                assert_same(remote.reset(done), local.reset(done))
    finally:
        remote.close()
        local.close()
    assert_nothing_left(remote)


def test_make_with_the_ray_backend_batches_pettingzoo_agents(ray_cluster):
    from batchenv.multi_agent import AgentBatchEnv
    from tests.agent_envs import Relay

    env = batchenv.make(Relay, 2, backend="ray", num_workers=1, timeout=30.0)
    try:
        assert isinstance(env, AgentBatchEnv) and (env.num_envs, env.num_agents) == (2, 3)
        observ, infos = env.reset(seed=5)
        np.testing.assert_array_equal(infos["agent_mask"], [[True, False, True]] * 2)
        np.testing.assert_array_equal(observ[1, 2], [0, 26])
    finally:
        env.close()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "backend='ray' needs num_workers"),
        ({"num_workers": 2, "batch_size": 2}, "batch_size apply to the local backend only"),
        ({"num_workers": 2, "parent_share": "auto"}, "parent_share apply to the local backend"),
        ({"backend": "dask"}, "backend must be 'local' or 'ray', got 'dask'"),
    ],
)
def test_make_refuses_what_the_ray_backend_cannot_do_before_starting_anything(kwargs, message):
    kwargs = {"backend": "ray", **kwargs}
    with pytest.raises(ValueError, match=message):
        batchenv.make("CartPole-v1", 4, **kwargs)
