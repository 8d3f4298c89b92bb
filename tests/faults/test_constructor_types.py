"""An env constructor that raises: the caller catches the constructor's own exception
type, as ``gymnasium.make`` and Gymnasium's vector envs raise it (``except ValueError``,
``except DependencyNotInstalled``), from an EnvWorkerError that still names the worker
and the env, the worker's traceback chained. Every way of building a batch alike.
"""

from __future__ import annotations

import re

import gymnasium
import pytest

import batchenv
from batchenv import BatchEnv, ExternalProcess
from batchenv.errors import EnvWorkerError, RemoteTraceback
from batchenv.vector import BatchVectorEnv

MUJOCO_HINT = 'MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`'


def level_does_not_exist():
    raise ValueError("level 7 does not exist")


def needs_mujoco():
    raise gymnasium.error.DependencyNotInstalled(MUJOCO_HINT)


BUILDS = {
    "shm": lambda constructor: batchenv.make(constructor, 4, num_workers=2),
    "per-env": lambda constructor: BatchEnv([ExternalProcess(constructor) for _ in range(2)]),
    "async": lambda constructor: batchenv.make(constructor, 4, num_workers=2, batch_size=2),
    "vector": lambda constructor: BatchVectorEnv([constructor] * 2, parent_share=None),
    "parent": lambda constructor: batchenv.make(constructor, 2, parent_share=1.0),
}


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize(
    "constructor, kind, message",
    [
        (level_does_not_exist, ValueError, "level 7 does not exist"),
        (needs_mujoco, gymnasium.error.DependencyNotInstalled, MUJOCO_HINT),
    ],
    ids=["ValueError", "DependencyNotInstalled"],
)
def test_a_constructor_error_is_also_of_the_constructors_type(build, constructor, kind, message):
    with pytest.raises(kind) as info:
        BUILDS[build](constructor)
    error = info.value
    assert isinstance(error, EnvWorkerError)
    name = constructor.__name__
    if build == "parent":
        where = rf"env 0 \(.*{name}, built in the parent process: parent_share\)"
        assert error.worker is None
        assert error.__cause__.__traceback__ is not None  # raised right here
    else:
        where = rf"worker 0 \(.*{name}, env 0\)"
        assert error.worker == 0
        assert isinstance(error.__cause__.__cause__, RemoteTraceback)
        assert f"in {name}" in error.__cause__.__cause__.text  # the worker's traceback
    assert (error.env_index, error.step) == (0, 0)
    expected = rf"{where} raised {kind.__name__} while being built: {re.escape(message)}"
    assert re.fullmatch(expected, str(error)), str(error)
    assert type(error.__cause__) is kind and str(error.__cause__) == message
    assert error.remote_type == kind.__name__


def test_a_gymnasium_id_with_a_wrong_keyword_raises_gymnasiums_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'") as info:
        batchenv.make("CartPole-v1", 2, num_workers=1, bogus=1)
    assert isinstance(info.value, EnvWorkerError)
    assert "worker 0 (gymnasium.envs.registration.make('CartPole-v1', bogus=1)" in str(info.value)
