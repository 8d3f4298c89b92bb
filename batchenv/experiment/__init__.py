"""Reproducible experiments (SLM Lab's layer): spec files, sessions, trials, search.

    batchenv run specs/batchppo.yaml cartpole --mode train     # a trial of 4 seeds
    batchenv run specs/search.yaml --mode search               # an Optuna search
    batchenv run specs/search.yaml --mode search --backend ray # the same on Ray Tune
    batchenv run --resume runs/cartpole_20261125-101500        # continue what was cut short
    batchenv spec batchppo > my_spec.yaml                      # every field, documented

From Python:

    >>> from batchenv.experiment import run
    >>> result = run("specs/batchppo.yaml", "cartpole", mode="train")
    >>> result.path, result.best.metrics["strength"]

Modules: ``spec`` (spec files, checks, templates), ``search_space`` (search leaves as Optuna
distributions), ``trainers`` (the protocol an algorithm follows), ``session`` / ``trial`` /
``experiment`` (the three units), ``pool`` (session processes in a CPU budget),
``executors`` (where trials run), ``ray_backend`` / ``ray_tune`` (a search on Ray Tune,
``--backend ray``), ``samplers`` (the spec's Optuna sampler, for both backends),
``metrics`` (SLM Lab's metrics), ``baseline`` (the random-policy return), ``plots``
(matplotlib PNGs), ``benchmark`` (the benchmark table). Importing this package imports
neither torch nor Optuna nor Ray.
"""

from .experiment import ExperimentResult, run
from .spec import Meta, Spec, SpecError, load_spec, template
from .trainers import Trainer, load_trainer

__all__ = [
    "ExperimentResult",
    "Meta",
    "Spec",
    "SpecError",
    "Trainer",
    "load_spec",
    "load_trainer",
    "run",
    "template",
]
