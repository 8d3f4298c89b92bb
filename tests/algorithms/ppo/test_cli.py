"""``batchenv train ppo`` and ``batchenv evaluate`` on a PPO run, at a tiny budget."""

from __future__ import annotations

import csv

import pytest

from batchenv.cli import main


def test_train_writes_a_run_and_evaluate_reads_it(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(
        [
            "train",
            "ppo",
            "--steps",
            "1024",
            "--num-envs",
            "2",
            "--seeds",
            "2",
            "--no-compile",
            "--set",
            "num_steps=64",
            "--set",
            "log_every=2",
            "--logdir",
            str(run),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "ppo: done, 8 updates x 2 agent(s)" in out
    assert {"config.json", "metrics.csv", "checkpoint.pt", "curve.png"} <= {
        p.name for p in run.iterdir()
    }
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [int(row["step"]) for row in rows] == [256, 512, 768, 1024]
    assert {"seed0_score", "seed1_score", "approx_kl"} <= set(rows[0])
    before = sorted(p.name for p in run.iterdir())
    assert main(["evaluate", str(run), "--episodes", "3"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{run}: mean return ") and "over 6 episodes" in line
    assert sorted(p.name for p in run.iterdir()) == before  # evaluate writes nothing


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "CartPol-v1"], "PPO trains the in-graph envs"),
        (["--set", "gama=0.9"], "--set 'gama=0.9': expected KEY=VALUE"),
        (["--set", "num_minibatches=3"], "does not split into 3 minibatches"),
        (["--steps", "100"], "less than one update"),
        (["--set", "sticky_action_prob=0"], "sticky_action_prob is a MinAtar option"),
        (
            ["--preset", "minatar-asterix", "--set", "sticky_action_prob=1.5"],
            "sticky_action_prob must be in [0, 1], got 1.5",
        ),
        (["--set", "init=xavier"], "init must be 'orthogonal' or 'lecun', got 'xavier'"),
        (["--set", "bias_init=-0.1"], "bias_init must be >= 0 (U[0, bias_init)), got -0.1"),
    ],
)
def test_bad_options_fail_in_one_line_before_writing(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    code = main(["train", "ppo", *argv, "--logdir", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("batchenv train ppo: error: ") and message in err
    assert len(err.splitlines()) == 1
    assert not run.exists()


def test_help_lists_every_config_field_with_its_default(capsys):
    from batchenv.algorithms.ppo.config import PPOConfig, field_help

    with pytest.raises(SystemExit) as exit_:
        main(["train", "ppo", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, doc in field_help().items():
        assert f"{name} = {getattr(PPOConfig(), name)!r} {' '.join(doc.split())}" in out


def test_evaluate_plays_minatar_images_greedy_and_sampled(tmp_path, capsys):
    """A MinAtar run's agents read ``[N, 10, 10, C]`` frames: evaluate plays them greedily and,
    with ``--sample``, with actions drawn from the policy; the same command prints the same
    line, and ``--seed`` picks the episodes."""
    run = tmp_path / "run"
    argv = ["train", "ppo", "--preset", "minatar-breakout", "--steps", "256"]
    small = ["--num-envs", "2", "--no-compile", "--set", "num_steps=128", "--set", "hidden=8"]
    assert main([*argv, *small, "--set", "num_minibatches=2", "--logdir", str(run)]) == 0
    capsys.readouterr()

    def line(*options: str) -> str:
        assert main(["evaluate", str(run), "--episodes", "3", *options]) == 0
        return capsys.readouterr().out.strip()

    greedy, sampled = line(), line("--sample")
    for text in (greedy, sampled):
        assert text.startswith(f"{run}: mean return ") and "over 3 episodes" in text
        assert text.endswith("at step 256")
    assert line() == greedy and line("--sample") == sampled
    assert line("--seed", "1000") == greedy  # the default: the run's seed (0) + 1000
    assert len({line("--sample", "--seed", str(s)) for s in range(1, 6)}) > 1
