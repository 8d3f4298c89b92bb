"""BatchPPOConfig: batch-ppo defaults, presets, replace() and the key=value parser."""

from __future__ import annotations

import dataclasses

import pytest

from batchenv.algorithms.batchppo import PRESETS, BatchPPOConfig, field_help, parse_overrides


def test_defaults_are_batch_ppo_v1_4():
    config = BatchPPOConfig()
    assert config.num_agents == 30 and config.eval_episodes == 30
    assert config.update_every == 30 and config.update_epochs == 25
    assert config.learning_rate == 1e-4 and config.discount == 0.995
    assert config.policy_layers == (200, 100) and config.value_layers == (200, 100)
    assert config.init_std == 0.35 and config.init_output_factor == 0.1
    assert (config.kl_target, config.kl_cutoff_factor, config.kl_cutoff_coef) == (0.01, 2, 1000)
    assert config.kl_init_penalty == 1 and config.normalize_ranges is True
    assert config.gae_lambda is None and config.entropy_coef == 0.0
    assert config.minibatches == 1 and config.recurrent is False


@pytest.mark.parametrize(
    "name, env, max_length, steps, changed",
    [
        ("pendulum", "Pendulum-v1", 200, 1_000_000, {}),
        ("cartpole", "CartPole-v1", 500, 200_000, {}),
        ("reacher", "Reacher-v5", 1000, 5_000_000, {"discount": 0.985, "update_every": 60}),
        ("cheetah", "HalfCheetah-v5", 1000, 10_000_000, {"discount": 0.99}),
        ("walker", "Walker2d-v5", 1000, 10_000_000, {}),
        ("hopper", "Hopper-v5", 1000, 10_000_000, {"update_every": 60}),
        ("ant", "Ant-v5", 1000, 20_000_000, {}),
        ("humanoid", "Humanoid-v5", 1000, 50_000_000, {"update_every": 60}),
    ],
)
def test_presets(name, env, max_length, steps, changed):
    preset = PRESETS[name]
    assert (preset.env, preset.max_length, preset.steps) == (env, max_length, steps)
    expected = dataclasses.replace(BatchPPOConfig(), **changed)
    for field in ("discount", "update_every", "update_epochs", "learning_rate", "num_agents"):
        assert getattr(preset, field) == getattr(expected, field)


def test_replace_returns_a_validated_copy():
    base = BatchPPOConfig()
    changed = base.replace(discount=0.9, policy_layers=(8,))
    assert changed.discount == 0.9 and changed.policy_layers == (8,)
    assert base.discount == 0.995
    with pytest.raises(TypeError, match="did you mean 'discount'"):
        base.replace(discont=0.9)
    with pytest.raises(ValueError, match="discount must be in"):
        base.replace(discount=1.5)


def test_from_overrides_converts_by_field_type():
    config = BatchPPOConfig.from_overrides(
        [
            "env=Hopper-v5",
            "steps=2e5",
            "num_agents=8",
            "learning_rate=3e-4",
            "recurrent=yes",
            "normalize_ranges=False",
            "policy_layers=64,32",
            "value_layers=(16, 16)",
            "gae_lambda=0.95",
            "chunk_length=none",
            "update-every=4",
        ]
    )
    assert config.env == "Hopper-v5" and config.steps == 200_000
    assert config.num_agents == 8 and config.learning_rate == 3e-4
    assert config.recurrent is True and config.normalize_ranges is False
    assert config.policy_layers == (64, 32) and config.value_layers == (16, 16)
    assert config.gae_lambda == 0.95 and config.chunk_length is None
    assert config.update_every == 4
    assert parse_overrides(["value_layers=()"]) == {"value_layers": ()}


def test_from_overrides_applies_to_a_base():
    config = BatchPPOConfig.from_overrides(["update_epochs=3"], base=PRESETS["hopper"])
    assert config.env == "Hopper-v5" and config.update_every == 60 and config.update_epochs == 3


@pytest.mark.parametrize(
    "item, message",
    [
        ("steps", "not of the form key=value"),
        ("discont=0.9", "did you mean 'discount'"),
        ("steps=1.5", "cannot read '1.5' as int"),
        ("recurrent=maybe", "cannot read 'maybe' as bool"),
        ("policy_layers=a,b", "cannot read 'a,b'"),
        ("learning_rate=fast", "cannot read 'fast' as float"),
    ],
)
def test_from_overrides_errors_name_the_item(item, message):
    with pytest.raises(ValueError, match=message):
        BatchPPOConfig.from_overrides([item])


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"update_every": 0}, "update_every"),
        ({"policy_layers": (), "recurrent": True}, "policy_layers"),
        ({"gae_lambda": 1.5}, "gae_lambda"),
        ({"init_std": 0.0}, "init_std"),
        ({"chunk_length": 0}, "chunk_length"),
    ],
)
def test_invalid_values_fail_at_construction(overrides, field):
    with pytest.raises(ValueError, match=f"BatchPPOConfig.{field} "):
        BatchPPOConfig(**overrides)


def test_every_field_has_a_one_line_docstring():
    docs = field_help()
    names = [field.name for field in dataclasses.fields(BatchPPOConfig)]
    assert list(docs) == names
    assert all(doc and "\n" not in doc for doc in docs.values())
