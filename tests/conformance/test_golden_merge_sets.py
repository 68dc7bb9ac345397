"""Merging at the helpers (``conformance/golden_merge.py``): which cases a ``--name`` run owns, and the
manifest it writes over an existing set (hand-written manifests; expected values spelled out here).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("case_id", "owned"),
    [
        ("cos_sin-m7", True),
        ("cos_sin-m7-fp32", True),
        ("cos_sin-m7-bf16", True),
        ("cos_sin-m7-extra", False),  # another model whose name starts with "m7-"
        ("cos_sin-m7-fp8", False),
        ("cos_sin-m", False),
        ("apply-m7", False),  # the op is part of the stem
    ],
)
def test_in_group_owns_the_name_and_its_dtype_suffixes_only(case_id, owned):
    from rope_ref.conformance.golden_merge import in_group

    assert in_group({"op": "cos_sin", "id": case_id}, "m7") is owned


def _manifest(generator: str, bug_classes: dict, *entries: dict, generators: dict | None = None) -> dict:
    from test_golden_manifest import _manifest as hand_manifest

    m = hand_manifest()
    m["provenance"]["generator"] = generator
    if generators is not None:
        m["provenance"]["informational"] = {"generators": generators}
    m["bug_classes"] = bug_classes
    m["cases"] = list(entries)
    return m


def _entry(case_id: str, op: str, bug_class: str) -> dict:
    from test_golden_manifest import _case

    return dict(_case(case_id), op=op, bug_class=bug_class)


def test_merge_keeps_the_other_cases_first_with_their_commands_and_bug_classes():
    from rope_ref.conformance.golden_merge import merge_sets

    old_cases = [_entry("cos_sin-old", "cos_sin", "tables"), _entry("apply-old-fp32", "apply", "rotation")]
    old = _manifest("cmd old", {"tables": "t", "rotation": "r"}, *old_cases)  # written before merging existed
    new = _manifest("cmd new", {"decay": "d"}, _entry("cos_sin-new", "cos_sin", "decay"))
    kept, merged = merge_sets(Path("out"), old, new, "new", command="cmd new")
    assert kept == old_cases
    assert [c["id"] for c in merged["cases"]] == ["cos_sin-old", "apply-old-fp32", "cos_sin-new"]
    assert merged["provenance"]["generator"] == "cmd old && cmd new"
    assert merged["provenance"]["informational"]["generators"] == {"old": "cmd old", "new": "cmd new"}
    assert merged["bug_classes"] == {"decay": "d", "rotation": "r", "tables": "t"}


def test_merge_replaces_the_groups_own_command():
    from rope_ref.conformance.golden_merge import merge_sets

    recorded = {"a": "cmd a", "b": "cmd b old"}
    old = _manifest(
        "cmd a && cmd b old",
        {"tables": "t"},
        _entry("cos_sin-a", "cos_sin", "tables"),
        _entry("cos_sin-b", "cos_sin", "tables"),
        generators=recorded,
    )
    new = _manifest("cmd b new", {"tables": "t"}, _entry("cos_sin-b", "cos_sin", "tables"))
    kept, merged = merge_sets(Path("out"), old, new, "b", command="cmd b new")
    assert [c["id"] for c in kept] == ["cos_sin-a"]
    assert merged["provenance"]["informational"]["generators"] == {"a": "cmd a", "b": "cmd b new"}
    assert merged["provenance"]["generator"] == "cmd a && cmd b new"


def test_merge_refuses_a_kept_case_with_a_new_cases_id():
    from rope_ref.conformance.golden_merge import merge_sets
    from rope_ref.conformance.golden_target import GoldenWriteError

    old = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-x-y", "cos_sin", "tables"))  # group "x-y"
    new = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-x-y", "cos_sin", "tables"))
    with pytest.raises(GoldenWriteError, match="its case 'cos_sin-x-y' has the id of a case this run writes"):
        merge_sets(Path("out"), old, new, "x", command="cmd")


def test_merge_refuses_a_named_run_over_the_catalogue():
    from rope_ref.conformance.golden_merge import merge_sets
    from rope_ref.conformance.golden_target import GoldenWriteError

    old = _manifest(
        "rope-ref golden generate --out DIR", {"tables": "t"}, _entry("cos_sin-c", "cos_sin", "tables")
    )
    old["provenance"]["source"] = "catalogue"
    new = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-n", "cos_sin", "tables"))
    with pytest.raises(GoldenWriteError, match=r"it holds the catalogue \(1 cases\), not a --preset"):
        merge_sets(Path("out"), old, new, "n", command="cmd")
