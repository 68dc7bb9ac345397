"""Strings equal to the code's literals but not the same objects, as JSON, a command line or a user give
them: every option must be compared by value (a ``==`` mutated into ``is`` must fail)."""

from __future__ import annotations

import sys


def fresh(text: str) -> str:
    """An equal string that is not the interned one."""
    out = "".join(list(text))
    assert out == text and (out is not sys.intern(text) or len(text) <= 1)
    return out
