"""Re-export of :mod:`rope_ref.tolerance`, the tolerance model (``docs/tolerance.md``).

The model lives in rope_ref, below both :mod:`rope_ref.testing` and the conformance runner, which
judge with the same code; this module keeps the old import path (and the private ``_worst`` and
``_rotation_bounds`` that tests and callers use).
"""

from rope_ref.tolerance import *  # noqa: F403
from rope_ref.tolerance import __all__, _rotation_bounds, _worst  # noqa: F401
