"""BatchVectorEnv as a drop-in for Gymnasium's vector envs (issue 20's defects 1-9).

Behaviours that involve the envs are tested with every env in a worker
(``parent_share=None``) and with the default ("auto", which puts cheap envs in the parent).
"""

import multiprocessing
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import error as gym_error
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from batchenv.errors import (
    BatchEnvError,
    ClosedError,
    EnvWorkerError,
    SpacesMismatchError,
    UnsupportedSpaceError,
)
from batchenv.vector import BatchVectorEnv

SHARES = [None, "auto"]
SHARE_IDS = ["workers", "auto"]


class SpaceEnv(gym.Env):
    """Returns samples of a given observation space; steps fail on a negative action."""

    def __init__(self, observation_space, action_space=None, sleep=0.0):
        self.observation_space = observation_space
        self.action_space = action_space or spaces.Discrete(3)
        self.sleep = sleep

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        time.sleep(self.sleep)
        return self.observation_space.sample(), {}

    def step(self, action):
        if action == 2:
            raise ValueError("action 2 is forbidden")
        time.sleep(self.sleep)
        return self.observation_space.sample(), 1.0, bool(action == 1), False, {}


def _cartpoles(n, **kwargs):
    return BatchVectorEnv([lambda: gym.make("CartPole-v1")] * n, **kwargs)


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_get_attr_of_wrapper_holding_a_lambda(share):
    """Defect 1: a reply plain pickle cannot carry (a lambda in a wrapper) still arrives."""

    def make():
        return gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 2 * r)

    envs = BatchVectorEnv([make] * 2, parent_share=share)
    try:
        specs = envs.get_attr("spec")
        assert [spec.id for spec in specs] == ["CartPole-v1"] * 2
        assert envs.get_attr("func")[0](3.0) == 6.0
    finally:
        envs.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_call_returns_values_and_calls_methods(share):
    """Defect 2: call() resolves through the wrappers; non-callables give their value."""
    envs = _cartpoles(2, parent_share=share)
    try:
        assert envs.call("gravity") == (9.8, 9.8)
        envs.reset(seed=0)
        assert envs.call("get_wrapper_attr", "length") == (0.5, 0.5)
    finally:
        envs.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_set_attr_changes_the_physics_as_sync_vector_env(share):
    """Defect 3: set_attr reaches the env under the wrappers, as SyncVectorEnv's does."""
    sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    ours = _cartpoles(2, parent_share=share)
    try:
        for envs in (sync, ours):
            envs.set_attr("gravity", [100.0, 9.8])
            envs.reset(seed=3)
        assert ours.get_attr("gravity") == (100.0, 9.8)
        actions = np.array([0, 1])
        for _ in range(3):
            np.testing.assert_array_equal(sync.step(actions)[0], ours.step(actions)[0])
    finally:
        sync.close()
        ours.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_np_random_seed_per_env(share):
    """Defect 4: np_random_seed is each env's seed."""
    envs = _cartpoles(4, parent_share=share)
    try:
        envs.reset(seed=42)
        assert envs.np_random_seed == (42, 43, 44, 45)
        envs.reset()
        assert envs.np_random_seed == (42, 43, 44, 45)
    finally:
        envs.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
@pytest.mark.parametrize(
    "space",
    [
        spaces.Discrete(5, dtype=np.int32),
        spaces.Discrete(4, start=1, dtype=np.int16),
        spaces.Box(0, 255, (2,), np.uint8),
        spaces.Text(6, min_length=2),
        spaces.OneOf([spaces.Discrete(3), spaces.Box(-1, 1, (2,))]),
        spaces.Tuple([spaces.Text(3), spaces.Discrete(2, dtype=np.int8)]),
    ],
    ids=lambda space: str(space)[:40],
)
def test_observations_keep_their_space(space, share):
    """Defects 5 and 7: dtypes kept; Text and OneOf batched as AsyncVectorEnv does."""
    envs = BatchVectorEnv([lambda: SpaceEnv(space)] * 3, parent_share=share)
    try:
        observ, _ = envs.reset(seed=0)
        assert observ in envs.observation_space
        observ, *_ = envs.step(np.zeros(3, np.int64))
        assert observ in envs.observation_space
    finally:
        envs.close()


