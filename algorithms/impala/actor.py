"""IMPALA actor processes and the shared-memory unroll slots they fill.

A *slot* holds one env's unroll of ``T + 1`` rows in shared memory (``allocate_slots``).
Row ``t + 1`` holds what the env returned after the action chosen at row ``t`` (frame,
reward, done, episode return and length so far, that action as ``last_action``) and what the
agent computed at row ``t`` (``action``, ``policy_logits``, ``baseline``); row 0 repeats the
last row of the env's previous unroll (TorchBeast MonoBeast's layout). ``unroll_id`` is
``(actor, incarnation, sequence number)``; LSTM agents store the core state before row 0.

An actor owns a fixed set of slots. It talks to the learner process over its own pipe (no
lock shared between actors, so a killed actor can never leave one held):

- learner -> actor: ``("free", [slot, ...])`` slots it may fill, ``("stop",)``;
- actor -> learner: ``("full", [slot, ...])`` one unroll per env written;
  ``("error", traceback_text)`` just before it exits because something raised.

The actor ignores SIGINT (the learner handles Ctrl-C), dies with the learner
(PR_SET_PDEATHSIG plus a parent-pid check while it waits) and gives up with an error after
``actor_timeout`` seconds without a free slot.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from batchenv.workers.liveness import orphaned, pid_alive, set_parent_death_signal

from .models import forward_in

__all__ = ["ActorSpec", "Unrolling", "allocate_slots", "run_actor", "slot_specs", "write_row"]

_POLL_SECONDS = 0.2


def slot_specs(
    observation_shape: tuple[int, ...],
    observation_dtype: torch.dtype,
    num_actions: int,
    unroll_length: int,
    core_state_sizes: tuple[int, ...] = (),
) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape (without the slot dimension) and dtype of every per-slot tensor.

    >>> specs = slot_specs((4,), torch.float32, num_actions=2, unroll_length=80)
    >>> specs["frame"], specs["policy_logits"]
    (((81, 4), torch.float32), ((81, 2), torch.float32))
    """
    rows = unroll_length + 1
    specs = {
        "frame": ((rows, *observation_shape), observation_dtype),
        "reward": ((rows,), torch.float32),
        "done": ((rows,), torch.bool),
        "episode_return": ((rows,), torch.float32),
        "episode_step": ((rows,), torch.int32),
        "last_action": ((rows,), torch.int64),
        "policy_logits": ((rows, num_actions), torch.float32),
        "baseline": ((rows,), torch.float32),
        "action": ((rows,), torch.int64),
        "unroll_id": ((3,), torch.int64),
    }
    for k, size in enumerate(core_state_sizes):
        specs[f"core_state_{k}"] = ((size,), torch.float32)
    return specs


def allocate_slots(
    num_slots: int, specs: dict[str, tuple[tuple[int, ...], torch.dtype]]
) -> dict[str, torch.Tensor]:
    """Zeroed shared-memory tensors ``[num_slots, *shape]`` for every spec."""
    return {
        key: torch.zeros((num_slots, *shape), dtype=dtype).share_memory_()
        for key, (shape, dtype) in specs.items()
    }


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs besides its model, slots and pipe."""

    index: int
    """Actor index (0 .. num_actors - 1)."""
    incarnation: int
    """0 for the first process of this actor, +1 per restart."""
    constructors: tuple[Callable, ...]
    """One env constructor per env the actor steps."""
    env_workers: int
    """0: step the envs in the actor; N > 0: in a batchenv.make group of N workers."""
    unroll_length: int
    """Steps T per unroll."""
    seed: int
    """Env seeds are seed + j for env j; torch sampling is seeded from it too."""
    slots: tuple[int, ...]
    """The slots this actor may fill at start."""
    parent_pid: int
    """The learner process; the actor exits when it (or the process that started it) goes."""
    actor_timeout: float
    """Seconds to wait for free slots before giving up."""
    precision: str = "fp32"
    """The model's forward precision ('fp32' or 'bf16', see ImpalaConfig.precision)."""


