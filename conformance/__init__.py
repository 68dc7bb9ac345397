"""The conformance suite: golden vectors, a tolerance model and a runner for any RoPE backend.

Installed as ``rope_ref.conformance``. See ``docs/writing-a-backend.md``.
"""

from .protocol import DTYPES, UNSUPPORTED_REASONS, Backend, PrecisionPolicy, Unsupported
from .registry import BackendUnavailable, get_backend

__all__ = [
    "DTYPES",
    "UNSUPPORTED_REASONS",
    "Backend",
    "BackendUnavailable",
    "PrecisionPolicy",
    "Unsupported",
    "get_backend",
]
