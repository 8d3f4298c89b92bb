"""A spec's ``search`` section: leaves ``name__dist: args`` as Optuna distributions.

The section mirrors the spec's structure (SLM Lab's convention); a leaf's key is the field
name, two underscores and a distribution, nested or dotted:

    search:
      config:
        learning_rate__loguniform: [1.0e-4, 1.0e-3]
      config.discount__choice: [0.99, 0.995]

Distributions (Ray Tune's names and bounds, so a spec reads the same on both backends):

=============== ===================== ===============================================
leaf            args                  values
=============== ===================== ===============================================
uniform         [low, high]           floats in [low, high]
loguniform      [low, high]           floats, log scale, low > 0
quniform        [low, high, q]        floats low, low + q, ... up to high
randint         [low, high]           integers low .. high - 1 (high excluded)
lograndint      [low, high]           integers, log scale, high excluded
qrandint        [low, high, q]        integers low, low + q, ... up to high
choice          [a, b, ...]           one of the values (lists allowed: [[64], [64, 64]])
grid_search     [a, b, ...]           every value, with ``meta.sampler: grid``
=============== ===================== ===============================================

    >>> space = SearchSpace.parse({"config": {"learning_rate__loguniform": [1e-4, 1e-3]}})
    >>> space.names
    ['config.learning_rate']
    >>> space.apply({"config": {}}, {"config.learning_rate": 3e-4})
    {'config': {'learning_rate': 0.0003}}
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DISTRIBUTIONS", "Leaf", "SearchSpace"]

#: The distribution names a leaf may use, and how many arguments each takes (None: a list).
DISTRIBUTIONS: dict[str, int | None] = {
    "uniform": 2,
    "loguniform": 2,
    "quniform": 3,
    "randint": 2,
    "lograndint": 2,
    "qrandint": 3,
    "choice": None,
    "grid_search": None,
}
_INTEGER = ("randint", "lograndint", "qrandint")
_CATEGORICAL = ("choice", "grid_search")


@dataclass(frozen=True)
class Leaf:
    """One searched value: its dotted ``path`` in the spec, distribution and arguments."""

    path: str
    dist: str
    args: tuple

    @property
    def is_integer(self) -> bool:
        return self.dist in _INTEGER

    @property
    def is_categorical(self) -> bool:
        return self.dist in _CATEGORICAL

    def candidates(self) -> list[Any]:
        """Values to check against the field's type: the choices, or the bounds."""
        if self.is_categorical:
            return list(self.args)
        low, high = self.args[0], self.args[1]
        return [low, high - 1 if self.dist in ("randint", "lograndint") else high]

    def distribution(self):
        """The Optuna distribution of this leaf."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.is_categorical:
            return CategoricalDistribution([_encode(value) for value in self.args])
        low, high = self.args[0], self.args[1]
        if self.dist == "uniform":
            return FloatDistribution(low, high)
        if self.dist == "loguniform":
            return FloatDistribution(low, high, log=True)
        if self.dist == "quniform":
            return FloatDistribution(low, high, step=self.args[2])
        if self.dist == "randint":
            return IntDistribution(low, high - 1)
        if self.dist == "lograndint":
            return IntDistribution(low, high - 1, log=True)
        return IntDistribution(low, high, step=self.args[2])

    def decode(self, value: Any) -> Any:
        """The spec value of an Optuna parameter value."""
        if self.is_categorical and isinstance(value, str):
            for choice in self.args:
                if _encode(choice) == value:
                    return copy.deepcopy(choice)
        return value


class SearchSpace:
    """The leaves of a spec's ``search`` section (see the module docstring)."""

    def __init__(self, leaves: list[Leaf]):
        self.leaves = leaves

    @classmethod
    def parse(cls, search: Mapping[str, Any] | None) -> SearchSpace:
        """Read the ``search`` section; ValueError names the first bad leaf."""
        leaves: list[Leaf] = []
        for path, args in _flatten(search or {}, ""):
            name, sep, dist = path.rpartition("__")
            if not sep or not name:
                raise ValueError(
                    f"search leaf {path!r} has no distribution: write {path}__DIST: ARGS with "
                    f"DIST one of {', '.join(DISTRIBUTIONS)}"
                )
            if dist not in DISTRIBUTIONS:
                close = difflib.get_close_matches(dist, list(DISTRIBUTIONS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"search leaf {path!r}: unknown distribution {dist!r}{hint}; use one of "
                    f"{', '.join(DISTRIBUTIONS)}"
                )
            leaves.append(Leaf(name, dist, _check_args(path, dist, args)))
        names = [leaf.path for leaf in leaves]
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate:
            raise ValueError(f"search names {duplicate!r} twice")
        return cls(leaves)

    @property
    def names(self) -> list[str]:
        return [leaf.path for leaf in self.leaves]

    def __bool__(self) -> bool:
        return bool(self.leaves)

    def distributions(self) -> dict[str, Any]:
        """``{path: optuna distribution}``."""
        return {leaf.path: leaf.distribution() for leaf in self.leaves}

    def grid(self) -> dict[str, list]:
        """The search space of Optuna's GridSampler; ValueError unless every leaf is
        ``grid_search`` or ``choice``."""
        loose = [leaf.path for leaf in self.leaves if not leaf.is_categorical]
        if loose:
            raise ValueError(
                f"meta.sampler 'grid' needs grid_search or choice leaves, but {loose[0]!r} is "
                "a distribution; use another sampler or list its values"
            )
        return {leaf.path: [_encode(value) for value in leaf.args] for leaf in self.leaves}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna's params as spec values ``{path: value}``."""
        by_path = {leaf.path: leaf for leaf in self.leaves}
        return {path: by_path[path].decode(value) for path, value in params.items()}

    def apply(self, spec: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of the spec dict ``spec`` with each ``{dotted path: value}`` set."""
        result = copy.deepcopy(dict(spec))
        for path, value in values.items():
            node = result
            *parents, last = path.split(".")
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = value
        return result


def _flatten(node: Mapping[str, Any], prefix: str):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and "__" not in str(key):
            yield from _flatten(value, f"{path}.")
        else:
            yield path, value


def _check_args(path: str, dist: str, args: Any) -> tuple:
    count = DISTRIBUTIONS[dist]
    if count is None:
        if not isinstance(args, list) or not args:
            raise ValueError(f"search leaf {path!r}: {dist} takes a non-empty list of values")
        return tuple(args)
    if not isinstance(args, list) or len(args) != count:
        shape = "[low, high]" if count == 2 else "[low, high, q]"
        raise ValueError(f"search leaf {path!r}: {dist} takes {shape}, got {args!r}")
    try:
        numbers = tuple(float(value) for value in args)
    except (TypeError, ValueError):
        raise ValueError(f"search leaf {path!r}: {dist} takes numbers, got {args!r}") from None
    if dist in _INTEGER:
        if not all(number.is_integer() for number in numbers):
            raise ValueError(f"search leaf {path!r}: {dist} takes integers, got {args!r}")
        numbers = tuple(int(number) for number in numbers)
    low, high = numbers[0], numbers[1]
    if not low < high:
        raise ValueError(f"search leaf {path!r}: {dist} needs low < high, got {args!r}")
    if dist.startswith("log") and low <= 0:
        raise ValueError(f"search leaf {path!r}: {dist} needs low > 0, got {args!r}")
    if count == 3 and not numbers[2] > 0:
        raise ValueError(f"search leaf {path!r}: {dist} needs q > 0, got {args!r}")
    return numbers


def _encode(value: Any) -> Any:
    """Optuna's categorical choices must be None, bool, int, float or str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)
