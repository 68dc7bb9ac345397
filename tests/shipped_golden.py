"""The shipped golden set and the catalogue it is generated from, each built once per test process; every
caller gets its own deep copy.

Reading the set (schema, sha256 of 750 files, safetensors headers) or building the catalogue takes about half
a second; a deep copy of the cases takes a tenth of that, and keeps the rule that no test sees another
test's changes.
"""

from __future__ import annotations

import copy
import functools

from rope_ref.conformance.catalogue import build_catalogue
from rope_ref.conformance.golden import load_golden


@functools.cache
def _loaded() -> tuple:
    return tuple(load_golden())


def shipped_cases() -> list:
    """Every case of the shipped golden set, in manifest order (``load_golden()``), as a private deep copy."""
    return copy.deepcopy(list(_loaded()))


@functools.cache
def _built() -> tuple:
    return tuple(build_catalogue())


def catalogue_cases() -> list:
    """Every case of the catalogue (``build_catalogue()``), as a private deep copy."""
    return copy.deepcopy(list(_built()))
