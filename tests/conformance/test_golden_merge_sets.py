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


def test_merged_provenance_and_descriptions_are_the_new_runs_with_the_commands_added():
    """The new run's provenance (version, licence, its informational record) and its bug-class wording win;
    only the commands of the kept groups are carried over from the old manifest."""
    from rope_ref.conformance.golden_merge import merge_sets

    old = _manifest(
        "cmd old",
        {"tables": "old wording", "rotation": "kept class"},
        _entry("cos_sin-old", "cos_sin", "rotation"),
        generators={"old": "cmd old"},
    )
    old["provenance"].update(rope_ref_version="0.1-old", numpy_version="1.0", license="OLD-1.0")
    old["provenance"]["informational"]["host"] = "old-box"
    new = _manifest("cmd new", {"tables": "new wording"}, _entry("cos_sin-new", "cos_sin", "tables"))
    new["provenance"].update(rope_ref_version="0.2-new", informational={"host": "new-box", "torch": "9.9"})
    _, merged = merge_sets(Path("out"), old, new, "new", command="cmd new")
    assert merged["provenance"] == {
        "rope_ref_version": "0.2-new",
        "generator": "cmd old && cmd new",
        "source": "custom",
        "informational": {
            "host": "new-box",
            "torch": "9.9",
            "generators": {"old": "cmd old", "new": "cmd new"},
        },
    }
    assert merged["bug_classes"] == {"rotation": "kept class", "tables": "new wording"}
    assert new["provenance"]["generator"] == "cmd new"  # the run's own manifest is not edited
    assert new["provenance"]["informational"] == {"host": "new-box", "torch": "9.9"}


@pytest.mark.parametrize(
    ("case_id", "op", "name"),
    [
        ("cos_sin-m7", "cos_sin", "m7"),
        ("cos_sin-m7-bf16", "cos_sin", "m7"),
        ("cos_sin-llama-2-7b-fp32", "cos_sin", "llama-2-7b"),  # a hyphenated name keeps all of its parts
        ("cos_sin-llama-2-7b", "cos_sin", "llama-2-7b"),
        ("cos_sin-m7-fp8", "cos_sin", "m7-fp8"),  # not a dtype suffix: part of the name
        ("apply-m7", "cos_sin", "apply-m7"),  # another op's prefix is not stripped
        ("cos_sin-fp32", "cos_sin", "fp32"),  # a name that is a dtype suffix alone is the name
    ],
)
def test_group_of_recovers_the_set_name_of_a_custom_case_id(case_id, op, name):
    from rope_ref.conformance.golden_merge import _group_of

    assert _group_of({"op": op, "id": case_id}) == name


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
        "rope-ref golden generate --out DIR",
        {"tables": "t"},
        _entry("cos_sin-c", "cos_sin", "tables"),
        _entry("apply-c", "apply", "tables"),
    )
    old["provenance"]["source"] = "catalogue"
    new = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-n", "cos_sin", "tables"))
    with pytest.raises(GoldenWriteError, match=r"it holds the catalogue \(2 cases\), not a --preset"):
        merge_sets(Path("out"), old, new, "n", command="cmd")


def test_a_run_that_owns_the_whole_set_takes_the_new_manifest_as_is():
    from rope_ref.conformance.golden_merge import merge_sets

    old = _manifest("cmd old", {"tables": "t"}, _entry("cos_sin-old", "cos_sin", "tables"))
    new = _manifest("cmd new", {"rotation": "r"}, _entry("apply-new", "apply", "rotation"))
    assert merge_sets(Path("out"), old, new, None, command="cmd new") == ([], new)
    old["provenance"]["source"] = new["provenance"]["source"] = "catalogue"
    assert merge_sets(Path("out"), old, new, None, command="cmd new") == ([], new)
    old["cases"] = []
    assert merge_sets(Path("out"), old, new, "new", command="cmd new") == ([], new)  # an empty catalogue


def test_a_whole_set_run_over_another_source_or_format_is_refused():
    from rope_ref.conformance.golden_merge import merge_sets
    from rope_ref.conformance.golden_target import GoldenWriteError

    old = _manifest(
        "cmd",
        {"tables": "t"},
        _entry("cos_sin-a", "cos_sin", "tables"),
        _entry("cos_sin-b", "cos_sin", "tables"),
    )
    new = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-c", "cos_sin", "tables"))
    new["provenance"]["source"] = "catalogue"
    with pytest.raises(
        GoldenWriteError, match=r"--out out: it holds a custom set of 2 case\(s\), not the catalogue"
    ):
        merge_sets(Path("out"), old, new, None, command="cmd")
    new["provenance"]["source"] = "custom"
    new["format"] = "npz"
    with pytest.raises(
        GoldenWriteError, match="it holds a safetensors set and this run writes npz; generating"
    ):
        merge_sets(Path("out"), old, new, "c", command="cmd")
    old["cases"] = []
    assert merge_sets(Path("out"), old, new, "c", command="cmd") == ([], new)  # nothing to keep


def test_a_kept_case_that_needs_a_replaced_case_is_refused():
    from rope_ref.conformance.golden_merge import merge_sets
    from rope_ref.conformance.golden_target import GoldenWriteError

    needed = _entry("cos_sin-n", "cos_sin", "tables")
    needs = dict(_entry("cos_sin-k", "cos_sin", "tables"), requires=["cos_sin-n"])
    old = _manifest("cmd", {"tables": "t"}, needed, needs)
    new = _manifest("cmd", {"tables": "t"}, _entry("cos_sin-n-fp32", "cos_sin", "tables"))
    with pytest.raises(
        GoldenWriteError, match="its other cases cannot be kept .*the merged manifest: schema"
    ):
        merge_sets(Path("out"), old, new, "n", command="cmd")


