"""The shared preset lookup (rope_ref.preset_table.PresetTable), at the helper itself."""

from __future__ import annotations

import pytest

from rope_ref.preset_table import PresetTable


def test_names_are_sorted_and_each_build_is_fresh():
    table = PresetTable("toy", {"zeta": lambda: ["z"], "alpha": lambda: ["a"]})
    assert table.names() == ["alpha", "zeta"]  # sorted, not insertion order
    first = table.build("alpha")
    first.append("changed")
    assert table.build("alpha") == ["a"]  # a new object each call: a caller's change does not leak


def test_unknown_name_names_the_family_and_lists_the_known_ones():
    table = PresetTable("toy", {"zeta": lambda: 1, "alpha": lambda: 2})
    with pytest.raises(ValueError, match=r"^unknown toy preset 'beta'; known: \['alpha', 'zeta'\]$"):
        table.build("beta")
