"""One measured run of ``benchmarks/training_loop.py``, in a fresh interpreter.

The harness starts ``python -c "import training_loop_child; training_loop_child.main()" SPEC``
with this folder on ``PYTHONPATH`` (so that worker processes can import the shims below by
name) and a scratch folder as the working directory (CleanRL writes ``runs/`` there). SPEC is
a JSON object; the run prints CleanRL-style ``global_step=..., episodic_return=...`` lines
and ends with one ``RESULT {json}`` line: ``seconds`` (wall time of the run inside this
interpreter: env construction, training, close; not the interpreter start or the imports),
``steps`` (env steps), ``loop_sps`` (steps/s of the training loop alone), or
``unavailable`` with a reason.

Two kinds of run:

* ``cleanrl``: an unmodified CleanRL script through :func:`run_cleanrl`, with
  ``gymnasium.vector.SyncVectorEnv`` replaced by the vector class under test and the
  Gymnasium 1.x shims of :func:`install_wrapper_shims` and :class:`FinalInfo`.
* ``own``: the PPO loop of :func:`run_own_ppo` on a lockstep VectorEnv or on batchenv's
  async send/recv API.
"""

from __future__ import annotations

import functools
import inspect
import json
import runpy
import sys
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

RESULT_PREFIX = "RESULT "
VECTOR_CLASSES = ("sync", "batch", "async")


def main() -> None:
    spec = json.loads(sys.argv[-1])
    if spec["kind"] == "cleanrl":
        result = run_cleanrl(spec)
    else:
        result = run_own_ppo(spec)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# -- vector classes -------------------------------------------------------------------------

_ORIGINAL_SYNC = gym.vector.SyncVectorEnv


def vector_class(name: str):
    """The class under test: "sync", "async" (Gymnasium's) or "batch" (BatchVectorEnv)."""
    if name == "sync":
        return _ORIGINAL_SYNC
    if name == "async":
        return gym.vector.AsyncVectorEnv
    if name == "batch":
        from batchenv.vector import BatchVectorEnv

        return BatchVectorEnv
    raise ValueError(f"unknown vector class {name!r}; expected one of {VECTOR_CLASSES}")


# -- CleanRL's Gymnasium 1.x incompatibilities, shimmed from outside the scripts -------------


class TransformObservation(gym.wrappers.TransformObservation):
    """Gymnasium 1.x made ``observation_space`` a required argument; CleanRL passes two.

    ``None`` keeps the wrapped env's space, which is what Gymnasium 0.29 did.
    """

    def __init__(self, env, func, observation_space=None):
        super().__init__(env, func, observation_space)


def install_wrapper_shims() -> None:
    """Patch ``gymnasium.wrappers`` so that CleanRL's env thunks build under Gymnasium 1.x."""
    gym.wrappers.TransformObservation = TransformObservation


