"""The Optuna sampler of a spec, shared by both backends (imports Optuna: import lazily).

Both the local backend's study and the Ray backend's ``OptunaSearch`` get their sampler
here, built from ``meta.sampler`` and seeded with ``meta.seed``, so the same spec suggests
the same values in the same order on either backend, and a resumed search the values the
uninterrupted one would have: the randomness of trial N comes from ``(meta.seed, N)``
alone (:class:`TrialSeeded`), not from a generator that a new process starts over.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from .spec import Spec

__all__ = ["GridSampler", "TrialSeeded", "make_sampler", "trial_seed"]


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its ``study.stop()`` call at the end of the grid, which
    only works inside ``study.optimize()``; the executors ask for no more trials than the
    grid has. A module-level class, so that Ray Tune can pickle the searcher's state.

    Resuming needs nothing more: trial N takes grid point N of a grid shuffled once with
    the seed."""

    def after_trial(self, study, trial, state, values) -> None:
        pass


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number``'s randomness in a search seeded with ``seed`` (32 bits;
    neighbouring seeds and numbers give unrelated ones).

        >>> trial_seed(0, 1) == trial_seed(0, 1) != trial_seed(1, 0)
        True
    """
    return random.Random(f"batchenv search {seed} trial {number}").getrandbits(32)


class TrialSeeded(BaseSampler):
    """An Optuna sampler whose randomness in trial N is seeded with ``trial_seed(seed, N)``.

    Each trial gets a fresh ``kind(seed=trial_seed(seed, N))`` (TPE, random or CMA-ES keep
    no state of their own between trials but their generator: what they learn, they read
    from the study), so trial N's values depend on the seed, N and the trials told before
    it, whichever process asks.

        >>> sampler = TrialSeeded(optuna.samplers.RandomSampler, seed=5)
        >>> study = optuna.create_study(sampler=sampler)
    """

    def __init__(self, kind: type[BaseSampler], seed: int):
        self.kind = kind
        self.seed = seed
        self._current: tuple[int, BaseSampler] | None = None

    def for_trial(self, number: int) -> BaseSampler:
        """The sampler of trial ``number`` (kept while that trial asks for its values)."""
        if self._current is None or self._current[0] != number:
            self._current = (number, self.kind(seed=trial_seed(self.seed, number)))
        return self._current[1]

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.for_trial(trial.number).infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.for_trial(trial.number).sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        sampler = self.for_trial(trial.number)
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.for_trial(trial.number).before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.for_trial(trial.number).after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Nothing: a trial's seed is fixed by design (Optuna calls this in forked workers
        of ``study.optimize(n_jobs=...)``, which batchenv does not use)."""


def make_sampler(spec: Spec) -> BaseSampler:
    """The sampler of ``spec.meta.sampler`` (tpe, random, grid, cmaes), seeded with
    ``meta.seed``."""
    seed = spec.meta.seed
    if spec.meta.sampler == "grid":
        return GridSampler(spec.space.grid(), seed=seed)
    kinds = {
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
        "cmaes": optuna.samplers.CmaEsSampler,
    }
    return TrialSeeded(kinds[spec.meta.sampler], seed)
