"""Conversion of other libraries' arrays (torch, CuPy, JAX, array-api-strict, ...) to NumPy float64.

Filled in by the Array API work; until then only NumPy arrays and Python sequences are accepted.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def foreign_to_numpy(obj: Any, name: str) -> np.ndarray | None:
    """Return ``obj`` as a NumPy array if it is another library's array, else ``None``."""
    return None
