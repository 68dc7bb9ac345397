"""A golden set built in memory (``conformance/golden_build.py``): the files' bytes and the manifest.

Cases are written by hand; the expected manifest entries and bytes are spelled out here, not taken
from the writer.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from rope_ref.conformance.golden_build import build_set, manifest_bytes
from rope_ref.conformance.safetensors_io import read_safetensors

from rope_ref.case import Case

CONFIG = {"head_dim": 8, "layout": "half", "rotary_dim": 8, "base": 10000.0, "scaling": None}


def _case(case_id: str = "cos_sin-hand", **changes) -> Case:
    fields = {
        "id": case_id,
        "op": "cos_sin",
        "config": dict(CONFIG),
        "inputs": {"positions": np.array([0, 3, 7], dtype=np.int64)},
        "expected": {"cos": np.ones((3, 8)), "sin": np.zeros((3, 8))},
        "bug_class": "tables",
        "tolerance": "table",
        "params": {"seq_len": None},
        "description": "a case written by hand",
        "aux": {"inv_freq": np.full(4, 0.5), "attention_factor": np.array(1.0)},
    }
    fields.update(changes)
    return Case(**fields)


def _build(*cases: Case, fmt: str = "safetensors"):
    return build_set(list(cases), fmt, "by hand", "custom", None, None)


def test_manifest_entry_lists_every_tensor_and_field():
    first = _case()
    second = _case("cos_sin-later", requires=["cos_sin-hand"], description="second")
    files, manifest = _build(first, second)
    assert sorted(files) == ["cos_sin-hand.safetensors", "cos_sin-later.safetensors"]
    entry = manifest["cases"][1]
    assert entry["description"] == "second" and entry["requires"] == ["cos_sin-hand"]
    assert "requires" not in manifest["cases"][0]
    assert manifest["cases"][0]["io_dtype"] is None  # no I/O dtype given: none recorded, no default
    assert entry["inputs"] == {"positions": {"dtype": "int64", "shape": [3]}}
    assert entry["expected"] == {n: {"dtype": "float64", "shape": [3, 8]} for n in ("cos", "sin")}
    assert entry["aux"] == {
        "inv_freq": {"dtype": "float64", "shape": [4]},
        "attention_factor": {"dtype": "float64", "shape": []},
    }
    assert manifest["bug_classes"].keys() == {"tables"}  # only the classes the cases use


def test_safetensors_file_records_the_case_id():
    files, _ = _build(_case())
    tensors, metadata = read_safetensors("cos_sin-hand.safetensors", files["cos_sin-hand.safetensors"])
    assert metadata == {"case_id": "cos_sin-hand", "schema_version": "1"}
    assert sorted(tensors) == [
        "aux.attention_factor",
        "aux.inv_freq",
        "expected.cos",
        "expected.sin",
        "inputs.positions",
    ]


def test_numpy_scalars_in_params_become_json_numbers():
    _, manifest = _build(
        _case(params={"seq_len": np.int64(4096)}, config={**CONFIG, "base": np.float64(5e5)})
    )
    entry = manifest["cases"][0]
    assert entry["params"]["seq_len"] == 4096 and type(entry["params"]["seq_len"]) is int
    assert type(entry["config"]["base"]) is float
    json.loads(manifest_bytes(manifest))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_number_is_refused(value):
    with pytest.raises(ValueError, match="non-finite number"):
        _build(_case(params={"seq_len": None, "scale": value}))


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8])
def test_tensor_of_an_unstorable_dtype_is_refused(dtype):
    case = _case(inputs={"positions": np.array([0, 1], dtype=dtype)})
    with pytest.raises(TypeError, match=r"case 'cos_sin-hand' inputs\.positions: dtype .* cannot be stored"):
        _build(case)


def test_two_cases_with_one_id_are_refused():
    with pytest.raises(ValueError, match="case id 'cos_sin-hand' occurs twice"):
        _build(_case(), _case())


# "é", "θ" and "xé" are Python identifiers (str.isidentifier) but not ASCII: the schema allows ASCII only.
@pytest.mark.parametrize("name", ["a-b", "../x", "", "1st", "\u00e9", "\u03b8", "x\u00e9", "x\n"])
def test_a_tensor_name_that_is_not_an_identifier_is_refused(name):
    case = _case(expected={name: np.ones(3)})
    message = f"case 'cos_sin-hand': tensor name {name!r} is not allowed"
    with pytest.raises(ValueError, match=re.escape(message)):
        _build(case)


def test_manifest_bytes_are_one_space_indented_ascii():
    assert manifest_bytes({"a": [1], "b": "é"}) == b'{\n "a": [\n  1\n ],\n "b": "\\u00e9"\n}\n'
    # the keys keep the order the manifest gives them (the documented field order), never sorted
    unsorted = b'{\n "z": 1,\n "a": {\n  "y": 2,\n  "b": 3\n }\n}\n'
    assert manifest_bytes({"z": 1, "a": {"y": 2, "b": 3}}) == unsorted


def test_manifest_bytes_write_the_fields_in_the_schema_order():
    """The order of the tables of docs/golden-format.md §1, top level and in each case entry."""
    _, manifest = _build(_case())
    written = json.loads(manifest_bytes(manifest))
    top = ["schema_version", "suite_version", "format", "provenance", "bug_classes", "cases"]
    assert list(written) == top
    entry_keys = ["id", "op", "description", "bug_class", "tolerance", "io_dtype", "config", "params", "file"]
    assert list(written["cases"][0])[: len(entry_keys)] == entry_keys


def test_jsonable_converts_inside_lists_and_tuples_at_every_depth():
    from rope_ref.conformance.golden_build import _jsonable

    got = _jsonable({"a": (np.int64(7), [np.float32(0.5), {"b": np.int32(-2)}]), 3: [np.str_("s")]})
    assert got == {"a": [7, [0.5, {"b": -2}]], "3": ["s"]}
    assert [type(v) for v in (got["a"][0], got["a"][1][0], got["a"][1][1]["b"], got["3"][0])] == [
        int,
        float,
        int,
        str,
    ]
    for bad in ([1.0, float("nan")], ({"x": [float("-inf")]},)):
        with pytest.raises(ValueError, match="non-finite number .* cannot go into a golden manifest"):
            _jsonable({"params": bad})


def test_numpy_scalars_and_non_finite_numbers_inside_lists_of_a_case():
    _, manifest = _build(_case(params={"seq_len": None, "sections": [np.int64(2), np.int64(3)]}))
    sections = manifest["cases"][0]["params"]["sections"]
    assert sections == [2, 3] and [type(v) for v in sections] == [int, int]
    with pytest.raises(ValueError, match="non-finite number nan"):
        _build(_case(params={"seq_len": None, "scales": [1.0, float("nan")]}))


@pytest.mark.parametrize("case_id", ["cos sin", "", "-a", "cos_sin\n", 7])
def test_a_case_id_outside_the_pattern_is_refused(case_id):
    with pytest.raises(ValueError, match=f"case id {re.escape(repr(case_id))} is not allowed"):
        _build(_case(case_id))


def test_provenance_records_the_run_and_bug_classes_come_from_the_given_map():
    import rope_ref

    files, manifest = build_set(
        [_case(), _case("apply-hand", op="apply", bug_class="rotation")],
        "npz",
        "rope-ref golden generate --x",
        "catalogue",
        {"tables": "the tables", "rotation": "the rotation", "decay": "unused"},
        {"torch": np.str_("2.5"), "n": (np.int32(3), 4)},
    )
    assert manifest["provenance"] == {
        "rope_ref_version": rope_ref.__version__,
        "license": "Apache-2.0",
        "generator": "rope-ref golden generate --x",
        "source": "catalogue",
        "informational": {"torch": "2.5", "n": [3, 4]},
    }
    assert manifest["schema_version"] == 1 and manifest["format"] == "npz"
    assert manifest["bug_classes"] == {"tables": "the tables", "rotation": "the rotation"}
    assert list(manifest["bug_classes"]) == ["tables", "rotation"]  # the given map's order, not sorted
    assert sorted(files) == ["apply-hand.npz", "cos_sin-hand.npz"]
    assert [e["file"] for e in manifest["cases"]] == ["cos_sin-hand.npz", "apply-hand.npz"]
    _, plain = build_set([_case()], "safetensors", "g", "custom", None, {})
    assert "informational" not in plain["provenance"] and plain["format"] == "safetensors"
    assert set(plain["bug_classes"]) == {"tables"} and plain["bug_classes"]["tables"]


def test_file_bytes_hold_each_tensor_with_its_dtype_and_the_entry_their_sha256():
    import hashlib

    from rope_ref.conformance.safetensors_io import read_npz

    case = _case(
        inputs={"positions": np.array([9, 2], dtype=np.int32)},
        expected={
            "cos": np.array([[0.5, -1.25]], dtype=np.float32),
            "sin": np.array([1.0], dtype=np.float16),
        },
        aux={},
    )
    for fmt in ("npz", "safetensors"):
        files, manifest = _build(case, fmt=fmt)
        (name, data), entry = next(iter(files.items())), manifest["cases"][0]
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and "aux" not in entry
        assert entry["expected"]["sin"] == {"dtype": "float16", "shape": [1]}
        got = read_npz(name, data) if fmt == "npz" else read_safetensors(name, data)[0]
        assert sorted(got) == ["expected.cos", "expected.sin", "inputs.positions"]
        for key, want in (
            ("inputs.positions", case.inputs["positions"]),
            ("expected.cos", case.expected["cos"]),
        ):
            assert got[key].dtype == want.dtype and got[key].tolist() == want.tolist()


def test_an_entry_holds_copies_of_the_cases_lists_and_dicts():
    case = _case(requires=["cos_sin-first"], params={"seq_len": 5, "dims": (1, 2)})
    first = _case("cos_sin-first")
    _, manifest = _build(first, case)
    entry = manifest["cases"][1]
    case.requires.append("edited")
    case.params["seq_len"] = 6
    case.config["base"] = 2.0
    assert entry["requires"] == ["cos_sin-first"] and entry["params"] == {"seq_len": 5, "dims": [1, 2]}
    assert entry["config"]["base"] == 10000.0


def test_an_empty_bug_class_map_is_used_as_given_not_replaced_by_the_catalogue():
    """``bug_classes={}`` describes no class, so a case's class is unknown: the new manifest is refused
    (the catalogue's descriptions are the default only when no map is given)."""
    from rope_ref.conformance.golden_manifest import GoldenError

    with pytest.raises(GoldenError, match="the new manifest: schema violation at /cases/0/bug_class"):
        build_set([_case()], "npz", "g", "custom", {}, None)
    _, manifest = build_set([_case(bug_class="mine")], "npz", "g", "custom", {"mine": "my class"}, None)
    assert manifest["bug_classes"] == {"mine": "my class"}


@pytest.mark.parametrize(
    ("field", "value", "pointer"),
    [
        ("tolerance", "roughly", "/cases/0/tolerance"),
        ("op", "rotate_everything", "/cases/0/op"),
        ("io_dtype", "float8", "/cases/0/io_dtype"),
    ],
)
def test_build_set_validates_the_manifest_it_builds(field, value, pointer):
    from rope_ref.conformance.golden_manifest import GoldenError

    with pytest.raises(GoldenError, match=f"the new manifest: schema violation at {pointer}"):
        _build(_case(**{field: value}))


def test_requires_is_recorded_for_a_case_without_aux_tensors():
    files, manifest = _build(_case(), _case("cos_sin-plain", aux={}, requires=["cos_sin-hand"]))
    entry = manifest["cases"][1]
    assert "aux" not in entry and entry["requires"] == ["cos_sin-hand"]


def test_an_entry_takes_each_field_from_its_own_attribute():
    """Every field of the case has a value no other field has, so a field read from the wrong attribute
    shows; the entry is spelled out by hand."""
    from rope_ref.conformance.golden_manifest import SUITE_VERSION

    case = _case(
        "apply-own",
        op="apply",
        bug_class="layout",
        tolerance="rotation",
        io_dtype="float32",
        description="each field its own",
        params={"seq_len": 11},
        inputs={"x": np.zeros((2, 3, 8), dtype=np.float32), "positions": np.arange(3)},
        expected={"out": np.zeros((2, 3, 8), dtype=np.float32)},
        aux={"inv_freq": np.full(4, 0.25)},
        requires=["cos_sin-hand"],
    )
    files, manifest = _build(_case(), case, fmt="npz")
    entry = dict(manifest["cases"][1])
    sha = entry.pop("sha256")
    assert entry == {
        "id": "apply-own",
        "op": "apply",
        "description": "each field its own",
        "bug_class": "layout",
        "tolerance": "rotation",
        "io_dtype": "float32",
        "config": CONFIG,
        "params": {"seq_len": 11},
        "file": "apply-own.npz",
        "inputs": {
            "x": {"dtype": "float32", "shape": [2, 3, 8]},
            "positions": {"dtype": "int64", "shape": [3]},
        },
        "expected": {"out": {"dtype": "float32", "shape": [2, 3, 8]}},
        "aux": {"inv_freq": {"dtype": "float64", "shape": [4]}},
        "requires": ["cos_sin-hand"],
    }
    import hashlib

    assert sha == hashlib.sha256(files["apply-own.npz"]).hexdigest() != manifest["cases"][0]["sha256"]
    assert manifest["suite_version"] == SUITE_VERSION and manifest["schema_version"] == 1
    assert manifest["bug_classes"].keys() == {"tables", "layout"}


@pytest.mark.parametrize("value", [np.float64("nan"), np.float32("inf"), np.float16("-inf")])
def test_a_numpy_non_finite_scalar_is_refused_like_a_python_one(value):
    from rope_ref.conformance.golden_build import _jsonable

    with pytest.raises(ValueError, match="non-finite number .* cannot go into a golden manifest"):
        _jsonable({"scale": [value]})
    with pytest.raises(ValueError, match="non-finite number"):
        _build(_case(params={"seq_len": None, "scale": value}))


def test_tensors_given_as_python_lists_are_stored_as_arrays():
    """A tensor given as a list is converted once, for the file and the entry alike (int64, float64)."""
    from rope_ref.conformance.safetensors_io import read_npz

    case = _case(inputs={"positions": [4, 1]}, expected={"cos": [[0.5, 2.0]], "sin": [[1.0, 0.0]]}, aux={})
    files, manifest = _build(case, fmt="npz")
    entry = manifest["cases"][0]
    assert entry["inputs"] == {"positions": {"dtype": "int64", "shape": [2]}}
    assert entry["expected"]["cos"] == {"dtype": "float64", "shape": [1, 2]}
    got = read_npz("cos_sin-hand.npz", files["cos_sin-hand.npz"])
    assert got["inputs.positions"].dtype == np.int64 and got["inputs.positions"].tolist() == [4, 1]
    assert got["expected.cos"].tolist() == [[0.5, 2.0]]


@pytest.mark.parametrize("role", ["inputs", "aux"])
def test_a_bad_tensor_name_or_dtype_is_refused_in_every_role(role):
    with pytest.raises(ValueError, match=re.escape("tensor name 'a-b' is not allowed")):
        _build(_case(**{role: {"a-b": np.ones(2)}}))
    message = f"case 'cos_sin-hand' {role}.t: dtype bool cannot be stored"
    with pytest.raises(TypeError, match=re.escape(message)):
        _build(_case(**{role: {"t": np.ones(2, dtype=bool)}}))


def test_an_empty_requires_list_writes_no_field_and_a_tuple_becomes_a_list():
    _, manifest = _build(_case(requires=[]), _case("cos_sin-b", requires=("cos_sin-hand",)))
    assert "requires" not in manifest["cases"][0]
    assert manifest["cases"][1]["requires"] == ["cos_sin-hand"]
    assert type(manifest["cases"][1]["requires"]) is list


def test_an_unknown_format_is_refused_naming_it_not_given_a_default_suffix():
    with pytest.raises(KeyError, match="'parquet'"):
        _build(_case(), fmt="parquet")