class ShimmedEnvFn:
    """An env constructor that installs the wrapper shims first, in whichever process it runs.

    BatchVectorEnv and AsyncVectorEnv call CleanRL's thunks in worker processes that never saw
    the parent's patches; this class is pickled by name (this module is on ``PYTHONPATH``),
    the thunk inside it by value.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self):
        install_wrapper_shims()
        return self.fn()


class FinalInfo(gym.vector.VectorWrapper):
    """Adds Gymnasium 0.29's ``infos["final_info"]`` list, which CleanRL reads, to each step.

    Gymnasium 1.x vector envs return the per-env ``RecordEpisodeStatistics`` info merged into
    arrays (``infos["episode"]["r"][i]`` with mask ``infos["_episode"]``) on the step that ends
    an episode, and no ``final_info``, so CleanRL would log no episode at all. This rebuilds
    the old layout: one entry per env, ``{"episode": {"r", "l", "t"}}`` or None.
    """

    def step(self, actions):
        observ, reward, terminated, truncated, infos = self.env.step(actions)
        if "episode" in infos:
            infos = dict(infos)
            episode, mask = infos["episode"], infos["_episode"]
            infos["final_info"] = [
                {"episode": {key: value[i] for key, value in episode.items()}} if mask[i] else None
                for i in range(self.num_envs)
            ]
        return observ, reward, terminated, truncated, infos


def patched_vector_env(cls, kwargs: dict):
    """What ``gymnasium.vector.SyncVectorEnv`` becomes inside the CleanRL script."""

    def make(env_fns, **script_kwargs):
        env_fns = [ShimmedEnvFn(fn) for fn in env_fns]
        return FinalInfo(cls(env_fns, **kwargs, **script_kwargs))

    return make


def run_cleanrl(spec: dict) -> dict:
    """Run ``spec["script"]`` as ``__main__`` with ``spec["argv"]`` and the class swapped."""
    import torch.utils.tensorboard  # noqa: F401  (imported by the script; not timed)
    import tyro  # noqa: F401

    cls = vector_class(spec["vector"])
    install_wrapper_shims()
    gym.vector.SyncVectorEnv = patched_vector_env(cls, spec.get("vector_kwargs", {}))
    sys.argv = [spec["script"], *spec["argv"]]
    begin = time.perf_counter()
    script_globals = runpy.run_path(spec["script"], run_name="__main__")
    seconds = time.perf_counter() - begin
    return {"seconds": seconds, "steps": int(script_globals["global_step"])}


# -- the own PPO loop -----------------------------------------------------------------------


class Agent(nn.Module):
    """CleanRL's continuous-action agent: 64-64 tanh actor and critic, state-free log std."""

    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, 64), nn.Tanh(), _layer(64, 64), nn.Tanh(), _layer(64, 1, 1.0)
        )
        self.actor_mean = nn.Sequential(
            _layer(obs_dim, 64), nn.Tanh(), _layer(64, 64), nn.Tanh(), _layer(64, act_dim, 0.01)
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def forward(self, observ, action=None):
        mean = self.actor_mean(observ)
        dist = torch.distributions.Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = dist.sample()
        value = self.critic(observ).squeeze(-1)
        return action, dist.log_prob(action).sum(-1), dist.entropy().sum(-1), value


def _layer(inputs: int, outputs: int, std: float = 2**0.5) -> nn.Linear:
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class ObservNorm:
    """Running mean and variance of observations (as Gymnasium's NormalizeObservation), clip 10."""

    def __init__(self, dim: int):
        self.mean, self.var, self.count = np.zeros(dim), np.ones(dim), 1e-4

    def __call__(self, observ: np.ndarray) -> np.ndarray:
        batch_mean, batch_var, n = observ.mean(0), observ.var(0), len(observ)
        delta, total = batch_mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var, self.count = m2 / total, total
        return np.clip((observ - self.mean) / np.sqrt(self.var + 1e-8), -10, 10).astype(np.float32)


class LockstepSource:
    """send/recv over a Gymnasium VectorEnv: every env, every step (NEXT_STEP autoreset)."""

    def __init__(self, envs, seed: int):
        self.envs, self.seed = envs, seed
        self.env_ids = np.arange(envs.num_envs)
        self._first = None
        self._actions = None

    def start(self) -> None:
        observ, _ = self.envs.reset(seed=self.seed)
        zeros = np.zeros(self.envs.num_envs)
        self._first = (observ, zeros, zeros.astype(bool), zeros.astype(bool), self.env_ids)

    def recv(self):
        if self._first is not None:
            result, self._first = self._first, None
            return result
        observ, reward, terminated, truncated, _ = self.envs.step(self._actions)
        return observ, reward, terminated, truncated, self.env_ids

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        assert np.array_equal(env_ids, self.env_ids), "lockstep sends every env in order"
        self._actions = actions

    def close(self) -> None:
        self.envs.close()


class AsyncSource:
    """batchenv's EnvPool-style API: ``async_reset()``, ``recv()``, ``send(actions, env_ids)``."""

    def __init__(self, env, seed: int):
        self.env, self.seed = env, seed

    def start(self) -> None:
        if "seed" in inspect.signature(self.env.async_reset).parameters:
            self.env.async_reset(seed=self.seed)  # env i gets seed + i
        else:
            self.env.async_reset()

    def recv(self):
        observ, reward, terminated, truncated, info = self.env.recv()
        return observ, reward, terminated, truncated, np.asarray(info["env_id"])

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        self.env.send(actions, env_ids)

    def close(self) -> None:
        self.env.close()


def make_source(spec: dict):
    """The env source of an own-loop run, or a string saying why it is unavailable."""
    mode, env_id, num_envs = spec["mode"], spec["env_id"], spec["num_envs"]
    kwargs = spec.get("vector_kwargs", {})
    if mode == "api":
        import batchenv

        if "batch_size" not in inspect.signature(batchenv.make).parameters:
            return "async API not available (batchenv.make has no batch_size)"
        try:
            env = batchenv.make(env_id, num_envs=num_envs, batch_size=num_envs // 2, **kwargs)
        except TypeError as error:
            return f"async API not available ({error})"
        return AsyncSource(env, spec["seed"])
    env_fns = [functools.partial(gym.make, env_id)] * num_envs
    return LockstepSource(vector_class(mode)(env_fns, **kwargs), spec["seed"])


class Rollout:
    """Per-env transition buffers keyed by env id, filled from recv batches in any order.

    Slot k of env i holds the observation the policy acted on, its action, log-prob and
    value, and (once that env's next result arrives) the reward and whether the episode
    ended. A row that comes back terminated or truncated gets a dummy action (the next send
    resets it) and no slot; the reset observation that follows starts the next slot. A
    rollout is ready when every env has acted on slot T: slots 0..T-1 are trained on and
    slot T's value bootstraps them. Envs keep stepping meanwhile; slots past T carry over.
    """

    def __init__(self, num_envs: int, num_steps: int, obs_dim: int, act_dim: int):
        capacity = 2 * num_steps + 2
        self.num_steps = num_steps
        self.observ = np.zeros((num_envs, capacity, obs_dim), np.float32)
        self.action = np.zeros((num_envs, capacity, act_dim), np.float32)
        self.logprob = np.zeros((num_envs, capacity), np.float32)
        self.value = np.zeros((num_envs, capacity), np.float32)
        self.reward = np.zeros((num_envs, capacity), np.float32)
        self.done = np.zeros((num_envs, capacity), np.float32)
        self.acted = np.zeros(num_envs, np.int64)
        self.completed = np.zeros(num_envs, np.int64)

    def complete(self, env_ids, reward, done) -> np.ndarray:
        """Record the results of the pending transitions among ``env_ids``; their mask."""
        pending = self.acted[env_ids] > self.completed[env_ids]
        rows = env_ids[pending]
        self.reward[rows, self.completed[rows]] = reward[pending]
        self.done[rows, self.completed[rows]] = done[pending]
        self.completed[rows] += 1
        return pending

    def act(self, env_ids, observ, action, logprob, value) -> None:
        slots = self.acted[env_ids]
        if len(slots) and slots.max() >= self.observ.shape[1]:
            raise RuntimeError("an env ran a whole rollout ahead of the others")
        self.observ[env_ids, slots] = observ
        self.action[env_ids, slots] = action
        self.logprob[env_ids, slots] = logprob
        self.value[env_ids, slots] = value
        self.acted[env_ids] += 1

    def ready(self) -> bool:
        return bool((self.acted > self.num_steps).all())

    def take(self, gamma: float, gae_lambda: float) -> dict[str, torch.Tensor]:
        """Slots 0..T-1 of every env with GAE advantages; later slots move to the front."""
        steps = self.num_steps
        advantages = np.zeros((len(self.acted), steps), np.float32)
        last = 0.0
        for t in reversed(range(steps)):
            nonterminal = 1.0 - self.done[:, t]
            delta = self.reward[:, t] + gamma * self.value[:, t + 1] * nonterminal
            last = delta - self.value[:, t] + gamma * gae_lambda * nonterminal * last
            advantages[:, t] = last
        batch = {
            "observ": self.observ[:, :steps].reshape(-1, self.observ.shape[-1]),
            "action": self.action[:, :steps].reshape(-1, self.action.shape[-1]),
            "logprob": self.logprob[:, :steps].reshape(-1),
            "value": self.value[:, :steps].reshape(-1),
            "advantage": advantages.reshape(-1),
        }
        batch = {key: torch.from_numpy(value.copy()) for key, value in batch.items()}
        batch["return"] = batch["advantage"] + batch["value"]
        for buffer in (self.observ, self.action, self.logprob, self.value, self.reward, self.done):
            buffer[:, :-steps] = buffer[:, steps:].copy()
        self.acted -= steps
        self.completed -= steps
        return batch


# CleanRL's ppo_continuous_action.py hyperparameters (num_steps is the spec's).
PPO = dict(lr=3e-4, gamma=0.99, gae_lambda=0.95, minibatches=32, epochs=10, clip=0.2)
PPO.update(vf_coef=0.5, max_grad_norm=0.5)


def ppo_update(agent: Agent, optimizer, batch: dict[str, torch.Tensor]) -> None:
    """CleanRL's clipped PPO update: normalised advantages, clipped value loss, no entropy."""
    size = len(batch["advantage"])
    minibatch = size // PPO["minibatches"]
    for _ in range(PPO["epochs"]):
        order = torch.randperm(size)
        for start in range(0, size - minibatch + 1, minibatch):
            mb = {key: value[order[start : start + minibatch]] for key, value in batch.items()}
            _, logprob, _, value = agent(mb["observ"], mb["action"])
            ratio = (logprob - mb["logprob"]).exp()
            adv = (mb["advantage"] - mb["advantage"].mean()) / (mb["advantage"].std() + 1e-8)
            clipped = ratio.clamp(1 - PPO["clip"], 1 + PPO["clip"])
            pg_loss = torch.max(-adv * ratio, -adv * clipped).mean()
            value_clipped = mb["value"] + (value - mb["value"]).clamp(-PPO["clip"], PPO["clip"])
            v_loss = torch.max((value - mb["return"]) ** 2, (value_clipped - mb["return"]) ** 2)
            loss = pg_loss + PPO["vf_coef"] * 0.5 * v_loss.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), PPO["max_grad_norm"])
            optimizer.step()


