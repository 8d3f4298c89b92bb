"""Spec files: one file, every setting of an experiment, checked before anything runs.

A spec file (YAML or JSON) maps spec names to specs (a file holding one spec may also be
that spec itself, named after the file)::

    cartpole_ppo:
      algorithm: batchppo                 # batchppo, impala, or module:Class
      env: batchenv.kernels:CartPole      # a Gymnasium id or an in-graph module:Class
      config:                             # fields of the algorithm's config dataclass
        learning_rate: ${lr}              # filled from `-s lr=3e-4` on the command line
      meta:
        sessions: 4
        steps: 100000
      search:
        config.discount__choice: [0.99, 0.995]

``batchenv spec batchppo`` prints a complete spec with every field, its default and its doc.

    >>> spec = load_spec("specs/batchppo.yaml", "cartpole", sets={})
    >>> spec.meta.sessions, spec.algorithm
    (4, 'batchppo')
"""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .fields import coerce, field_docs, field_types, unknown_key
from .search_space import SearchSpace
from .trainers import load_trainer, shared_algorithms

__all__ = [
    "MODES",
    "Meta",
    "Spec",
    "SpecError",
    "load_spec",
    "parse_sets",
    "read_specs",
    "spec_from_dict",
    "template",
]

MODES = ("dev", "train", "search")
SAMPLERS = ("tpe", "random", "grid", "cmaes")
PRUNERS = ("none", "median", "successive_halving", "hyperband")
TRACKERS = ("tensorboard", "wandb")
_SECTIONS = ("algorithm", "env", "config", "meta", "search")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SpecError(ValueError):
    """A spec that cannot run, with one line saying what was expected."""


