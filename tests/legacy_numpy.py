"""NumPy's legacy array subclasses, built for tests that check they are refused.

``np.matrix`` emits a ``PendingDeprecationWarning`` when constructed; the suite runs with
``filterwarnings = error``, so the one place that builds it silences exactly that warning.
"""

from __future__ import annotations

import warnings

import numpy as np


def matrix(values) -> np.matrix:
    """``np.matrix(values)`` without its PendingDeprecationWarning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "the matrix subclass", PendingDeprecationWarning)
        return np.matrix(values)
