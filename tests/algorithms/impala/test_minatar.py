"""IMPALA on MinAtar: the MinAtar paper's net, its choice for MinAtar ids, short runs of both
modes through the CLI, the experiment spec, and a learning check on Breakout."""

from __future__ import annotations

import csv
import doctest
import json
import re
from pathlib import Path

import pytest
import torch

from batchenv.algorithms.impala import models
from batchenv.algorithms.impala.actor_pool import prestart
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.models import AtariNet, MinAtarNet
from batchenv.algorithms.impala.trainer import build_model
from batchenv.cli import main
from batchenv.experiment.spec import load_spec

prestart()  # the fork server and resource tracker outlive the tests (see test_trainers.py)

SPECS = Path(__file__).resolve().parents[3] / "specs"

# (channels, minimal actions) of MinAtar games, as the MinAtar/<Game>-v1 ids give them.
GAMES = {"Breakout": (4, 3), "SpaceInvaders": (6, 4), "Seaquest": (10, 6)}


def _inputs(T: int, B: int, channels: int, num_actions: int) -> dict[str, torch.Tensor]:
    return {
        "frame": torch.rand(T, B, 10, 10, channels) < 0.2,
        "reward": torch.randn(T, B),
        "done": torch.zeros(T, B, dtype=torch.bool),
        "last_action": torch.randint(0, num_actions, (T, B)),
    }


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("game", list(GAMES))
@pytest.mark.parametrize("use_lstm", [False, True], ids=["ff", "lstm"])
def test_net_shapes_and_parameter_count(game: str, use_lstm: bool) -> None:
    channels, num_actions = GAMES[game]
    net = MinAtarNet((10, 10, channels), num_actions, use_lstm=use_lstm)
    T, B = 3, 5
    outputs, state = net(_inputs(T, B, channels, num_actions), net.initial_state(B))
    assert outputs["policy_logits"].shape == (T, B, num_actions)
    assert outputs["baseline"].shape == (T, B)
    assert outputs["action"].shape == (T, B)
    # conv 16 3x3 (no padding: 8x8 out), fully connected 128, then the heads on the
    # features, the clipped reward and the one-hot last action.
    core = 128 + num_actions + 1
    expected = (16 * channels * 9 + 16) + (16 * 8 * 8 * 128 + 128)
    if use_lstm:
        expected += 4 * core * (core + core) + 2 * 4 * core
        assert [s.shape for s in state] == [(1, B, core)] * 2
    else:
        assert state == ()
    expected += (core * num_actions + num_actions) + (core + 1)
    assert sum(p.numel() for p in net.parameters()) == expected


def test_breakout_net_has_the_documented_parameter_count() -> None:
    assert sum(p.numel() for p in MinAtarNet((10, 10, 4), 3).parameters()) == 132_324


def test_bool_frames_are_read_as_zero_one_channels_last() -> None:
    net = MinAtarNet((10, 10, 6), 4).eval()
    inputs = _inputs(2, 3, 6, 4)
    outputs, _ = net(inputs)
    as_float, _ = net({**inputs, "frame": inputs["frame"].float()})
    torch.testing.assert_close(outputs["policy_logits"], as_float["policy_logits"])
    # The same numbers by hand: channel c of the conv's input is frame[..., c].
    frames = inputs["frame"].reshape(6, 10, 10, 6).permute(0, 3, 1, 2).float()
    conv, linear = net.torso[0][0], net.torso[1]
    features = torch.relu(linear(torch.relu(conv(frames)).flatten(1)))
    last_action = torch.nn.functional.one_hot(inputs["last_action"].reshape(6), 4).float()
    reward = inputs["reward"].reshape(6, 1).clamp(-1, 1)
    logits = net.head.policy(torch.cat([features, reward, last_action], dim=-1))
    torch.testing.assert_close(outputs["policy_logits"].reshape(6, 4), logits)
    assert torch.equal(outputs["action"].reshape(6), logits.argmax(-1))


