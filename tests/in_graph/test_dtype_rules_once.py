"""Inductor's dtype rules are set up once, and again whenever their tables change."""

from __future__ import annotations

import torch
from torch._inductor import dtype_propagation, utils
from torch._inductor.codegen import common
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND

from batchenv.in_graph import _dtype_rules_once
from batchenv.in_graph.rollout import compile_program


def test_compile_program_installs_it_and_every_rule_is_there():
    program = compile_program(lambda x: (x * 3).sin() > 0, "cpu")
    assert program(torch.ones(4)).tolist() == [True] * 4
    assert _dtype_rules_once.install() is True
    handler = dtype_propagation.DtypePropagationOpsHandler()
    names = [*utils.op_dtype_propagation_rules, *utils.boolean_ops()]
    names += [op.name for op in common.pointwise_overrides_data.values()]
    assert all(callable(getattr(handler, name)) for name in names)


def test_the_rules_are_set_up_again_only_when_their_tables_change(monkeypatch):
    handlers = dtype_propagation.DtypePropagationOpsHandler
    _dtype_rules_once.install()
    name = next(iter(utils.op_dtype_propagation_rules))
    rule = handlers().__dict__.pop(name)  # removed behind the handler's back
    try:
        assert name not in handlers().__dict__  # tables unchanged: not set up again
        monkeypatch.setitem(
            utils.op_dtype_propagation_rules,
            "batchenv_test_op",
            utils.OpDtypeRule(ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT, torch.int8),
        )
        handler = handlers()  # a rule was added: set up again, in full
        assert handler.batchenv_test_op(torch.float32) == torch.int8
        assert name in handler.__dict__
    finally:
        handlers().__dict__.setdefault(name, rule)
        monkeypatch.undo()
        handlers().__dict__.pop("batchenv_test_op", None)
