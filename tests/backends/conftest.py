"""Fixtures shared by the backend tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def compiling(monkeypatch):
    """Make the torch adapter believe it runs under torch.compile (the branches Dynamo would take)."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