def test_text_and_one_of_actions():
    """Defect 7: Text and OneOf action batches reach each env as its own value."""
    space = spaces.Tuple([spaces.Text(4), spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1)])])
    seen = []

    class Echo(SpaceEnv):
        def step(self, action):
            assert action in self.action_space, action
            return self.observation_space.sample(), 0.0, False, False, {"action": action}

    envs = BatchVectorEnv([lambda: Echo(space, action_space=space)] * 2, parent_share=1.0)
    try:
        envs.reset(seed=0)
        actions = (("ab", "xyz"), ((0, 1), (1, np.array([0.5], np.float32))))
        _, _, _, _, infos = envs.step(actions)
        seen = list(infos["action"])
        assert seen[0][0] == "ab" and seen[1][0] == "xyz"
        assert seen[0][1] == (0, 1) and seen[1][1][0] == 1
    finally:
        envs.close()


@pytest.mark.parametrize(
    "space",
    [spaces.Graph(spaces.Box(0, 1, (2,)), None), spaces.Sequence(spaces.Discrete(2))],
    ids=["Graph", "Sequence"],
)
def test_dynamic_spaces_refused_clearly(space):
    """Defect 7: Graph and Sequence stay unsupported, with Gymnasium's error type."""
    with pytest.raises(TypeError, match="dynamic shape") as caught:
        BatchVectorEnv([lambda: SpaceEnv(space)] * 2, parent_share=1.0)
    assert isinstance(caught.value, UnsupportedSpaceError)


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_async_halves_and_their_order(share):
    """Defect 6: reset_async/reset_wait/step_async/step_wait and their order errors."""
    envs = _cartpoles(2, parent_share=share)
    try:
        with pytest.raises(gym_error.NoAsyncCallError, match="without any prior call"):
            envs.reset_wait()
        envs.reset_async(seed=1)
        with pytest.raises(gym_error.AlreadyPendingCallError, match="pending call to `reset`"):
            envs.step_async(np.zeros(2, np.int64))
        observ, infos = envs.reset_wait()
        assert observ.shape == (2, 4) and infos == {}
        with pytest.raises(gym_error.NoAsyncCallError, match="`step_wait`"):
            envs.step_wait()
        envs.step_async(np.zeros(2, np.int64))
        with pytest.raises(gym_error.AlreadyPendingCallError, match="pending call to `step`"):
            envs.reset_async()
        assert len(envs.step_wait()) == 5
        envs.step_async(np.zeros(2, np.int64))
        with pytest.warns(UserWarning, match="Calling `close` while waiting"):
            envs.close(terminate=True)
    finally:
        envs.close()