@dataclass(frozen=True)
class Meta:
    """How a spec runs: sessions, trials, run length, seeds, CPU budget, search."""

    sessions: int = 4
    """Sessions per trial: runs that differ only in their seed."""
    trials: int = 1
    """Trials of a search (samples of the search space); train and dev run one."""
    steps: int | None = None
    """Env steps per session; None: the algorithm's default for the env."""
    eval_every: int | None = None
    """Env steps between evaluation checkpoints; None: the algorithm's default."""
    log_frequency: int | None = None
    """Env frames (all envs together) between checkpoints, as SLM Lab's meta.log_frequency:
    each is the mean return of the recent training episodes, and the metrics use them;
    None: the algorithm's default (BatchPPO 10000, IMPALA 1/50 of the run)."""
    seed: int = 0
    """Base seed: session s of trial t gets seed + 1000 * t + s (nothing from the clock)."""
    max_concurrent: int | None = None
    """Trials run at once; None: as many as the CPU budget allows."""
    cpus_per_session: int | None = None
    """Cores one session may use (torch threads plus env workers); None: the algorithm's
    estimate. Sessions run at once = cores // cpus_per_session (at least one)."""
    distributed: bool | str = False
    """false: sessions train networks of their own; shared: the sessions of a trial run at
    once and train one set of networks in shared memory, Hogwild-style, each with its own
    envs and optimiser (SLM Lab's meta.distributed; dqn and sac, on the CPU)."""
    gpus_per_session: float = 0.0
    """GPUs (or a fraction of one) a session asks Ray for with --backend ray, e.g. 0.25;
    the local backend ignores it (sessions share this machine's GPUs)."""
    sampler: str = "tpe"
    """Search sampler, seeded with seed: tpe, random, grid (grid_search leaves) or cmaes."""
    pruner: str = "none"
    """Stop weak trials early: none, median, successive_halving or hyperband (fed the env
    steps and total_reward_ma of each trial's first session at every checkpoint)."""
    session_timeout: float | None = None
    """Seconds a session may run before it is stopped and its trial fails; None: no limit."""
    track: str = "tensorboard"
    """tensorboard (event files in every session folder), or wandb to also log each
    session to Weights & Biases (WANDB_MODE=offline needs no network)."""

    def __post_init__(self) -> None:
        for name in ("sessions", "trials"):
            if getattr(self, name) < 1:
                raise SpecError(f"meta.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("steps", "eval_every", "log_frequency", "max_concurrent", "cpus_per_session"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SpecError(f"meta.{name} must be >= 1 or null, got {value}")
        if self.gpus_per_session < 0:
            raise SpecError(f"meta.gpus_per_session must be >= 0, got {self.gpus_per_session}")
        if self.session_timeout is not None and self.session_timeout <= 0:
            raise SpecError(f"meta.session_timeout must be > 0 or null, got {self.session_timeout}")
        if self.distributed is not False and self.distributed != "shared":
            value = self.distributed
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise SpecError(
                "meta.distributed must be false or shared (one network trained by all the "
                f"sessions of a trial at once), got {shown}"
            )
        for name, valid in (("sampler", SAMPLERS), ("pruner", PRUNERS), ("track", TRACKERS)):
            if getattr(self, name) not in valid:
                raise SpecError(
                    f"meta.{name} must be one of {', '.join(valid)}, got {getattr(self, name)!r}"
                )


@dataclass
class Spec:
    """A checked spec: what to train, on what, how often, and what to search."""

    name: str
    algorithm: str
    env: str
    config: dict[str, Any] = field(default_factory=dict)
    meta: Meta = field(default_factory=Meta)
    search: dict[str, Any] = field(default_factory=dict)

    @property
    def space(self) -> SearchSpace:
        return SearchSpace.parse(self.search)

    def trainer(self):
        return load_trainer(self.algorithm)

    def session_seed(self, trial: int, session: int) -> int:
        """The seed of session ``session`` of trial ``trial``: seed + 1000 trial + session."""
        return self.meta.seed + 1000 * trial + session

    def with_values(self, values: Mapping[str, Any]) -> Spec:
        """This spec with ``{dotted path: value}`` set (a trial's sampled parameters)."""
        data = self.space.apply(self.to_dict(), values)
        return spec_from_dict(self.name, data)

    def make_config(self, seed: int):
        """The algorithm's config for one session with ``seed``."""
        cadence = {}
        if self.meta.log_frequency is not None:  # trainers without the argument work unset
            cadence["log_frequency"] = self.meta.log_frequency
        return self.trainer().make_config(
            self.env,
            self.config,
            steps=self.meta.steps,
            seed=seed,
            eval_every=self.meta.eval_every,
            **cadence,
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as written in a file (runnable as is)."""
        data: dict[str, Any] = {"algorithm": self.algorithm, "env": self.env}
        data["config"] = dict(self.config)
        data["meta"] = dataclasses.asdict(self.meta)
        if self.search:
            data["search"] = dict(self.search)
        return data

    def dump(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """Write ``{name: spec}`` (plus ``extra`` top-level keys) as YAML to ``path``."""
        import yaml

        path = Path(path)
        document = {self.name: _plain(self.to_dict())}
        text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
        if extra:
            text += yaml.safe_dump(_plain(dict(extra)), sort_keys=False)
        path.write_text(text)
        return path


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """``["var=value", ...]`` from ``-s`` as a dict; SpecError for a malformed item."""
    sets: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not _VARIABLE.fullmatch("${" + name.strip() + "}"):
            raise SpecError(f"-s {item!r}: expected var=value, e.g. -s lr=3e-4")
        sets[name.strip()] = value
    return sets


def read_specs(path: str | Path, sets: Mapping[str, str] | None = None) -> dict[str, dict]:
    """The specs of a file as ``{name: raw dict}``, with ``${var}`` filled from ``sets``."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spec file {path} does not exist")
    text = path.read_text()
    used = set(_VARIABLE.findall(text))
    missing = sorted(used - set(sets or {}))
    if missing:
        example = " ".join(f"-s {name}=VALUE" for name in missing)
        raise SpecError(f"{path} uses ${{{missing[0]}}} but it is not set; pass {example}")
    unused = sorted(set(sets or {}) - used)
    if unused:
        raise SpecError(f"-s {unused[0]}=... is given but {path} has no ${{{unused[0]}}}")
    text = _VARIABLE.sub(lambda match: str(sets[match.group(1)]), text)
    try:
        if path.suffix == ".json":
            document = json.loads(text)
        else:
            import yaml

            document = yaml.safe_load(text)
    except Exception as error:  # yaml.YAMLError or json.JSONDecodeError, in one line
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise SpecError(f"{path} is not valid {kind}: {_parse_problem(error)}") from None
    if not isinstance(document, dict) or not document:
        raise SpecError(f"{path} holds no spec: expected a mapping of spec names to specs")
    if "algorithm" in document:
        return {path.stem: document}
    bad = [name for name, spec in document.items() if not isinstance(spec, dict)]
    if bad:
        raise SpecError(
            f"{path}: {bad[0]!r} is not a spec (a mapping with algorithm, env, config, meta)"
        )
    return document


def load_spec(
    path: str | Path, name: str | None = None, sets: Mapping[str, str] | None = None
) -> Spec:
    """The checked spec ``name`` of the file ``path`` (the only one when ``name`` is None)."""
    specs = read_specs(path, sets)
    if name is None:
        if len(specs) > 1:
            raise SpecError(f"{path} holds {len(specs)} specs; name one: {', '.join(specs)}")
        name = next(iter(specs))
    if name not in specs:
        raise SpecError(f"{path} has no spec {name!r}; it has: {', '.join(specs)}")
    return spec_from_dict(name, specs[name])


def spec_from_dict(name: str, data: Mapping[str, Any]) -> Spec:
    """Check a raw spec dict and build the Spec (SpecError names the first problem)."""
    unknown = [key for key in data if key not in _SECTIONS]
    if unknown:
        raise SpecError(f"spec {name!r}: " + unknown_key("a spec", unknown[0], list(_SECTIONS)))
    for key in ("algorithm", "env"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise SpecError(f"spec {name!r} needs {key}: a string, got {data.get(key)!r}")
    for key in ("config", "meta", "search"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise SpecError(f"spec {name!r}: {key} must be a mapping, got {data[key]!r}")
    try:
        trainer = load_trainer(data["algorithm"])
        meta = _build(Meta, data.get("meta") or {}, "meta")
        config = _check_config(trainer, data.get("config") or {})
        spec = Spec(
            name, data["algorithm"], data["env"], config, meta, dict(data.get("search") or {})
        )
        space = spec.space
        _check_search(spec, trainer.config_class, space)
        _check_sessions(spec, trainer, space)
    except SpecError:
        raise
    except (ValueError, TypeError) as error:
        raise SpecError(f"spec {name!r}: {error}") from None
    return spec


def template(algorithm: str, env: str | None = None) -> str:
    """A complete spec for ``algorithm`` as YAML: every field, its default and its doc."""
    trainer = load_trainer(algorithm)
    env = env or getattr(trainer, "default_env", "CartPole-v1")
    config = trainer.make_config(env, {}, steps=None, seed=0, eval_every=None)
    skip = set(getattr(trainer, "meta_fields", {}).values())
    lines = [
        f"# A complete {algorithm} spec: `batchenv run THIS_FILE --mode train`.",
        "# Every field is listed with its default: delete the lines you do not change.",
        f"{algorithm}_{_slug(env)}:",
        f"  algorithm: {algorithm}",
        f"  env: {env}",
        "  config:",
    ]
    docs = field_docs(trainer.config_class)
    for item in dataclasses.fields(trainer.config_class):
        if item.name in skip:
            continue
        lines += _comment(docs.get(item.name, ""))
        lines.append(f"    {item.name}: {_yaml_value(getattr(config, item.name))}")
    lines.append("  meta:")
    meta_docs = field_docs(Meta)
    for item in dataclasses.fields(Meta):
        lines += _comment(meta_docs[item.name])
        lines.append(f"    {item.name}: {_yaml_value(item.default)}")
    lines += [
        "  # search (mode search): leaves NAME__DIST: ARGS mirroring the spec, e.g.",
        "  # search:",
        "  #   config.learning_rate__loguniform: [1.0e-4, 1.0e-3]",
        "  #   config.discount__choice: [0.99, 0.995]",
    ]
    return "\n".join(lines) + "\n"


# --- helpers --------------------------------------------------------------------------------


def _build(cls: type, values: Mapping[str, Any], where: str):
    types_ = field_types(cls)
    checked = {}
    for key, value in values.items():
        if key not in types_:
            raise SpecError(unknown_key(where, key, list(types_)))
        try:
            checked[key] = coerce(f"{where}.{key}", types_[key], value)
        except TypeError as error:
            raise SpecError(str(error)) from None
    return cls(**checked)


def _check_config(trainer, values: Mapping[str, Any]) -> dict[str, Any]:
    config_class = trainer.config_class
    types_ = field_types(config_class)
    owners = {field: source for source, field in getattr(trainer, "meta_fields", {}).items()}
    checked = {}
    for key, value in values.items():
        if key in owners:
            where = "env" if owners[key] == "env" else f"meta.{owners[key]}"
            raise SpecError(f"config.{key} comes from the spec's {where}; set it there")
        if key not in types_:
            valid = [name for name in types_ if name not in owners]
            raise SpecError(unknown_key(f"config ({config_class.__name__})", key, valid))
        try:
            checked[key] = coerce(f"config.{key}", types_[key], value)
        except TypeError as error:
            raise SpecError(str(error)) from None
    return checked


def _check_search(spec: Spec, config_class: type, space: SearchSpace) -> None:
    types_ = field_types(config_class)
    for leaf in space.leaves:
        section, _, key = leaf.path.partition(".")
        if leaf.path == "env":
            kind = str
        elif section == "config" and key in types_:
            kind = types_[key]
        elif section == "config":
            raise SpecError(
                f"search leaf {leaf.path!r}: "
                + unknown_key(f"config ({config_class.__name__})", key, list(types_))
            )
        else:
            raise SpecError(f"search leaf {leaf.path!r}: only config.FIELD and env can be searched")
        for value in leaf.candidates():
            try:
                coerce(leaf.path, kind, value)
            except TypeError as error:
                raise SpecError(f"search leaf {leaf.path}__{leaf.dist}: {error}") from None
        if not leaf.is_categorical and not leaf.is_integer:
            try:
                coerce(leaf.path, kind, 0.5)
            except TypeError:
                raise SpecError(
                    f"search leaf {leaf.path}__{leaf.dist}: {leaf.dist} draws floats but "
                    f"{leaf.path} is an integer field; use randint, qrandint or choice"
                ) from None
    if spec.meta.sampler == "grid":
        try:
            space.grid()
        except ValueError as error:
            raise SpecError(str(error)) from None
    elif any(leaf.dist == "grid_search" for leaf in space.leaves):
        raise SpecError("grid_search leaves need meta.sampler: grid (or write choice instead)")


def _check_sessions(spec: Spec, trainer, space: SearchSpace) -> None:
    """The algorithm's own checks (its config's and its optional ``check(config)``) on the
    spec, and on each value of every categorical search leaf: a wrong env id, a missing
    extra or settings that cannot learn fail here, before the run directory exists."""
    config = spec.make_config(spec.session_seed(0, 0))
    check = getattr(trainer, "check", None)
    if check is not None:
        check(config)
    if spec.meta.distributed == "shared":
        check_shared = getattr(trainer, "check_shared", None)
        if check_shared is None:
            raise SpecError(
                f"meta.distributed: shared: algorithm {spec.algorithm!r} cannot share its "
                f"networks between sessions; use {' or '.join(shared_algorithms())}, or "
                "meta.distributed: false"
            )
        check_shared(config)
    for leaf in space.leaves:
        for value in leaf.candidates() if leaf.is_categorical else []:
            data = space.apply(spec.to_dict(), {leaf.path: value})
            del data["search"]  # one value of one leaf: no variants of the variant
            try:
                spec_from_dict(spec.name, data)
            except SpecError as error:
                raise SpecError(
                    f"{error} (search leaf {leaf.path}__{leaf.dist}: {value!r})"
                ) from None


def _parse_problem(error: Exception) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if mark is not None and problem:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _comment(doc: str) -> list[str]:
    return [f"    # {line}" for line in textwrap.wrap(doc, 90)] or ["    #"]


def _plain(value: Any) -> Any:
    """Tuples as lists, so yaml.safe_dump writes plain YAML."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _yaml_value(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(_plain(value), default_flow_style=True).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def _slug(env: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", env.split(":")[-1]).strip("_").lower()
