"""``batchenv train ppo`` and ``batchenv evaluate RUN_DIR`` (the protocol of batchenv/cli.py).

    batchenv train ppo                          # PureJaxRL's CartPole config, compiled
    batchenv train ppo --seeds 8                # 8 independent agents in one program
    batchenv train ppo --preset pendulum        # Gaussian head, normalised rewards
    batchenv train ppo --env Acrobot-v1 --steps 1e6 --set learning_rate=3e-4
    batchenv evaluate runs/ppo-CartPole-v1-20261125-200000 --episodes 20

Every PPOConfig field is an option: ``--env`` (env_id), ``--num-envs``, ``--steps``
(total_timesteps), ``--seed``, ``--seeds``, ``--no-compile``, and ``--set key=value`` for the
rest. Precedence: the preset, then ``--set``, then the named options.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from batchenv.algorithms.train_cli import list_fields
from batchenv.cli_common import evaluation_line, fail, whole_number

from .config import PRESETS, PPOConfig, field_help, make_config

NAMED_OPTIONS = {
    "env": "env_id",
    "num_envs": "num_envs",
    "steps": "total_timesteps",
    "seed": "seed",
    "seeds": "seeds",
    "device": "device",
    "threads": "torch_threads",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train ppo`` (from PPOConfig's field docs)."""
    docs = field_help()
    parser.description = (
        "Train PPO (PureJaxRL / CleanRL) on an in-graph env: the rollout and the update run "
        "as compiled programs; --seeds K trains K independent agents at once."
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a preset of the options")
    parser.add_argument("--env", help=docs["env_id"])
    parser.add_argument("--num-envs", type=whole_number, help=docs["num_envs"])
    parser.add_argument("--steps", type=whole_number, help=docs["total_timesteps"])
    parser.add_argument("--seed", type=int, help=docs["seed"])
    parser.add_argument("--seeds", type=whole_number, help=docs["seeds"])
    parser.add_argument("--device", help=docs["device"])
    parser.add_argument("--threads", type=whole_number, help=docs["torch_threads"])
    parser.add_argument("--no-compile", action="store_true", help="run eagerly (debugging)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any PPOConfig field (repeatable), e.g. --set learning_rate=3e-4",
    )
    parser.add_argument("--logdir", help="the run directory (default runs/ppo-ENV-TIME)")
    list_fields(parser, PPOConfig, "PureJaxRL's ppo.py on CartPole")


def config_from_args(args: argparse.Namespace) -> PPOConfig:
    """The config the options describe; ValueError (one line) for a bad value."""
    preset = args.preset
    if preset is None and args.env:
        preset = next(
            (name for name, values in PRESETS.items() if values.get("env_id") == args.env), None
        )
    overrides = _parse_sets(args.set)
    for option, field in NAMED_OPTIONS.items():
        value = getattr(args, option, None)
        if value is not None:
            overrides[field] = value
    if args.no_compile:
        overrides["compile"] = False
    return make_config(preset, **overrides)


def _parse_sets(items: list[str]) -> dict:
    fields = {f.name: f.type for f in dataclasses.fields(PPOConfig)}
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(
                f"--set {item!r}: expected KEY=VALUE with KEY a PPO option "
                f"(one of {', '.join(fields)})"
            )
        kind = fields[key]
        if kind in ("bool", bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--set {key}: expected true or false, got {text!r}")
            values[key] = text.lower() in ("true", "1")
        elif kind in ("int", int):
            values[key] = whole_number(text)
        elif kind in ("float", float):
            values[key] = float(text)
        else:
            values[key] = text
    return values


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train ppo``; the exit status."""
    import torch

    from batchenv.run_dir import RunDirectory, default_path

    from .train import make_env
    from .train import train as run_training

    try:
        config = config_from_args(args)
        make_env(dataclasses.replace(config, num_envs=1, seeds=1))  # the env id, up front
    except (ValueError, TypeError) as error:
        return fail("train ppo", error)
    path = Path(args.logdir) if args.logdir else default_path("ppo", config.env_id)
    print(
        f"ppo: training {config.seeds} agent(s) on {config.env_id} for "
        f"{config.total_timesteps:,} env steps each; run directory {path}",
        flush=True,
    )
    run = RunDirectory(path, "ppo", config, seed=config.seed, env_id=config.env_id)
    from tqdm import tqdm

    bar = tqdm(total=config.num_updates, unit="update", mininterval=0.5)

    def on_update(update: int, returns: torch.Tensor, terms: dict) -> None:
        bar.update(1)
        finite = returns[torch.isfinite(returns)]
        if finite.numel():
            bar.set_postfix(ret=f"{float(finite.mean()):.1f}")
        if (update + 1) % config.log_every == 0 or update + 1 == config.num_updates:
            step = (update + 1) * config.batch_size
            row = {"mean_score": float(finite.mean()) if finite.numel() else math.nan}
            row.update({f"seed{k}_score": float(v) for k, v in enumerate(returns)})
            row.update({name: float(value.mean()) for name, value in terms.items()})
            run.log(step, "train", **row)

    try:
        result = run_training(config, on_update=on_update)
    except KeyboardInterrupt:
        bar.close()
        run.close()
        print(f"ppo: interrupted; metrics so far in {path} (PPO runs are not resumable)")
        return 130
    bar.close()
    run.save_checkpoint({"config": dataclasses.asdict(config), "ppo": result.ppo.state_dict()})
    run.plot_curve()
    run.close()
    last = result.returns[-10:]
    final = [float(x) for x in torch.nanmean(last, dim=0)]
    reached = (
        result.first_reaching(475.0, config.batch_size) if "CartPole" in config.env_id else None
    )
    print(
        f"ppo: done, {config.num_updates} updates x {config.seeds} agent(s) in "
        f"{result.run_seconds:.1f} s (compile {result.compile_seconds:.1f} s), "
        f"{result.steps_per_second:,.0f} steps/s; final return "
        f"{', '.join(f'{x:.1f}' for x in final)}"
        + (f"; first >= 475 at {reached}" if reached else "")
        + f"; {path}"
    )
    return 0


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv evaluate RUN_DIR`` for a PPO run."""
    parser.add_argument("--episodes", type=whole_number, default=10, help="episodes per agent")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="env seed of agent 0 (default: the run's seed + 1000)",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="sample actions from the policy, as in training (default: the most likely action)",
    )


def evaluate(run_dir: Path, args: argparse.Namespace) -> int:
    """One fresh episode in each of ``--episodes`` envs per agent of the run's checkpoint
    (the mode of the policy, or samples with ``--sample``); one line, nothing written."""
    import torch

    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.run_dir import CHECKPOINT_NAME

    from .train import make_env, make_ppo

    if args.episodes < 1:
        return fail("evaluate", f"--episodes must be >= 1, got {args.episodes}")
    target = run_dir / CHECKPOINT_NAME
    if not target.exists():
        return fail("evaluate", f"{run_dir} has no checkpoint yet; train it to the end first")
    state = torch.load(target, map_location="cpu", weights_only=False)
    config = dataclasses.replace(
        PPOConfig(**state["config"]), num_envs=args.episodes, compile=False
    )
    seed = config.seed + 1000 if args.seed is None else args.seed
    env: InGraphBatchEnv = make_env(dataclasses.replace(config, seed=seed))
    ppo = make_ppo(config, env)  # the run's seeds: --sample continues its action draws
    ppo.load_state_dict(state["ppo"])
    act = ppo.perform if args.sample else ppo.act_greedy
    observ = env.reset(torch.arange(env.num_envs))
    score = torch.zeros(env.num_envs)
    length = torch.zeros(env.num_envs)
    finished = torch.zeros(env.num_envs, dtype=torch.bool)
    while not bool(finished.all()):
        with torch.no_grad():
            action = act(observ)
        observ, reward, terminated, truncated = env.step(action)
        reward = reward.reshape(env.num_envs, -1).mean(-1)
        score += torch.where(finished, 0.0, reward)
        length += (~finished).float()
        finished |= terminated | truncated
    print(
        evaluation_line(
            run_dir,
            step=int(ppo.updates_done * config.num_steps * state["config"]["num_envs"]),
            mean_return=float(score.mean()),
            episodes=env.num_envs,
            mean_length=float(length.mean()),
        )
    )
    return 0
