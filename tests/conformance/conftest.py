"""Fixtures shared by the conformance tests: the shipped golden set, loaded once per test module."""

from __future__ import annotations

import pytest
from shipped_golden import shipped_cases


@pytest.fixture(scope="module")
def cases():
    """Every case of the shipped golden set (a private copy per module: a test may not change another's)."""
    return shipped_cases()


@pytest.fixture(scope="module")
def by_id(cases):
    return {c.id: c for c in cases}
