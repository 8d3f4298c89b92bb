"""Imports point one way: ``batchenv.workers`` (processes, transports, Ray actors) never
imports the layer above it (the batch envs and ``make``), not even inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import batchenv.workers

WORKERS = Path(batchenv.workers.__file__).parent
ABOVE = (
    "batchenv.make",
    "batchenv.batch_env",
    "batchenv.async_batch_env",
    "batchenv.vector",
    "batchenv.in_graph",
    "batchenv.experiment",
)


def imported(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names, at any depth; for
    ``from batchenv import x`` also ``batchenv.x`` (it may be a module)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", sorted(WORKERS.glob("*.py")), ids=lambda path: path.name)
def test_worker_modules_never_import_the_layer_above(path):
    names = imported(ast.parse(path.read_text(), str(path)))
    upward = sorted(n for n in names if any(n == a or n.startswith(a + ".") for a in ABOVE))
    assert not upward, f"{path.name} imports {upward}"
