"""pytest plugin: the ``rope_assert`` fixture, :mod:`rope_ref.testing` in one line of a test.

Registered through the ``pytest11`` entry point ``rope_ref_testing = "rope_ref.testing_plugin"``, so
an installed rope-ref makes the fixture available everywhere; without the entry point, add
``pytest_plugins = ["rope_ref.testing_plugin"]`` to the root ``conftest.py``. Usage::

    def test_my_rope(rope_assert):
        rope_assert(my_rope(q, position_ids), q, position_ids, cfg, axes="bhsd")

``rope_assert.cos_sin``, ``rope_assert.inv_freq`` and ``rope_assert.vjp`` are the companions. Importing
this module loads neither torch nor the conformance suite.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["RopeAssert", "rope_assert"]


class RopeAssert:
    """Callable namespace over :mod:`rope_ref.testing` (imported on first use)."""

    def __call__(self, actual: Any, x: Any, positions: Any, cfg: Any, **kwargs: Any) -> None:
        """:func:`rope_ref.testing.assert_rope_close`."""
        __tracebackhide__ = True
        from rope_ref.testing import assert_rope_close

        assert_rope_close(actual, x, positions, cfg, **kwargs)

    def vjp(self, actual_grad_x: Any, x: Any, positions: Any, cfg: Any, grad_out: Any, **kwargs: Any) -> None:
        """:func:`rope_ref.testing.assert_rope_vjp_close`."""
        __tracebackhide__ = True
        from rope_ref.testing import assert_rope_vjp_close

        assert_rope_vjp_close(actual_grad_x, x, positions, cfg, grad_out, **kwargs)

    def cos_sin(self, cos: Any, sin: Any, positions: Any, cfg: Any, **kwargs: Any) -> None:
        """:func:`rope_ref.testing.assert_cos_sin_close`."""
        __tracebackhide__ = True
        from rope_ref.testing import assert_cos_sin_close

        assert_cos_sin_close(cos, sin, positions, cfg, **kwargs)

    def inv_freq(self, actual: Any, cfg: Any, **kwargs: Any) -> None:
        """:func:`rope_ref.testing.assert_inv_freq_close`."""
        __tracebackhide__ = True
        from rope_ref.testing import assert_inv_freq_close

        assert_inv_freq_close(actual, cfg, **kwargs)


@pytest.fixture
def rope_assert() -> RopeAssert:
    """Assert a RoPE output, table or gradient matches the oracle within the conformance tolerance."""
    return RopeAssert()
