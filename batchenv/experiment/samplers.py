"""The Optuna sampler of a spec, shared by both backends (imports Optuna: import lazily).

Both the local backend's study and the Ray backend's ``OptunaSearch`` get their sampler
here, built from ``meta.sampler`` and seeded with ``meta.seed``, so the same spec suggests
the same values in the same order on either backend.
"""

from __future__ import annotations

import optuna

from .spec import Spec

__all__ = ["GridSampler", "make_sampler"]


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its ``study.stop()`` call at the end of the grid, which
    only works inside ``study.optimize()``; the executors ask for no more trials than the
    grid has. A module-level class, so that Ray Tune can pickle the searcher's state."""

    def after_trial(self, study, trial, state, values) -> None:
        pass


def make_sampler(spec: Spec) -> optuna.samplers.BaseSampler:
    """The sampler of ``spec.meta.sampler`` (tpe, random, grid, cmaes), seeded with
    ``meta.seed``."""
    seed = spec.meta.seed
    if spec.meta.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if spec.meta.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.meta.sampler == "grid":
        return GridSampler(spec.space.grid(), seed=seed)
    return optuna.samplers.CmaEsSampler(seed=seed)
