"""meta.distributed: shared (Hogwild! sessions): shared memory across processes, the spec's
checks, and a shared trial end to end next to a normal one.

tests/conftest.py fails any test that leaves a process behind; every wait here has a
deadline.
"""

from __future__ import annotations

import glob
import json
import os
import re
import select
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from batchenv.experiment import SpecError, run
from batchenv.experiment.shared import SharedParameters, SharedParametersError
from batchenv.experiment.spec import spec_from_dict
from tests.cli_process import batchenv_command, python_command

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 60.0

#: A second process: attach a Linear(3, 2) of its own seed, report what it sees, wait for
#: "go", report again, take one Adam step on the shared weights, report them, exit.
CHILD = """
import json, sys
import torch
from batchenv.experiment.shared import SharedParameters

torch.manual_seed(1)
net = torch.nn.Linear(3, 2)
first = SharedParameters(sys.argv[1]).attach({"net": net})
print(json.dumps({"first": first, "weight": net.weight.tolist()}), flush=True)
assert sys.stdin.readline().strip() == "go"
print(json.dumps({"weight": net.weight.tolist()}), flush=True)
optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
net(torch.ones(4, 3)).sum().backward()
optimizer.step()
print(json.dumps({"weight": net.weight.tolist(), "bias": net.bias.tolist()}), flush=True)
"""


def read_line(process: subprocess.Popen, timeout: float = DEADLINE) -> dict:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"the child printed nothing within {timeout:g} s")
    line = process.stdout.readline()
    assert line, f"the child ended early: {process.stderr.read()}"
    return json.loads(line)


