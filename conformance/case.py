"""Re-export of :mod:`rope_ref.case`: :class:`Case` and :data:`OPS` live below the conformance suite."""

from rope_ref.case import OPS, Case

__all__ = ["Case", "OPS"]
