"""The precision policy: which dtypes a backend computes in, as the tolerance model reads it.

:class:`PrecisionPolicy` is what a backend declares (``rope_ref.conformance.protocol`` re-exports it) and
what :mod:`rope_ref.tolerance` and :mod:`rope_ref.testing` judge by.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PrecisionPolicy", "DTYPES", "PRECISION_ALIASES", "canonical_dtype"]

#: Floating dtypes the suite knows, widest first.
DTYPES = ("float64", "float32", "float16", "bfloat16")

#: Short names accepted on the command line.
PRECISION_ALIASES = {
    "fp64": "float64",
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
}


def canonical_dtype(name: str, argument: str = "dtype") -> str:
    """Map ``fp32``/``float32``/... to the canonical name, raising ``ValueError`` naming ``argument``."""
    if not isinstance(name, str) or name not in PRECISION_ALIASES:
        raise ValueError(f"{argument} must be one of {sorted(PRECISION_ALIASES)}, got {name!r}")
    return PRECISION_ALIASES[name]


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a backend computes, declared to the tolerance model.

    ``io_dtype``: dtype of activations in and out (x, y, gradients).
    ``angle_dtype``: dtype of position * inv_freq and of cos/sin evaluation.
    ``compute_dtype``: dtype of the rotation arithmetic x*cos - y*sin.
    """

    io_dtype: str = "float64"
    angle_dtype: str = "float64"
    compute_dtype: str = "float64"

    def __post_init__(self) -> None:
        for field in ("io_dtype", "angle_dtype", "compute_dtype"):
            object.__setattr__(self, field, canonical_dtype(getattr(self, field), field))
