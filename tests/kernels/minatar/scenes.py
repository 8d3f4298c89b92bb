"""Hand-built MinAtar scenes: a batched game put in a given state, stepped without sticky
actions (or with given draws), and the helpers the MinAtar tests share."""

from __future__ import annotations

import torch

from batchenv.kernels.minatar import MinAtarEnv


def scene(env_class: type[MinAtarEnv], **fields) -> MinAtarEnv:
    """A one-row game with no sticky actions whose state is a fresh start's with ``fields``
    (plain ints and nested lists) written over it."""
    env = env_class(1, seed=0, sticky_action_prob=0.0)
    env.set_state({key: torch.tensor([value]) for key, value in fields.items()})
    return env


def act(env: MinAtarEnv, action: int, **draws) -> tuple[float, bool]:
    """Step a one-row game with ``action`` (a minimal-set index); ``draws`` (lists, one row)
    replace the step's own draws (the sticky one is then 0.99: never sticky)."""
    given = None
    if draws:
        given = {"sticky": torch.tensor([[0.99]])}
        given.update(
            {name: torch.tensor([value], dtype=torch.float64) for name, value in draws.items()}
        )
    _, reward, terminated, _ = env.step(torch.tensor([action]), draws=given)
    return float(reward[0]), bool(terminated[0])


def row(env: MinAtarEnv, *keys: str) -> tuple:
    """The values of ``keys`` in row 0 (ints, bools or lists)."""
    state = env.get_state()
    return tuple(state[key][0].tolist() for key in keys)