def test_step_wait_timeout_is_multiprocessing_timeout_error():
    """Defect 6: a wait past its timeout raises what AsyncVectorEnv raises."""
    envs = BatchVectorEnv([lambda: SpaceEnv(spaces.Discrete(2), sleep=0.0)] * 2, parent_share=None)
    try:
        envs.reset(seed=0)
        envs.set_attr("sleep", 0.5)
        envs.step_async(np.zeros(2, np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.05)
    finally:
        envs.close(terminate=True)


@pytest.mark.parametrize("share", [None, 1.0], ids=["workers", "parent"])
def test_observation_modes(share):
    """Defect 7: observation_mode 'same' refuses differing spaces, 'different' batches
    them with batch_differing_spaces, anything else is refused."""
    boxes = [spaces.Box(0, i + 1, (2,)) for i in range(2)]
    fns = [lambda b=b: SpaceEnv(b) for b in boxes]
    with pytest.raises(ValueError, match="Invalid `observation_mode`"):
        BatchVectorEnv(fns, observation_mode="nope", parent_share=share)
    with pytest.raises(SpacesMismatchError, match="observation spaces are not equivalent"):
        BatchVectorEnv(fns, observation_mode="same", parent_share=share)
    envs = BatchVectorEnv(fns, observation_mode="different", parent_share=share)
    try:
        assert envs.single_observation_space == boxes[0]
        assert envs.observation_space == gym.vector.utils.batch_differing_spaces(boxes)
        observ, _ = envs.reset(seed=0)
        assert observ in envs.observation_space
    finally:
        envs.close()


@pytest.mark.parametrize("share", [None, 1.0], ids=["workers", "parent"])
def test_same_mode_mismatch_is_runtime_error(share):
    """Defect 8: sub-envs whose spaces cannot even share a block raise a RuntimeError
    (and a BatchEnvError, and a ValueError as batchenv raised before)."""
    fns = [lambda: gym.make("CartPole-v1"), lambda: gym.make("FrozenLake-v1")]
    gymnasium_words = (
        r"BatchVectorEnv\(\.\.\., observation_mode='same'\) however the sub-environments "
        r"observation spaces are not equivalent\. .*FrozenLake|Discrete\(16\)"
    )
    with pytest.raises(RuntimeError, match=gymnasium_words) as caught:
        BatchVectorEnv(fns, parent_share=share)
    assert isinstance(caught.value, SpacesMismatchError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_envs_are_handles_to_each_env(share):
    """``SyncVectorEnv.envs``: one handle per env (the env itself when the parent steps
    it), whose attribute reads come from the env (the vector env's own metadata says the
    autoreset mode, the env's does not)."""
    envs = BatchVectorEnv([lambda: gym.make("CartPole-v1")] * 2, parent_share=share)
    try:
        assert len(envs.envs) == 2
        assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert "autoreset_mode" not in envs.envs[0].metadata
        assert envs.envs[1].spec.id == "CartPole-v1"
        assert envs.envs[0].unwrapped.gravity == 9.8
        # An env in a worker reports the AttributeError as an EnvWorkerError naming it.
        with pytest.raises((AttributeError, EnvWorkerError), match="no_such_attribute"):
            _ = envs.envs[0].no_such_attribute
    finally:
        envs.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_gymnasium_error_types(share):
    """Defect 8: batchenv's errors are also the types Gymnasium's code catches."""
    envs = BatchVectorEnv([lambda: SpaceEnv(spaces.Discrete(2))] * 2, parent_share=share)
    envs.reset(seed=0)
    with pytest.raises(TypeError, match="dtype=np.bool_"):
        envs.reset(options={"reset_mask": np.array([1, 0])})
    with pytest.raises(ValueError, match="shape"):
        envs.reset(options={"reset_mask": np.array([True])})
    with pytest.raises(TypeError, match="scalar"):
        envs.step(0)
    with pytest.raises(ValueError, match="forbidden") as caught:
        envs.step(np.array([0, 2]))
    assert isinstance(caught.value, EnvWorkerError) and caught.value.env_index == 1
    with pytest.raises(gym_error.ClosedEnvironmentError) as closed:
        envs.reset()
    assert isinstance(closed.value, ClosedError) and isinstance(closed.value, BatchEnvError)
    envs.close()


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_actions_of_autoreset_rows_are_not_checked(share):
    """Defect 9: under NEXT_STEP the action of a row being reset is ignored, not refused."""
    envs = BatchVectorEnv(
        [lambda: SpaceEnv(spaces.Discrete(2), action_space=spaces.Discrete(2))] * 2,
        autoreset_mode=AutoresetMode.NEXT_STEP,
        parent_share=share,
    )
    try:
        envs.reset(seed=0)
        _, _, terminated, _, _ = envs.step(np.array([1, 0]))
        assert terminated.tolist() == [True, False]
        envs.step(np.array([7, 0]))  # row 0 is reset: its action is ignored
        with pytest.raises(ValueError, match="env 1 is outside"):
            envs.step(np.array([0, 7]))
    finally:
        envs.close()


class ErrorEnv(gym.Env):
    """Raises in reset with seed 1 and in step with an action >= 1 (Gymnasium's test)."""

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed == 1:
            raise ValueError("Error in reset")
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if action >= 1:
            raise ValueError(f"Error in step with {action}")
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("share", SHARES, ids=SHARE_IDS)
def test_failing_envs_are_logged_as_async_vector_env_logs_its_workers(share):
    """Every env that failed in the call gets AsyncVectorEnv's two error lines (through
    gymnasium.logger), then its last line; the error is raised with the env's type."""
    import warnings

    envs = BatchVectorEnv([ErrorEnv] * 3, parent_share=share)
    try:
        envs.reset(seed=[0, 0, 0])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="Error in step"):
                envs.step(np.array([0, 1, 2]))
    finally:
        envs.close()
    lines = [str(w.message.args[0]) for w in caught]
    assert len(lines) == 5, lines
    for k, env in ((0, 1), (2, 2)):
        assert lines[k] == (
            f"\x1b[31mERROR: Received the following error from Worker-{env} - Shutting it "
            "down\x1b[0m"
        )
        assert lines[k + 1].startswith("\x1b[31mERROR: Traceback (most recent call last):")
        assert f"ValueError: Error in step with {env}\n" in lines[k + 1]
    assert lines[4] == "\x1b[31mERROR: Raising the last exception back to the main process.\x1b[0m"