def test_uint8_cells_are_read_as_zero_one_not_pixels() -> None:
    """minatar 1.0.15's gym ids declare ``Box(0, 1, bool)``, its repository's later code
    ``Box(0, 1, uint8)``; IMPALA's slots take that dtype. Either way the net must read the
    0/1 cells as 0.0 / 1.0, and not divide uint8 cells by 255 as Atari pixels."""
    net = MinAtarNet((10, 10, 4), 3).eval()
    inputs = _inputs(2, 3, 4, 3)
    as_uint8, _ = net({**inputs, "frame": inputs["frame"].to(torch.uint8)})
    as_bool, _ = net(inputs)
    torch.testing.assert_close(as_uint8["policy_logits"], as_bool["policy_logits"])
    torch.testing.assert_close(as_uint8["baseline"], as_bool["baseline"])


def test_net_refuses_frames_that_are_not_channels_last_images() -> None:
    with pytest.raises(
        ValueError, match=r"must be MinAtar's channels-last \(H, W, C\), got \(400,\)"
    ):
        MinAtarNet((400,), 3)
    net = MinAtarNet((10, 10, 4), 3)
    bad = {**_inputs(1, 2, 4, 3), "frame": torch.zeros(1, 2, 4, 10, 10, dtype=torch.bool)}
    with pytest.raises(
        ValueError, match=r"frame must be \[T, B, \*\(10, 10, 4\)\], got \(1, 2, 4, 10, 10\)"
    ):
        net(bad)


@pytest.mark.parametrize(
    "env, model, expected",
    [
        ("MinAtar/Breakout-v1", "auto", MinAtarNet),
        ("MinAtar/SpaceInvaders-v0", "auto", MinAtarNet),
        ("SomeImageEnv-v0", "minatar", MinAtarNet),
        ("SomeImageEnv-v0", "auto", AtariNet),
    ],
    ids=["auto-breakout", "auto-space-invaders", "config", "auto-other-images"],
)
def test_build_model_picks_the_minatar_net(env: str, model: str, expected: type) -> None:
    shape = (10, 10, 4) if expected is MinAtarNet else (4, 84, 84)
    config = ImpalaConfig(env=env, model=model)
    assert type(build_model(config, shape, 3)) is expected