def test_a_write_in_one_process_is_seen_in_the_other(tmp_path):
    shared = SharedParameters.create("t0", root=tmp_path)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    initial = net.weight.detach().clone()
    assert shared.attach({"net": net}) is True  # the first writes its own values

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        python_command(CHILD, shared.path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        attached = read_line(child)
        assert attached["first"] is False  # adopts the values, not its own seed's
        assert torch.equal(torch.tensor(attached["weight"]), initial)

        with torch.no_grad():  # the parent writes; the child reads it
            net.weight.fill_(0.5)
        out, err = child.communicate("go\n", timeout=DEADLINE)
        assert child.returncode == 0, err
        seen, stepped = (json.loads(line) for line in out.splitlines())
        assert seen["weight"] == [[0.5] * 3] * 2
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(DEADLINE)
    # The child's optimiser step wrote the parent's network.
    assert torch.equal(net.weight.detach(), torch.tensor(stepped["weight"]))
    assert torch.equal(net.bias.detach(), torch.tensor(stepped["bias"]))
    assert not torch.equal(net.weight.detach(), torch.full((2, 3), 0.5))

    shared.remove()
    assert not Path(shared.path).exists()


def test_networks_that_differ_from_the_shared_ones_are_refused(tmp_path):
    shared = SharedParameters.create("t0", root=tmp_path)
    shared.attach({"q": torch.nn.Linear(3, 2)})
    with pytest.raises(SharedParametersError, match=r"this session's networks \(2 tensors, 10 "):
        shared.attach({"q": torch.nn.Linear(4, 2)})
    with pytest.raises(
        ValueError, match="must be float32 on the CPU, but q.weight is torch.float64"
    ):
        shared.attach({"q": torch.nn.Linear(3, 2).double()})
    shared.remove()
    with pytest.raises(SharedParametersError, match="the trial that made them has ended"):
        shared.attach({"q": torch.nn.Linear(3, 2)})


# --- the spec's checks ----------------------------------------------------------------------


def dqn_spec(**meta) -> dict:
    return {
        "algorithm": "dqn",
        "env": "batchenv.kernels:CartPole",
        "config": {"num_envs": 4, "learning_starts": 100, "buffer_size": 1000},
        "meta": {"sessions": 2, "steps": 800, "eval_every": 400, "cpus_per_session": 1, **meta},
    }


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "synced",
            "meta.distributed must be false or shared (one network trained by all the "
            "sessions of a trial at once), got 'synced'",
        ),
        (True, "got true"),
        ("Shared", "got 'Shared'"),
        (1, "meta.distributed must be bool | str, got 1 (int)"),
    ],
    ids=["synced", "true", "capitalised", "int"],
)
def test_bad_distributed_values_are_refused(value, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        spec_from_dict("x", dqn_spec(distributed=value))


def test_shared_and_false_are_accepted():
    assert spec_from_dict("x", dqn_spec(distributed="shared")).meta.distributed == "shared"
    assert spec_from_dict("x", dqn_spec(distributed=False)).meta.distributed is False
    assert spec_from_dict("x", dqn_spec()).meta.distributed is False


@pytest.mark.parametrize(
    "algorithm, env", [("batchppo", "batchenv.kernels:CartPole"), ("impala", "CartPole-v1")]
)
def test_algorithms_that_cannot_share_are_named(algorithm, env):
    data = {"algorithm": algorithm, "env": env, "meta": {"distributed": "shared"}}
    with pytest.raises(SpecError) as caught:
        spec_from_dict("x", data)
    assert str(caught.value) == (
        f"meta.distributed: shared: algorithm {algorithm!r} cannot share its networks "
        "between sessions; use sac or dqn, or meta.distributed: false"
    )


@pytest.mark.parametrize("device", ["cuda", "auto"])
@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_a_gpu_device_cannot_share(algorithm, device):
    from batchenv.experiment.trainers import load_trainer

    trainer = load_trainer(algorithm)
    env = "batchenv.kernels:CartPole" if algorithm == "dqn" else "Pendulum-v1"
    config = trainer.make_config(env, {}, steps=None, seed=0, eval_every=None)
    trainer.check_shared(config)  # cpu: fine
    with pytest.raises(ValueError) as caught:
        trainer.check_shared(config.replace(device=device))
    assert str(caught.value) == (
        "meta.distributed: shared keeps the networks in CPU shared memory, but "
        f"config.device is {device!r}; set config.device: cpu, or meta.distributed: false"
    )


def test_the_cli_says_it_in_one_line_and_writes_nothing(tmp_path):
    spec = {**dqn_spec(distributed="shared"), "algorithm": "batchppo", "config": {}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"bad": spec}))
    done = subprocess.run(
        batchenv_command("run", "bad.yaml", "--mode", "train", "--runs-dir", "runs"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "batchenv run: error: meta.distributed: shared: algorithm 'batchppo' cannot share "
        "its networks between sessions; use sac or dqn, or meta.distributed: false"
    ]
    assert not (tmp_path / "runs").exists()


# --- a shared trial end to end --------------------------------------------------------------


def run_trial(tmp_path: Path, name: str, distributed, learning_starts: int):
    spec = dqn_spec(distributed=distributed)
    spec["config"]["learning_starts"] = learning_starts
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({name: spec}))
    return run(path, mode="train", runs_dir=tmp_path / name, progress=False)


def files(path: Path) -> list[str]:
    names = [str(item.relative_to(path)) for item in path.rglob("*") if item.is_file()]
    return sorted(re.sub(r"events\.out\.tfevents\..*", "events", name) for name in names)


def q_network(session: Path) -> dict:
    return torch.load(session / "checkpoint.pt", weights_only=False)["algorithm"]["q"]


def same(first: dict, second: dict) -> bool:
    return all(torch.equal(first[key], second[key]) for key in first)


@pytest.mark.slow
def test_a_shared_trial_writes_what_a_normal_trial_writes(tmp_path):
    leftovers = f"/dev/shm/batchenv-hogwild-t0-{os.getpid()}-*"
    # No learning (learning_starts past the run): the sessions' saved Q-networks are the
    # networks they started with.
    normal = run_trial(tmp_path, "normal", False, learning_starts=10_000)
    shared = run_trial(tmp_path, "shared", "shared", learning_starts=10_000)
    assert files(shared.path) == files(normal.path)
    assert "t0/s1/checkpoints.csv" in files(shared.path)
    normal_trial, shared_trial = normal.trials[0], shared.trials[0]
    assert (shared_trial.status, normal_trial.status) == ("done", "done")
    assert sorted(shared_trial.metrics) == sorted(normal_trial.metrics)
    # Own seeds, own networks; shared: the one network the first session wrote.
    assert not same(q_network(normal.path / "t0/s0"), q_network(normal.path / "t0/s1"))
    assert same(q_network(shared.path / "t0/s0"), q_network(shared.path / "t0/s1"))
    assert glob.glob(leftovers) == []

    # Learning: both sessions step the shared network; each session's metrics as usual.
    learning = run_trial(tmp_path, "learning", "shared", learning_starts=100)
    trial = learning.trials[0]
    assert trial.status == "done"
    for session in ("s0", "s1"):
        record = json.loads((learning.path / "t0" / session / "session.json").read_text())
        assert record["frames"][-1] == 800
        assert record["opt_steps"][-1] > 0
    assert glob.glob(leftovers) == []