def run_own_ppo(spec: dict) -> dict:
    """The own PPO loop on ``spec["mode"]``: a lockstep VectorEnv or the async API ("api")."""
    torch.manual_seed(spec["seed"])
    begin = time.perf_counter()
    source = make_source(spec)
    if isinstance(source, str):
        return {"unavailable": source}
    probe = gym.make(spec["env_id"])
    obs_dim, space = probe.observation_space.shape[0], probe.action_space
    probe.close()
    learner = Learner(Agent(obs_dim, space.shape[0]), space, ObservNorm(obs_dim))
    rollout = Rollout(spec["num_envs"], spec["num_steps"], obs_dim, space.shape[0])
    episodes = Episodes(spec["num_envs"])
    rows, iterations = 0, spec["iterations"]
    loop_begin = time.perf_counter()
    source.start()
    for iteration in range(iterations):
        learner.anneal(iteration / iterations)
        while not rollout.ready():
            rows += collect(source, rollout, learner, episodes, rows)
        learner.update(rollout.take(PPO["gamma"], PPO["gae_lambda"]))
    loop_seconds = time.perf_counter() - loop_begin
    source.close()
    steps = rows - spec["num_envs"]  # the first result of every env is its reset
    return {
        "seconds": time.perf_counter() - begin,
        "steps": steps,
        "loop_sps": steps / loop_seconds,
    }


