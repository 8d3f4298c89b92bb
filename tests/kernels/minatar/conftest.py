"""Fixtures of the MinAtar tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def minatar():
    """The reference ``minatar`` package, or a skip saying how to get it."""
    return pytest.importorskip(
        "minatar", reason="needs the reference: pip install 'batchenv[minatar]'"
    )