def test_models_docstring_examples() -> None:
    result = doctest.testmod(models, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cli_trains_minatar_breakout(mode: str, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    flags = ["--mode", mode, "--num-actors", "2", "--envs-per-actor", "4", "--unroll-length",
             "20", "--batch-size", "4", "--steps", "2000", "--log-every", "400",
             "--no-progress", "--logdir", str(run_dir)]  # fmt: skip
    assert main(["train", "impala", "--env", "MinAtar/Breakout-v1", *flags]) == 0
    out = capsys.readouterr().out
    assert f"impala {mode} MinAtar/Breakout-v1: 2 actors x 4 envs, T=20, B=4" in out
    assert "done: 2000 steps" in out
    names = {path.name for path in run_dir.iterdir()}
    assert {"config.json", "metrics.csv", "checkpoint.pt", "curve.png"} <= names
    record = json.loads((run_dir / "config.json").read_text())
    assert record["config"]["env"] == "MinAtar/Breakout-v1" and record["config"]["mode"] == mode
    checkpoint = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert tuple(checkpoint["observation_shape"]) == (10, 10, 4)
    assert checkpoint["num_actions"] == 3
    assert "torso.0.0.weight" in checkpoint["model"]  # the MinAtar net's conv
    assert tuple(checkpoint["model"]["torso.0.0.weight"].shape) == (16, 4, 3, 3)
    assert int(_rows(run_dir)[-1]["step"]) == 2000
    assert main(["evaluate", str(run_dir), "--episodes", "2"]) == 0
    assert re.fullmatch(
        rf"{re.escape(str(run_dir))}: mean return \d+\.\d\d over 2 episodes \(mean length "
        r"\d+\.\d\) at step 2,000\n",
        capsys.readouterr().out,
    )


def test_cli_refuses_an_unknown_minatar_id_before_writing(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    code = main(["train", "impala", "--env", "MinAtar/Pong-v1", "--logdir", str(run_dir)])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown env 'MinAtar/Pong-v1': expected one of MinAtar/Asterix-v0, " in err
    assert "MinAtar/Breakout-v1" in err
    assert len(err.strip().splitlines()) == 1
    assert not run_dir.exists()


def test_cli_says_how_to_install_minatar(tmp_path: Path, capsys, monkeypatch) -> None:
    import importlib

    make_module = importlib.import_module("batchenv.make")  # batchenv.make is also a function

    def missing(env_id: str) -> None:
        raise ImportError("No module named 'minatar'")

    monkeypatch.setattr(make_module, "register_minatar", missing)
    run_dir = tmp_path / "run"
    code = main(["train", "impala", "--env", "MinAtar/Breakout-v1", "--logdir", str(run_dir)])
    assert code == 2
    assert capsys.readouterr().err == (
        "batchenv train impala: error: MinAtar/Breakout-v1 is a MinAtar game and needs the "
        'minatar package: pip install -e ".[minatar]"\n'
    )
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "name, env, mode, batch",
    [
        ("breakout", "MinAtar/Breakout-v1", "sync", 8),
        ("space_invaders", "MinAtar/SpaceInvaders-v1", "sync", 8),
        ("breakout_async", "MinAtar/Breakout-v1", "async", 8),
        ("space_invaders_async", "MinAtar/SpaceInvaders-v1", "async", 8),
        ("breakout_batch16", "MinAtar/Breakout-v1", "sync", 16),
    ],
)
def test_spec_file_loads(name: str, env: str, mode: str, batch: int) -> None:
    spec = load_spec(SPECS / "impala_minatar.yaml", name)
    assert spec.algorithm == "impala" and spec.env == env
    assert spec.meta.sessions == 4 and spec.meta.steps == 10_000_000
    config = spec.make_config(seed=3)
    assert (config.env, config.total_steps, config.seed, config.log_every) == (
        env,
        10_000_000,
        3,
        50_000,
    )
    assert config.mode == mode and config.model == "auto" and config.entropy_cost == 0.01
    assert (config.unroll_length, config.batch_size, config.learning_rate) == (20, batch, 0.002)
    # 32 envs either way: 2 actor processes of 16 (sync), or one actor thread whose 32 envs
    # step in 2 worker processes (async)
    layout = (2, 16, 0) if mode == "sync" else (1, 32, 2)
    assert (config.num_actors, config.envs_per_actor, config.env_workers) == layout
    spec.trainer().check(config)  # the minatar package is there and the id is known


# Learning check with a budget of 400k agent steps (the learning rate reaches 0 there): on
# a shared 2-core VM sync mode takes ~55 s, and the mean return of the last 50k steps
# went from the random policy's ~0.5 to 1.65 and 1.89 (seeds 1 and 2).
LEARNING_STEPS = 400_000


@pytest.mark.slow
def test_sync_mode_learns_breakout_within_400k_steps(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    flags = ["--num-actors", "2", "--envs-per-actor", "16", "--entropy-cost", "0.01",
             "--steps", str(LEARNING_STEPS), "--log-every", "50000", "--seed", "1",
             "--no-progress", "--logdir", str(run_dir)]  # fmt: skip
    assert main(["train", "impala", "--env", "MinAtar/Breakout-v1", *flags]) == 0
    scores = [float(row["mean_score"]) for row in _rows(run_dir) if row["mean_score"]]
    assert scores[0] < 1.0, scores  # the random policy's level
    assert scores[-1] >= 1.2, scores
