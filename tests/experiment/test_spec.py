"""Spec files: loading, ${var}, checks that fail in one line before anything runs, templates."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from batchenv.algorithms.batchppo import BatchPPOConfig
from batchenv.experiment.search_space import SearchSpace
from batchenv.experiment.spec import Meta, SpecError, load_spec, parse_sets, read_specs, template

TOY = "tests.experiment.toy_trainer:ToyTrainer"


def write(tmp_path, text: str, name: str = "spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_of_named_specs_loads_each_with_config_and_meta(tmp_path):
    path = write(
        tmp_path,
        """
a:
  algorithm: batchppo
  env: batchenv.kernels:CartPole
  config: {learning_rate: 1e-3, policy_layers: [64, 64]}
  meta: {sessions: 2, steps: 2.0e+4}
b:
  algorithm: impala
  env: CartPole-v1
""",
    )
    spec = load_spec(path, "a")
    # YAML 1.1 reads 1e-3 as a string and 2.0e+4 as a float: both are converted.
    assert spec.config == {"learning_rate": 1e-3, "policy_layers": (64, 64)}
    assert spec.meta == Meta(sessions=2, steps=20_000)
    config = spec.make_config(seed=7)
    assert isinstance(config, BatchPPOConfig)
    assert (config.env, config.seed, config.steps, config.max_length) == (
        "batchenv.kernels:CartPole",
        7,
        20_000,
        500,  # the cartpole preset, found from the in-graph env
    )
    assert load_spec(path, "b").make_config(seed=0).total_steps == 100_000


def test_a_file_that_is_one_spec_is_named_after_the_file(tmp_path):
    path = write(tmp_path, "algorithm: batchppo\nenv: CartPole-v1\n", "single.json")
    path.write_text(json.dumps({"algorithm": "batchppo", "env": "CartPole-v1"}))
    assert load_spec(path).name == "single"


def test_session_seeds_come_from_the_spec_alone(tmp_path):
    spec = load_spec(write(tmp_path, f"algorithm: {TOY}\nenv: toy\nmeta: {{seed: 5}}\n"))
    assert [spec.session_seed(t, s) for t in (0, 2) for s in (0, 3)] == [5, 8, 2005, 2008]


def test_variables_are_filled_from_sets(tmp_path):
    path = write(tmp_path, f"algorithm: {TOY}\nenv: toy\nconfig: {{x: ${{x}}, y: ${{y}}}}\n")
    spec = load_spec(path, sets=parse_sets(["x=0.25", "y=3"]))
    assert spec.config == {"x": 0.25, "y": 3}


@pytest.mark.parametrize(
    "text, sets, message",
    [
        (
            f"algorithm: {TOY}\nenv: toy\nconfig: {{x: ${{x}}}}\n",
            [],
            "uses ${x} but it is not set; pass -s x=VALUE",
        ),
        (f"algorithm: {TOY}\nenv: toy\n", ["x=1"], "-s x=... is given but"),
        (
            f"algorithm: {TOY}\nenv: toy\nconfig: {{xx: 1}}\n",
            [],
            "config (ToyConfig) has no field 'xx' (did you mean 'x'?); valid fields: x, y,",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nconfig: {{y: 0.5}}\n",
            [],
            "config.y must be int, got 0.5 (float)",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nconfig: {{seed: 3}}\n",
            [],
            "config.seed comes from the spec's meta.seed; set it there",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nmeta: {{sesions: 2}}\n",
            [],
            "meta has no field 'sesions' (did you mean 'sessions'?)",
        ),
        (f"algorithm: {TOY}\nenv: toy\nmeta: {{sessions: 0}}\n", [], "meta.sessions must be >= 1"),
        (f"algorithm: {TOY}\nenv: toy\nmeta: {{sampler: tpee}}\n", [], "meta.sampler must be one"),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{config.x__unifrom: [0, 1]}}\n",
            [],
            "unknown distribution 'unifrom' (did you mean 'uniform'?)",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{config.x: [0, 1]}}\n",
            [],
            "search leaf 'config.x' has no distribution",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{config.y__uniform: [0, 4]}}\n",
            [],
            "uniform draws floats but config.y is an integer field",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{config.x__loguniform: [0, 1]}}\n",
            [],
            "loguniform needs low > 0",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{config.x__grid_search: [0, 1]}}\n",
            [],
            "grid_search leaves need meta.sampler: grid",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nmeta: {{sampler: grid}}\n"
            "search: {config.x__uniform: [0, 1]}\n",
            [],
            "meta.sampler 'grid' needs grid_search or choice leaves",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nsearch: {{meta.seed__choice: [1, 2]}}\n",
            [],
            "only config.FIELD and env can be searched",
        ),
        (
            f"algorithm: {TOY}\nenv: toy\nconfig: {{steps: 0}}\n",
            [],
            "config.steps comes from the spec's meta.steps",
        ),
        ("algorithm: nosuch\nenv: toy\n", [], "unknown algorithm 'nosuch'"),
        ("algorithm: batchppo\n", [], "needs env: a string"),
        (f"algorithm: {TOY}\nenv: toy\nmeat: {{}}\n", [], "a spec has no field 'meat'"),
        (f"algorithm: {TOY}\nenv: [toy\n", [], "is not valid YAML"),
    ],
    ids=[
        "unset-var",
        "unused-var",
        "unknown-field",
        "wrong-type",
        "seed-in-config",
        "unknown-meta",
        "bad-meta-value",
        "bad-sampler",
        "misspelt-dist",
        "no-dist",
        "float-dist-int-field",
        "log-bound",
        "grid-without-grid",
        "grid-with-dist",
        "search-meta",
        "steps-in-config",
        "unknown-algorithm",
        "missing-env",
        "unknown-section",
        "bad-yaml",
    ],
)
def test_bad_specs_fail_with_one_line(tmp_path, text, sets, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path, sets=parse_sets(sets))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_algorithms_own_checks_run_before_anything(tmp_path):
    path = write(tmp_path, "algorithm: batchppo\nenv: CartPole-v1\nconfig: {discount: 1.5}\n")
    with pytest.raises(SpecError, match=r"BatchPPOConfig.discount must be in \(0, 1\]"):
        load_spec(path)


UNKNOWN_ENV = (
    "unknown env 'CartPol-v1': expected a registered Gymnasium id such as 'CartPole-v1' "
    "(Gymnasium says: Environment `CartPol` doesn't exist. Did you mean: `CartPole`?)"
)
UPDATE_EVERY = (
    "update_every=5 is below num_agents=10: a train phase (update_every * max_length env "
    "steps over num_agents envs) is then shorter than max_length=200 steps, so episodes that "
    "reach the time limit never finish and no update runs; set update_every >= num_agents"
)


@pytest.mark.parametrize(
    "text, message",
    [
        ("algorithm: impala\nenv: CartPol-v1\n", f"spec 'spec': {UNKNOWN_ENV}"),
        ("algorithm: batchppo\nenv: CartPol-v1\n", f"spec 'spec': {UNKNOWN_ENV}"),
        (
            "algorithm: impala\nenv: CartPole-v1\n"
            "search: {env__choice: [CartPole-v1, CartPol-v1]}\n",
            f"spec 'spec': {UNKNOWN_ENV} (search leaf env__choice: 'CartPol-v1')",
        ),
        (
            "algorithm: batchppo\nenv: Pendulum-v1\nconfig: {num_agents: 10, update_every: 5}\n",
            f"spec 'spec': {UPDATE_EVERY}",
        ),
        (
            "algorithm: batchppo\nenv: Pendulum-v1\nconfig: {num_agents: 10}\n"
            "search: {config.update_every__choice: [10, 5]}\n",
            f"spec 'spec': {UPDATE_EVERY} (search leaf config.update_every__choice: 5)",
        ),
        (
            "algorithm: impala\nenv: CartPole-v1\nconfig: {device: 'cuda:7'}\n",
            "spec 'spec': device 'cuda:7' asked for, but",
        ),
    ],
    ids=[
        "impala-env",
        "batchppo-env",
        "searched-env",
        "update-every-below-envs",
        "searched-update-every",
        "device",
    ],
)
def test_specs_that_cannot_start_a_session_fail_on_load(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_run_refuses_a_wrong_env_in_one_line_and_writes_nothing(tmp_path, capsys):
    from batchenv.cli import main

    path = write(tmp_path, "bad:\n  algorithm: impala\n  env: CartPol-v1\n")
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == f"batchenv run: error: spec 'bad': {UNKNOWN_ENV}\n"
    assert not (tmp_path / "runs").exists()


def test_the_shipped_specs_load(tmp_path):
    from pathlib import Path

    specs = Path(__file__).resolve().parents[2] / "specs"
    for name in ("cartpole", "cartpole_workers", "pendulum"):
        load_spec(specs / "batchppo.yaml", name)
    load_spec(specs / "impala.yaml", "cartpole")
    load_spec(specs / "search.yaml")


def test_a_file_of_several_specs_needs_a_name(tmp_path):
    path = write(tmp_path, f"a: {{algorithm: {TOY}, env: toy}}\nb: {{algorithm: {TOY}, env: t}}\n")
    with pytest.raises(SpecError, match="holds 2 specs; name one: a, b"):
        load_spec(path)
    with pytest.raises(SpecError, match="has no spec 'c'; it has: a, b"):
        load_spec(path, "c")


def test_malformed_sets_and_missing_files(tmp_path):
    with pytest.raises(SpecError, match="expected var=value"):
        parse_sets(["novalue"])
    with pytest.raises(SpecError, match="does not exist"):
        read_specs(tmp_path / "nope.yaml")


def test_search_leaves_become_optuna_distributions():
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    space = SearchSpace.parse(
        {
            "config": {"a__uniform": [0, 1], "b__loguniform": [1e-4, 1e-2]},
            "config.c__quniform": [0, 1, 0.25],
            "config.d__randint": [1, 5],
            "config.e__qrandint": [2, 10, 2],
            "config.f__choice": [[64], [64, 64]],
            "env__choice": ["CartPole-v1", "Acrobot-v1"],
        }
    )
    dists = space.distributions()
    assert dists["config.a"] == FloatDistribution(0, 1)
    assert dists["config.b"] == FloatDistribution(1e-4, 1e-2, log=True)
    assert dists["config.c"] == FloatDistribution(0, 1, step=0.25)
    assert dists["config.d"] == IntDistribution(1, 4)  # randint excludes high (Ray Tune)
    assert dists["config.e"] == IntDistribution(2, 10, step=2)
    assert dists["config.f"] == CategoricalDistribution(["[64]", "[64, 64]"])
    assert space.decode({"config.f": "[64, 64]", "config.a": 0.5}) == {
        "config.f": [64, 64],
        "config.a": 0.5,
    }
    assert space.apply({"env": "x", "config": {"a": 0}}, {"config.a": 1, "env": "y"}) == {
        "env": "y",
        "config": {"a": 1},
    }


def test_template_lists_every_field_and_runs_as_written(tmp_path):
    text = template("batchppo")
    for field in ("learning_rate", "update_every", "gae_lambda", "sessions", "sampler"):
        assert f"    {field}:" in text
    assert "    steps:" in text and "    seed:" in text  # meta's, not config's
    document = yaml.safe_load(text)
    (name,) = document
    assert "seed" not in document[name]["config"] and "env" not in document[name]["config"]
    path = write(tmp_path, text)
    spec = load_spec(path)
    assert spec.make_config(seed=0) == spec.trainer().make_config(
        spec.env, {}, steps=None, seed=0, eval_every=None
    )
    assert math.isclose(spec.config["learning_rate"], 1e-4)
    impala = load_spec(write(tmp_path, template("impala"), "impala.yaml"))
    assert impala.make_config(seed=1).num_learner_threads == 2


def test_dumped_specs_load_back_equal(tmp_path):
    path = write(
        tmp_path,
        f"s:\n  algorithm: {TOY}\n  env: toy\n  config: {{x: 0.5}}\n"
        "  search: {config.y__choice: [1, 2]}\n",
    )
    spec = load_spec(path)
    spec.dump(tmp_path / "out.yaml")
    assert load_spec(tmp_path / "out.yaml") == spec