# --- the algorithms' hooks ------------------------------------------------------------------


def dqn_config(steps: int):
    from batchenv.experiment.trainers import load_trainer

    values = {"num_envs": 4, "learning_starts": 10_000, "buffer_size": 1000, "eval_episodes": 2}
    return load_trainer("dqn").make_config(
        "batchenv.kernels:CartPole", values, steps=steps, seed=0, eval_every=200
    )


def test_dqn_shares_its_q_network_and_keeps_its_target(tmp_path):
    """A fresh run's target starts as the shared Q-network; a resumed session that attaches
    first writes its checkpoint's Q-network, one that attaches later adopts the shared one
    and keeps its checkpoint's target."""
    from batchenv.algorithms.dqn.networks import QNetwork
    from batchenv.algorithms.dqn.train import train

    torch.manual_seed(5)
    other = QNetwork(4, 2, (120, 84))  # another session's network, attached first
    first = SharedParameters.create("t0", root=tmp_path)
    first.attach({"q": other})
    train(dqn_config(200), logdir=tmp_path / "run", progress=False, shared=first)
    saved = torch.load(tmp_path / "run/checkpoint.pt", weights_only=False)["algorithm"]
    assert same(saved["q"], other.state_dict()) and same(saved["target"], other.state_dict())

    # Resumed first: the checkpoint's networks become the shared ones.
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(1.0)  # the old folder moves on; the new one starts from the run
    fresh = SharedParameters.create("t0", root=tmp_path)
    train(dqn_config(400), logdir=tmp_path / "run", resume=True, progress=False, shared=fresh)
    late = QNetwork(4, 2, (120, 84))
    assert fresh.attach({"q": late}) is False
    assert same(late.state_dict(), saved["q"])

    # Resumed after another session attached: its Q-network, the checkpoint's target.
    train(dqn_config(600), logdir=tmp_path / "run", resume=True, progress=False, shared=first)
    resumed = torch.load(tmp_path / "run/checkpoint.pt", weights_only=False)["algorithm"]
    assert same(resumed["q"], other.state_dict())
    assert same(resumed["target"], saved["target"])
    assert not same(resumed["q"], resumed["target"])


def test_sac_shares_its_policy_and_twin_qs(tmp_path):
    import gymnasium as gym

    from batchenv.algorithms.sac.algorithm import SAC
    from batchenv.algorithms.sac.config import SACConfig

    spaces = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)))
    shared = SharedParameters.create("t0", root=tmp_path)
    one = SAC(*spaces, SACConfig(seed=1, hidden_layers=(8, 8)))
    two = SAC(*spaces, SACConfig(seed=2, hidden_layers=(8, 8)))
    assert not same(one.q1.state_dict(), two.q1.state_dict())
    assert one.share(shared) is True and two.share(shared) is False
    for name in ("policy", "q1", "q2"):
        assert same(getattr(one, name).state_dict(), getattr(two, name).state_dict())
    assert same(two.q1_target.state_dict(), one.q1.state_dict())
    assert same(two.q2_target.state_dict(), one.q2.state_dict())
    with torch.no_grad():  # a write through one session's network reaches the other's
        next(one.q2.parameters()).fill_(0.25)
    assert bool((next(two.q2.parameters()) == 0.25).all())
    assert not bool((next(two.q2_target.parameters()) == 0.25).all())  # targets: their own