@pytest.mark.parametrize(
    ("ids", "key"),
    [
        (["cos_sin-m7", "cos_sin-m7-bf16"], "m7"),
        (["cos_sin-m7", "cos_sin-q2"], ""),
        (["cos_sin-a-b"], "a-b"),
        (["cos_sin-a-b-fp32", "cos_sin-a-b"], "a-b"),
    ],
)
def test_an_old_set_without_recorded_commands_is_named_by_its_cases(ids, key):
    from rope_ref.conformance.golden_merge import _generators

    old = _manifest("cmd old", {"tables": "t"}, *(_entry(i, "cos_sin", "tables") for i in ids))
    assert _generators(old) == {key: "cmd old"}
    old["provenance"]["informational"] = {"generators": {"x": 1}}  # not a map of commands: ignored
    assert _generators(old) == {key: "cmd old"}
    recorded = {"p": "cmd p", "q": "cmd q"}
    old["provenance"]["informational"] = {"generators": recorded}
    got = _generators(old)
    assert got == recorded
    got["p"] = "edited"
    assert recorded["p"] == "cmd p"


def test_merged_bug_classes_are_only_those_the_kept_and_new_cases_use():
    from rope_ref.conformance.golden_merge import merge_sets

    old = _manifest(
        "cmd old",
        {"tables": "t", "layout": "unused old", "rotation": "r"},
        _entry("cos_sin-old", "cos_sin", "rotation"),
        _entry("cos_sin-new", "cos_sin", "tables"),  # replaced by the run: its class goes unless used
    )
    new = _manifest("cmd new", {"decay": "d", "heads": "unused new"}, _entry("apply-new", "apply", "decay"))
    _, merged = merge_sets(Path("out"), old, new, "new", command="cmd new")
    assert [c["id"] for c in merged["cases"]] == ["cos_sin-old", "apply-new"]
    assert merged["bug_classes"] == {"decay": "d", "rotation": "r"}
    assert list(merged["bug_classes"]) == ["decay", "rotation"]


def test_merge_leaves_the_old_and_new_manifests_as_they_were():
    import copy

    from rope_ref.conformance.golden_merge import merge_sets

    old = _manifest("cmd old", {"tables": "t"}, _entry("cos_sin-old", "cos_sin", "tables"))
    new = _manifest("cmd new", {"tables": "t"}, _entry("cos_sin-new", "cos_sin", "tables"))
    new["provenance"]["informational"] = {"host": "box"}
    before = copy.deepcopy((old, new))
    _, merged = merge_sets(Path("out"), old, new, "new", command="cmd new")
    assert (old, new) == before
    assert merged["provenance"]["informational"] == {
        "host": "box",
        "generators": {"old": "cmd old", "new": "cmd new"},
    }


def test_a_named_run_that_replaces_every_old_case_takes_the_new_manifest_as_is():
    from rope_ref.conformance.golden_merge import merge_sets

    ids = ("cos_sin-m", "cos_sin-m-fp16")
    old = _manifest("cmd old", {"tables": "t"}, *(_entry(i, "cos_sin", "tables") for i in ids))
    new = _manifest("cmd new", {"tables": "t"}, _entry("cos_sin-m-fp32", "cos_sin", "tables"))
    kept, merged = merge_sets(Path("out"), old, new, "m", command="cmd new")
    assert kept == [] and merged is new and "informational" not in new["provenance"]


def test_the_catalogue_may_replace_an_empty_custom_set():
    from rope_ref.conformance.golden_merge import merge_sets

    old = _manifest("cmd old", {"tables": "t"})
    new = _manifest("cmd new", {"tables": "t"}, _entry("cos_sin-c", "cos_sin", "tables"))
    new["provenance"]["source"] = "catalogue"
    assert merge_sets(Path("out"), old, new, None, command="cmd new") == ([], new)


def test_a_refusal_says_what_is_dropped_and_how_to_go_on():
    from rope_ref.conformance.golden_merge import _refuse
    from rope_ref.conformance.golden_target import GoldenWriteError

    err = _refuse(Path("/sets/g"), "it holds X")
    assert isinstance(err, GoldenWriteError)
    assert str(err) == (
        "--out /sets/g: it holds X; generating there would drop cases this run does not own. Pass "
        "--replace to replace the whole set, or choose another --out (sets merge only by --name, in one "
        "format)"
    )


@pytest.mark.parametrize("informational", [["generators"], "generators", {"generators": ["cmd"]}])
def test_a_commands_record_that_is_not_a_map_is_ignored(informational):
    from rope_ref.conformance.golden_merge import _generators

    old = _manifest("cmd old", {"tables": "t"}, _entry("cos_sin-m7", "cos_sin", "tables"))
    old["provenance"]["informational"] = informational
    assert _generators(old) == {"m7": "cmd old"}


def test_the_runs_command_comes_last_even_when_its_group_was_recorded_first():
    """The joined generator replays the runs in order: this run's command comes last."""
    from rope_ref.conformance.golden_merge import merge_sets

    recorded = {"b": "cmd b old", "a": "cmd a"}
    entries = (_entry("cos_sin-b", "cos_sin", "tables"), _entry("cos_sin-a", "cos_sin", "tables"))
    old = _manifest("cmd b old && cmd a", {"tables": "t"}, *entries, generators=recorded)
    new = _manifest("cmd b new", {"tables": "t"}, _entry("cos_sin-b-fp16", "cos_sin", "tables"))
    _, merged = merge_sets(Path("out"), old, new, "b", command="cmd b new")
    assert merged["provenance"]["generator"] == "cmd a && cmd b new"
    assert list(merged["provenance"]["informational"]["generators"].items()) == [
        ("a", "cmd a"),
        ("b", "cmd b new"),
    ]
