"""Inductor's dtype rules set up once per process instead of once per generated operation.

Inductor's ``DtypePropagationOpsHandler`` is a singleton whose ``__init__`` re-creates its ~300
per-op rules (and checks them against every op name) each time it is constructed, which its
code generator does for every operation it emits. Compiling PPO's rollout chunk on CartPole
(a few thousand operations) spent a tenth of its time there (py-spy), and the cold compile took
67 s instead of 82 s with the setup done once.

:func:`install` makes ``__init__`` set the rules up again only when the tables they come from
have changed since the last setup (an op registered later, a rule replaced), so the handler
always has the rules torch would give it. It uses private Inductor API; where the names are not
found, nothing is changed.
"""

from __future__ import annotations

import functools


@functools.cache
def install() -> bool:
    """Patch the handler's ``__init__`` (once); False where this torch lacks the pieces."""
    try:
        from torch._inductor import dtype_propagation, utils
        from torch._inductor.codegen import common
    except ImportError:  # pragma: no cover - a torch without Inductor
        return False
    handler = getattr(dtype_propagation, "DtypePropagationOpsHandler", None)
    rules = getattr(utils, "op_dtype_propagation_rules", None)
    overrides = getattr(common, "pointwise_overrides_data", None)
    if handler is None or not isinstance(rules, dict) or not isinstance(overrides, dict):
        return False  # pragma: no cover - another torch's layout
    setup = handler.__init__

    def init_when_changed(self) -> None:
        seen = self.__dict__.get("_batchenv_tables")
        if seen is not None and seen == (rules, len(overrides), utils.boolean_ops()):
            return  # compared in place; the tables are copied only when set up
        setup(self)
        self._batchenv_tables = (dict(rules), len(overrides), utils.boolean_ops())

    handler.__init__ = init_when_changed
    return True