def run_actor(spec: ActorSpec, model: torch.nn.Module, slots: dict[str, torch.Tensor], conn):
    """Process entry point: fill slots with unrolls until stopped (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal()  # our parent is the fork server, which exits with the learner
    parent = os.getppid()
    torch.set_num_threads(1)
    try:
        _Actor(spec, model, slots, conn, parent).run()
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
        sys.exit(1)
    finally:
        conn.close()


class _Actor:
    def __init__(self, spec: ActorSpec, model: torch.nn.Module, slots: dict, conn, parent=None):
        self.spec = spec
        self.parent = parent  # the process that started us, None: do not watch
        self.model = model
        self.conn = conn
        self.views = {key: tensor.numpy() for key, tensor in slots.items()}
        self.core_keys = sorted(key for key in slots if key.startswith("core_state_"))
        self.free: list[int] = list(spec.slots)
        self.stopped = False

    def _make_envs(self):
        from .envs import InProcessGroup, WorkerGroup

        constructors = list(self.spec.constructors)
        if self.spec.env_workers > 0:
            return WorkerGroup(constructors, self.spec.env_workers, self.spec.actor_timeout)
        return InProcessGroup(constructors)

    def _handle(self, message: tuple) -> None:
        if message[0] == "free":
            self.free.extend(message[1])
        elif message[0] == "stop":
            self.stopped = True
        else:
            raise RuntimeError(f"actor {self.spec.index}: unknown message {message!r}")

    def _take_slots(self, count: int) -> list[int] | None:
        """``count`` free slots, or None once told to stop."""
        deadline = time.monotonic() + self.spec.actor_timeout
        while self.conn.poll(0):
            self._handle(self.conn.recv())
        while len(self.free) < count and not self.stopped:
            if self.conn.poll(_POLL_SECONDS):
                self._handle(self.conn.recv())
                continue
            if self.parent is not None and (
                orphaned(self.parent) or not pid_alive(self.spec.parent_pid)
            ):
                os._exit(1)  # orphaned: the learner process is gone
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"actor {self.spec.index}: no free slot for {self.spec.actor_timeout} s "
                    f"(has {len(self.free)} of the {count} it needs); is the learner stuck?"
                )
        if self.stopped:
            return None
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def run(self) -> None:
        spec = self.spec
        torch.manual_seed(spec.seed)
        envs = self._make_envs()
        try:
            self._loop(envs)
        finally:
            envs.close()

    def _loop(self, envs) -> None:
        spec, views = self.spec, self.views
        num = len(spec.constructors)
        unrolling = Unrolling(envs, self.model, spec.unroll_length, spec.seed, spec.precision)
        sequence = 0
        while True:
            slots = self._take_slots(num)
            if slots is None:
                return
            rows = np.asarray(slots)
            unrolling.fill(views, rows, self.core_keys)
            views["unroll_id"][rows] = [
                (spec.index, spec.incarnation, sequence * num + j) for j in range(num)
            ]
            sequence += 1
            self.conn.send(("full", slots))


class Unrolling:
    """An actor's envs and acting model between unrolls: :meth:`fill` writes the next
    ``[T + 1]`` unroll of every env (row 0 repeating the previous unroll's last row).

    Used by the actor processes of sync mode (into shared-memory slots) and by the Ray
    actors of distributed mode (into arrays returned to the learner).

    Args:
        envs: the actor's envs (``reset(seed)``, ``step(actions) -> (observ, reward,
            done)``, autoresetting; see envs.py).
        model: the acting model (its weights may change between calls).
        unroll_length: steps T per unroll.
        seed: env ``j`` is reset with ``seed + j``.
        precision: the model's forward precision.
    """

    def __init__(self, envs, model, unroll_length: int, seed: int, precision: str = "fp32"):
        self.envs, self.model = envs, model
        self.unroll_length, self.precision = unroll_length, precision
        self.observ = envs.reset(seed=seed)
        num = len(self.observ)
        self.reward = np.zeros(num, np.float32)
        self.done = np.ones(num, np.bool_)
        self.episode_return = np.zeros(num, np.float32)
        self.episode_step = np.zeros(num, np.int32)
        self.last_action = np.zeros(num, np.int64)
        self.core_state = model.initial_state(num)
        with torch.no_grad():
            self.agent, _ = forward_in(precision, model, self._inputs(), self.core_state)

    def fill(self, views: dict, rows: np.ndarray, core_keys: list[str]) -> None:
        """Write one unroll per env into ``views[key][rows]`` (``[slot, T + 1, ...]``) and
        the core state before row 0 into ``views[core_key][rows]``."""
        for k, key in enumerate(core_keys):
            views[key][rows] = self.core_state[k][0].numpy()
        self._write(views, rows, 0)
        for t in range(self.unroll_length):
            with torch.inference_mode():
                self.agent, self.core_state = forward_in(
                    self.precision, self.model, self._inputs(), self.core_state
                )
            action = self.agent["action"][0].numpy()
            self.observ, self.reward, self.done = self.envs.step(action)
            self.episode_return += self.reward
            self.episode_step += 1
            self.last_action = action
            self._write(views, rows, t + 1)
            if self.done.any():
                self.episode_return[self.done] = 0.0
                self.episode_step[self.done] = 0

    def _write(self, views: dict, rows: np.ndarray, t: int) -> None:
        write_row(
            views, rows, t, self.observ, self.reward, self.done, self.episode_return,
            self.episode_step, self.last_action, self.agent,
        )  # fmt: skip

    def _inputs(self) -> dict[str, torch.Tensor]:
        return {
            "frame": torch.from_numpy(self.observ).unsqueeze(0),
            "reward": torch.from_numpy(self.reward).unsqueeze(0),
            "done": torch.from_numpy(self.done).unsqueeze(0),
            "last_action": torch.from_numpy(self.last_action).unsqueeze(0),
        }


def write_row(
    views, rows, t, observ, reward, done, episode_return, episode_step, last_action, agent
) -> None:
    """Write row ``t`` of the unrolls ``rows`` of ``views`` (key -> ``[slot, T + 1, ...]``
    arrays): what the envs returned and the agent outputs (``[1, envs, ...]``) of the step
    before, which chose ``last_action``."""
    views["frame"][rows, t] = observ
    views["reward"][rows, t] = reward
    views["done"][rows, t] = done
    views["episode_return"][rows, t] = episode_return
    views["episode_step"][rows, t] = episode_step
    views["last_action"][rows, t] = last_action
    views["action"][rows, t] = np.asarray(agent["action"][0])
    views["policy_logits"][rows, t] = np.asarray(agent["policy_logits"][0])
    views["baseline"][rows, t] = np.asarray(agent["baseline"][0])
