"""DQNConfig: CleanRL's defaults, presets, overrides and bad values (one line each)."""

from __future__ import annotations

import pytest

from batchenv.algorithms.dqn import PRESETS, DQNConfig, field_help, parse_overrides


def test_defaults_are_cleanrls_dqn():
    config = DQNConfig()
    assert (config.learning_rate, config.buffer_size, config.gamma) == (2.5e-4, 10_000, 0.99)
    assert (config.target_network_frequency, config.batch_size, config.tau) == (500, 128, 1.0)
    assert (config.start_e, config.end_e, config.exploration_fraction) == (1.0, 0.05, 0.5)
    assert (config.learning_starts, config.train_frequency, config.steps) == (10_000, 10, 500_000)
    assert config.hidden_layers == (120, 84) and config.loss == "mse"
    assert config.max_grad_norm is None and config.num_envs == 1


def test_presets_pick_their_variants():
    assert not PRESETS["cartpole"].double and PRESETS["cartpole"].n_step == 1
    per = PRESETS["cartpole_ddqn_per"]
    assert (per.double, per.prioritized, per.n_step) == (True, True, 3)
    assert PRESETS["lunarlander"].env == "LunarLander-v3"


def test_every_field_has_a_one_line_doc():
    docs = field_help()
    assert set(docs) == set(DQNConfig.__dataclass_fields__)
    assert all(doc and "\n" not in doc for doc in docs.values())


def test_overrides_are_typed():
    values = parse_overrides(
        ["steps=1e5", "double=true", "hidden_layers=64,64", "max_grad_norm=none", "tau=0.005"]
    )
    assert values == {
        "steps": 100_000,
        "double": True,
        "hidden_layers": (64, 64),
        "max_grad_norm": None,
        "tau": 0.005,
    }


@pytest.mark.parametrize(
    "item, message",
    [
        ("dubble=true", r"no field 'dubble' \(did you mean 'double'\?\)"),
        ("steps=ten", "cannot read 'ten' as int"),
        ("double", "is not of the form key=value"),
    ],
    ids=["typo", "not-a-number", "no-value"],
)
def test_bad_overrides_say_what_was_expected(item, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides([item])


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(batch_size=20_000), "batch_size must be <= buffer_size=10000"),
        (dict(n_step=0), "n_step must be >= 1, got 0"),
        (dict(loss="l1"), "loss must be one of mse, huber, got 'l1'"),
        (dict(tau=0.0), r"tau must be in \(0, 1\], got 0.0"),
        (dict(end_e=1.5), r"end_e must be in \[0, 1\], got 1.5"),
        (dict(buffer_size=4, num_envs=8, batch_size=2), "buffer_size must hold one transition"),
        (dict(max_grad_norm=0.0), "max_grad_norm must be None or > 0"),
    ],
    ids=["batch>buffer", "n_step=0", "loss", "tau", "end_e", "buffer<envs", "grad-norm"],
)
def test_bad_values_raise_one_line(values, message):
    with pytest.raises(ValueError, match=message):
        DQNConfig().replace(**values)


def test_unknown_field_in_replace_raises_type_error():
    with pytest.raises(TypeError, match="has no field 'gama'"):
        DQNConfig().replace(gama=0.9)