class Learner:
    """The policy, its optimizer and the observation normaliser."""

    def __init__(self, agent: Agent, action_space: gym.spaces.Box, normalize: ObservNorm):
        self.agent, self.space, self.normalize = agent, action_space, normalize
        self.optimizer = torch.optim.Adam(agent.parameters(), lr=PPO["lr"], eps=1e-5)

    def anneal(self, fraction_done: float) -> None:
        self.optimizer.param_groups[0]["lr"] = PPO["lr"] * (1.0 - fraction_done)

    def act(self, observ: np.ndarray):
        """Normalised observations, and the policy's action, log-prob and value as numpy."""
        observ = self.normalize(observ)
        with torch.no_grad():
            action, logprob, _, value = self.agent(torch.from_numpy(observ))
        return observ, action.numpy(), logprob.numpy(), value.numpy()

    def env_actions(self, action: np.ndarray, live: np.ndarray) -> np.ndarray:
        """Actions clipped to the space (CleanRL's ClipAction); zeros for rows being reset."""
        clipped = np.clip(action, self.space.low, self.space.high)
        return np.where(live[:, None], clipped, 0.0).astype(self.space.dtype)

    def update(self, batch: dict[str, torch.Tensor]) -> None:
        ppo_update(self.agent, self.optimizer, batch)


class Episodes:
    """Undiscounted episode returns per env id, printed as CleanRL prints them."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)

    def add(self, env_ids, reward, done, global_step: int) -> None:
        self.returns[env_ids] += reward
        for env_id in env_ids[done]:
            print(f"global_step={global_step}, episodic_return={self.returns[env_id]}")
            self.returns[env_id] = 0.0


def collect(source, rollout: Rollout, learner: Learner, episodes: Episodes, rows: int) -> int:
    """One recv and one send: file the results, act on the live rows; rows received."""
    observ, reward, terminated, truncated, env_ids = source.recv()
    rows += len(env_ids)
    done = terminated | truncated
    pending = rollout.complete(env_ids, reward, done)
    episodes.add(env_ids[pending], reward[pending], done[pending], rows)
    observ, action, logprob, value = learner.act(observ)
    live = ~done
    rollout.act(env_ids[live], observ[live], action[live], logprob[live], value[live])
    source.send(learner.env_actions(action, live), env_ids)
    return len(env_ids)
