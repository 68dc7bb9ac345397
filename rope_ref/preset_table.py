"""A family's table of released-model presets by name (per-layer, MLA, M-RoPE and vision RoPE).

Each family module keeps its builders in a :class:`PresetTable` and exposes ``preset(name)`` and
``preset_names()`` from it, so the lookup and its error message are written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PresetTable"]


class PresetTable:
    """Builders of one family's presets, keyed by name; ``what`` names the family in error messages."""

    def __init__(self, what: str, builders: dict[str, Callable[[], Any]]) -> None:
        self._what = what
        self._builders = builders

    def names(self) -> list[str]:
        """Names accepted by :func:`preset`."""
        return sorted(self._builders)

    def build(self, name: str) -> Any:
        """The preset called ``name``; ``ValueError`` listing the known names for an unknown one."""
        if name not in self._builders:
            raise ValueError(f"unknown {self._what} preset {name!r}; known: {self.names()}")
        return self._builders[name]()
