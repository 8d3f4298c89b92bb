"""The actor's slot layout, checked in-process with a fake pipe (no processes)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from batchenv.algorithms.impala.actor import ActorSpec, _Actor, allocate_slots, slot_specs
from batchenv.algorithms.impala.models import MLPAgent
from tests.algorithms.impala.impala_envs import CountingEnv

T, N, EPISODE = 4, 2, 3


class FakeConn:
    """Stands in for the actor's pipe: it says "stop" once two unrolls were reported."""

    def __init__(self):
        self.sent: list[tuple] = []
        self.stopped = False

    def poll(self, timeout: float = 0.0) -> bool:
        return len(self.sent) >= 2 and not self.stopped

    def recv(self) -> tuple:
        self.stopped = True
        return ("stop",)

    def send(self, message: tuple) -> None:
        self.sent.append(message)


def _run_actor(use_lstm: bool = False):
    torch.manual_seed(0)
    model = MLPAgent((2,), num_actions=2, use_lstm=use_lstm)
    core_sizes = tuple(s.shape[-1] for s in model.initial_state(1))
    slots = allocate_slots(4, slot_specs((2,), torch.float32, 2, T, core_sizes))
    spec = ActorSpec(
        index=3,
        incarnation=1,
        constructors=(functools.partial(CountingEnv, EPISODE),) * N,
        env_workers=0,
        unroll_length=T,
        seed=0,
        slots=(0, 1, 2, 3),
        parent_pid=0,
        actor_timeout=5.0,
    )
    conn = FakeConn()
    _Actor(spec, model, slots, conn).run()
    return conn, {key: value.numpy() for key, value in slots.items()}


def test_two_unrolls_fill_the_slots_in_order() -> None:
    conn, slots = _run_actor()
    assert conn.sent == [("full", [0, 1]), ("full", [2, 3])]
    # (actor, incarnation, sequence): sequence counts env unrolls of this actor.
    assert slots["unroll_id"].tolist() == [[3, 1, 0], [3, 1, 1], [3, 1, 2], [3, 1, 3]]


def test_row_zero_repeats_the_previous_last_row() -> None:
    _, slots = _run_actor()
    for key in (
        "frame",
        "reward",
        "done",
        "episode_return",
        "episode_step",
        "last_action",
        "action",
        "policy_logits",
        "baseline",
    ):
        for env in range(N):
            np.testing.assert_array_equal(slots[key][2 + env, 0], slots[key][env, T], err_msg=key)


def test_rows_follow_the_env() -> None:
    """Row t + 1 holds the env's answer to the action chosen at row t (MonoBeast layout)."""
    _, slots = _run_actor()
    for env in range(N):
        # The whole trajectory of this env: unroll 0 rows 0..T, unroll 1 rows 1..T.
        rows = {key: np.concatenate([slots[key][env], slots[key][2 + env][1:]]) for key in slots}
        assert rows["done"][0]  # the first frame starts an episode
        t_in_episode = 0
        episode_return = 0.0
        for t in range(1, 2 * T + 1):
            action = rows["action"][t]
            assert rows["last_action"][t] == action
            assert rows["reward"][t] == float(action == 1)
            t_in_episode += 1
            episode_return += rows["reward"][t]
            assert rows["episode_return"][t] == episode_return
            assert rows["episode_step"][t] == t_in_episode
            if t_in_episode == EPISODE:  # the episode ended: the frame is the next first frame
                assert rows["done"][t]
                np.testing.assert_array_equal(rows["frame"][t], [0.0, 0.0])
                t_in_episode, episode_return = 0, 0.0
            else:
                assert not rows["done"][t]
                np.testing.assert_allclose(rows["frame"][t], [t_in_episode / EPISODE, action])


def test_behaviour_outputs_are_the_model_on_the_previous_row() -> None:
    torch.manual_seed(0)
    model = MLPAgent((2,), num_actions=2)
    _, slots = _run_actor()
    env = 0
    inputs = {
        "frame": torch.from_numpy(slots["frame"][env][:-1]).unsqueeze(1),
        "reward": torch.from_numpy(slots["reward"][env][:-1]).unsqueeze(1),
        "done": torch.from_numpy(slots["done"][env][:-1]).unsqueeze(1),
        "last_action": torch.from_numpy(slots["last_action"][env][:-1]).unsqueeze(1),
    }
    with torch.no_grad():
        outputs, _ = model(inputs)
    np.testing.assert_allclose(
        slots["policy_logits"][env][1:], outputs["policy_logits"][:, 0], rtol=1e-6
    )
    np.testing.assert_allclose(slots["baseline"][env][1:], outputs["baseline"][:, 0], rtol=1e-6)


def test_lstm_core_state_stored_before_row_zero() -> None:
    _, slots = _run_actor(use_lstm=True)
    assert "core_state_0" in slots and "core_state_1" in slots
    # The first unroll starts from zeros; the second from the state after T steps.
    assert not slots["core_state_0"][:2].any()
    assert slots["core_state_0"][2:].any()


@pytest.mark.parametrize("key", ["frame", "policy_logits", "core_state_0"])
def test_slot_specs_shapes(key: str) -> None:
    specs = slot_specs(
        (4, 84, 84), torch.uint8, num_actions=6, unroll_length=80, core_state_sizes=(519, 519)
    )
    expected = {
        "frame": ((81, 4, 84, 84), torch.uint8),
        "policy_logits": ((81, 6), torch.float32),
        "core_state_0": ((519,), torch.float32),
    }
    assert specs[key] == expected[key]
