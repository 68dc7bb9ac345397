"""The manifest schema check and its JSON parser (``conformance/golden_manifest.py``), at the helpers.

A small manifest written by hand (not one the code wrote) is valid; each rule of ``docs/golden-format.md``
§1 is broken once, and the edge that the rule still allows is accepted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from rope_ref.conformance.golden_manifest import GoldenError, parse_json, validate_manifest


def _case(case_id: str) -> dict:
    return {
        "id": case_id,
        "op": "cos_sin",
        "description": "by hand",
        "bug_class": "tables",
        "tolerance": "table",
        "io_dtype": None,
        "config": {"head_dim": 8, "layout": "half", "rotary_dim": 6, "base": 10000.0, "scaling": None},
        "params": {"seq_len": None},
        "file": f"{case_id}.safetensors",
        "sha256": "ab" * 32,
        "inputs": {"positions": {"dtype": "int64", "shape": [3]}},
        "expected": {
            "cos": {"dtype": "float64", "shape": [3, 6]},
            "sin": {"dtype": "float64", "shape": [3, 6]},
        },
    }


def _manifest() -> dict:
    return {
        "schema_version": 1,
        "suite_version": "0.0.1",
        "format": "safetensors",
        "provenance": {"rope_ref_version": "0.0", "generator": "by hand", "source": "custom"},
        "bug_classes": {"tables": "frequency tables", "rotation": "the rotation"},
        "cases": [_case("cos_sin-a"), _case("cos_sin-b")],
    }


def _set(path: str, value):
    def edit(m: dict) -> None:
        *keys, last = path.split("/")
        obj = m
        for key in keys:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        obj[int(last) if isinstance(obj, list) else last] = value

    return edit


def _rename_key(path: str, new: str):
    """An edit giving the entry at ``path`` (a tensor spec) the name ``new``, its spec unchanged."""

    def edit(m: dict) -> None:
        *keys, last = path.split("/")
        obj = m
        for key in keys:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        obj[new] = obj.pop(last)

    return edit


REFUSED = [
    ("extra top-level key", _set("surprise", 1), "unexpected key(s) ['surprise']"),
    ("extra case key", _set("cases/1/weight", 2), "unexpected key(s) ['weight']"),
    ("odd head_dim", _set("cases/0/config/head_dim", 9), "/cases/0/config/head_dim"),
    ("odd rotary_dim", _set("cases/1/config/rotary_dim", 5), "/cases/1/config/rotary_dim"),
    ("base 1", _set("cases/0/config/base", 1), "expected a number > 1"),
    ("bool dimension", _set("cases/0/inputs/positions/shape", [True]), "/cases/0/inputs/positions/shape"),
    ("bool head_dim", _set("cases/0/config/head_dim", True), "/cases/0/config/head_dim"),
    ("schema_version true", _set("schema_version", True), "/schema_version"),
    ("schema_version 1.0", _set("schema_version", 1.0), "/schema_version"),
    ("older schema_version 0", _set("schema_version", 0), "this reader supports 1, got 0"),
    ("newer schema_version 2", _set("schema_version", 2), "this reader supports 1, got 2"),
    ("duplicate id", _set("cases/1/id", "cos_sin-a"), "duplicate case id 'cos_sin-a'"),
    ("requires a later case", _set("cases/0/requires", ["cos_sin-b"]), "not the id of an earlier case"),
    ("requires itself", _set("cases/1/requires", ["cos_sin-b"]), "not the id of an earlier case"),
    ("no expected tensor", _set("cases/1/expected", {}), "at least one expected tensor"),
    ("negative dimension", _set("cases/1/expected/cos/shape", [3, -6]), "/cases/1/expected/cos/shape"),
    ("bfloat16 tensor", _set("cases/0/expected/sin/dtype", "bfloat16"), "/cases/0/expected/sin/dtype"),
    ("undescribed bug class", _set("cases/1/bug_class", "decay"), "/cases/1/bug_class"),
    ("unknown io dtype", _set("cases/0/io_dtype", "float8"), "/cases/0/io_dtype"),
    ("file with a slash", _set("cases/0/file", "sub/a.safetensors"), "escapes the golden directory"),
    ("file with a backslash", _set("cases/0/file", "sub\\a.safetensors"), "escapes the golden directory"),
    ("file starting with ..", _set("cases/0/file", "..a.safetensors"), "escapes the golden directory"),
    ("tensor name with a dot", _rename_key("cases/0/expected/cos", "cos.0"), "tensor name 'cos.0' is not"),
    ("tensor name with /", _rename_key("cases/1/inputs/positions", "../p"), "tensor name '../p' is not"),
    ("tensor name with a dash", _rename_key("cases/0/expected/sin", "sin-t"), "tensor name 'sin-t' is not"),
    ("tensor name led by a digit", _rename_key("cases/1/expected/cos", "0cos"), "tensor name '0cos' is not"),
    ("upper-case sha256", _set("cases/0/sha256", "AB" * 32), "/cases/0/sha256: 'ABAB"),
    ("63-digit sha256", _set("cases/1/sha256", "ab" * 31 + "a"), "/cases/1/sha256: 'abab"),
    ("65-digit sha256", _set("cases/0/sha256", "ab" * 32 + "a"), "/cases/0/sha256: 'abab"),
    ("non-hex sha256", _set("cases/1/sha256", "ag" * 32), "/cases/1/sha256: 'agag"),
    ("sha256 and a newline", _set("cases/0/sha256", "ab" * 32 + "\n"), "/cases/0/sha256: 'abab"),
    ("tensor name and a \\n", _rename_key("cases/0/expected/cos", "cos\n"), "tensor name 'cos\\n' is not"),
    ("case id and a newline", _set("cases/1/id", "cos_sin-b\n"), "/cases/1/id: 'cos_sin-b\\n'"),
    ("file name and a newline", _set("cases/0/file", "a.safetensors\n"), "/cases/0/file"),
    ("manifest not an object", lambda m: m.clear() or m.update(cases=[]), "at /: missing required key(s)"),
    ("case not an object", _set("cases/1", ["cos_sin-b"]), "at /cases/1: expected an object, got list"),
    (
        "missing sha256",
        lambda m: m["cases"][1].pop("sha256"),
        "at /cases/1: missing required key(s) ['sha256']",
    ),
    ("missing generator", lambda m: m["provenance"].pop("generator"), "at /provenance: missing required"),
    ("provenance not an object", _set("provenance", "hand"), "at /provenance: expected an object, got str"),
    ("suite_version a number", _set("suite_version", 2.1), "at /suite_version: expected a string"),
    ("unknown format", _set("format", "pickle"), "at /format: 'pickle' is not one of"),
    ("generator not a string", _set("provenance/generator", ["hand"]), "at /provenance/generator"),
    ("rope_ref_version a number", _set("provenance/rope_ref_version", 1), "at /provenance/rope_ref_version"),
    ("numpy_version a number", _set("provenance/numpy_version", 2), "at /provenance/numpy_version"),
    ("license not a string", _set("provenance/license", None), "at /provenance/license"),
    ("unknown source", _set("provenance/source", "shipped"), "at /provenance/source: 'shipped' is not one"),
    ("informational a list", _set("provenance/informational", []), "at /provenance/informational"),
    ("extra provenance key", _set("provenance/date", "today"), "unexpected key(s) ['date']"),
    ("bug_classes a list", _set("bug_classes", ["tables"]), "at /bug_classes: expected an object"),
    ("bug class not described", _set("bug_classes/tables", None), "at /bug_classes: expected an object"),
    ("cases an object", _set("cases", {}), "at /cases: expected an array"),
    ("case id led by '_'", _set("cases/0/id", "_a"), "at /cases/0/id: '_a' does not match"),
    ("case id led by '.'", _set("cases/1/id", ".b"), "at /cases/1/id: '.b' does not match"),
    ("case id with a space", _set("cases/0/id", "a b"), "at /cases/0/id: 'a b' does not match"),
    ("case id a number", _set("cases/0/id", 7), "at /cases/0/id: expected a string"),
    ("unknown op", _set("cases/1/op", "rotate"), "at /cases/1/op: 'rotate' is not one of"),
    ("description null", _set("cases/0/description", None), "at /cases/0/description: expected a string"),
    ("unknown tolerance", _set("cases/1/tolerance", "loose"), "at /cases/1/tolerance: 'loose' is not one"),
    ("config a list", _set("cases/0/config", [8]), "at /cases/0/config: expected an object, got list"),
    (
        "config without scaling",
        lambda m: m["cases"][1]["config"].pop("scaling"),
        "at /cases/1/config: missing",
    ),
    ("head_dim 0", _set("cases/1/config/head_dim", 0), "at /cases/1/config/head_dim: expected an even"),
    ("rotary_dim 0", _set("cases/0/config/rotary_dim", 0), "at /cases/0/config/rotary_dim: expected an even"),
    ("rotary_dim a float", _set("cases/0/config/rotary_dim", 6.0), "at /cases/0/config/rotary_dim"),
    ("unknown layout", _set("cases/1/config/layout", "neox"), "at /cases/1/config/layout: 'neox' is not"),
    ("base 0.5", _set("cases/1/config/base", 0.5), "at /cases/1/config/base: expected a number > 1"),
    ("base infinite", _set("cases/0/config/base", float("inf")), "at /cases/0/config/base"),
    ("base nan", _set("cases/1/config/base", float("nan")), "at /cases/1/config/base"),
    ("base a string", _set("cases/0/config/base", "10000"), "at /cases/0/config/base"),
    ("base true", _set("cases/1/config/base", True), "at /cases/1/config/base"),
    ("scaling a string", _set("cases/0/config/scaling", "linear"), "at /cases/0/config/scaling"),
    ("scaling without rope_type", _set("cases/1/config/scaling", {"factor": 2.0}), "/cases/1/config/scaling"),
    (
        "scaling rope_type a number",
        _set("cases/0/config/scaling", {"rope_type": 1}),
        "/cases/0/config/scaling",
    ),
    ("params a list", _set("cases/1/params", []), "at /cases/1/params: expected an object"),
    ("file of another suffix", _set("cases/0/file", "a.json"), "at /cases/0/file: 'a.json' does not match"),
    ("file a number", _set("cases/1/file", 3), "at /cases/1/file: expected a string"),
    ("inputs a list", _set("cases/0/inputs", []), "at /cases/0/inputs: expected an object of tensor specs"),
    ("aux a list", _set("cases/1/aux", []), "at /cases/1/aux: expected an object of tensor specs"),
    ("aux spec bad", _set("cases/1/aux", {"w": {"dtype": "float64"}}), "at /cases/1/aux/w: missing"),
    ("spec with an extra key", _set("cases/0/inputs/positions/order", "C"), "unexpected key(s) ['order']"),
    (
        "shape a tuple-like string",
        _set("cases/1/inputs/positions/shape", "3"),
        "/cases/1/inputs/positions/shape",
    ),
    ("shape of floats", _set("cases/0/expected/sin/shape", [3.0, 6]), "/cases/0/expected/sin/shape"),
    ("requires a string", _set("cases/1/requires", "cos_sin-a"), "at /cases/1/requires: expected an array"),
    ("requires twice", _set("cases/1/requires", ["cos_sin-a", "cos_sin-a"]), "array of distinct case ids"),
    ("requires a number", _set("cases/1/requires", [1]), "at /cases/1/requires/0: expected a string"),
    (
        "requires an unknown id",
        _set("cases/1/requires", ["cos_sin-c"]),
        "at /cases/1/requires/0: 'cos_sin-c'",
    ),
]


@pytest.mark.parametrize(("label", "edit", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_each_rule_is_enforced(label, edit, message):
    m = _manifest()
    validate_manifest(copy.deepcopy(m), "hand/manifest.json")
    edit(m)
    with pytest.raises(GoldenError, match="hand/manifest.json: schema violation at") as info:
        validate_manifest(m, "hand/manifest.json")
    assert message in str(info.value)


ACCEPTED = [
    ("io dtype null", _set("cases/1/io_dtype", None)),
    ("io dtype bfloat16", _set("cases/1/io_dtype", "bfloat16")),
    ("base just over 1", _set("cases/0/config/base", 1.0000001)),
    ("int32 tensor", _set("cases/0/inputs/positions/dtype", "int32")),
    ("rotary_dim 2", _set("cases/0/config/rotary_dim", 2)),
    ("a zero dimension", _set("cases/0/inputs/positions/shape", [0])),
    ("requires an earlier case", _set("cases/1/requires", ["cos_sin-a"])),
    ("tensor name of '_', letters, digits", _rename_key("cases/0/expected/cos", "_Cos_2")),
    ("sha256 of every hex digit", _set("cases/1/sha256", "0123456789abcdef" * 4)),
    ("head_dim 2", _set("cases/1/config/head_dim", 2)),
    ("interleaved layout", _set("cases/0/config/layout", "interleaved")),
    ("integer base 2", _set("cases/1/config/base", 2)),
    ("a scaling dict", _set("cases/0/config/scaling", {"rope_type": "linear", "factor": 2.0})),
    ("config null", _set("cases/1/config", None)),
    ("no inputs", _set("cases/1/inputs", {})),
    ("empty aux", _set("cases/0/aux", {})),
    ("aux tensor", _set("cases/0/aux", {"w": {"dtype": "float32", "shape": [2, 5]}})),
    ("npz file", _set("cases/1/file", "b.npz")),
    ("npz format", _set("format", "npz")),
    ("every optional provenance key", _set("provenance/informational", {"torch": "2"})),
    ("numpy_version and license", lambda m: m["provenance"].update(numpy_version="2.1", license="MIT")),
    ("catalogue source", _set("provenance/source", "catalogue")),
    ("empty requires", _set("cases/0/requires", [])),
    ("no cases", _set("cases", [])),
    ("id of digits, dots and dashes", _set("cases/0/id", "0.a-b_c")),
    ("each tolerance", lambda m: [c.update(tolerance="scale") for c in m["cases"]]),
    ("each op", _set("cases/1/op", "apply_qkv")),
]


@pytest.mark.parametrize(("label", "edit"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_what_the_rules_allow_is_accepted(label, edit):
    m = _manifest()
    edit(m)
    validate_manifest(m, "hand/manifest.json")


def test_parse_json_refuses_a_repeated_key_anywhere():
    assert parse_json(b'{"a": {"b": 1}, "c": 2}', "m.json") == {"a": {"b": 1}, "c": 2}
    for text in (b'{"a": 1, "a": 2}', b'{"a": {"b": 1, "b": 1}}', b'{"cases": [], "x": 0, "cases": []}'):
        with pytest.raises(GoldenError, match="m.json: not valid UTF-8 JSON .*duplicate key"):
            parse_json(text, "m.json")


def test_parse_json_reads_text_and_refuses_absurd_nesting():
    assert parse_json('{"a": [1, {"b": null}]}', "m.json") == {"a": [1, {"b": None}]}
    with pytest.raises(GoldenError, match="m.json: not valid UTF-8 JSON .*nested deeper than 64 levels"):
        parse_json("[" * 65 + "]" * 65, "m.json")
    with pytest.raises(GoldenError, match="m.json: not valid UTF-8 JSON"):
        parse_json(b"{'a': 1}", "m.json")


def test_parse_json_refuses_bad_utf8():
    with pytest.raises(GoldenError, match="m.json: not valid UTF-8 JSON"):
        parse_json(b'{"a": "\xff"}', "m.json")


def _schema_enums() -> list[tuple[str, object]]:
    """``(manifest path, value)`` for every value each enum of ``docs/golden-manifest.schema.json`` allows
    (the published schema, not the validator's own constants)."""
    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "docs/golden-manifest.schema.json").read_text()
    )
    case, defs = schema["$defs"]["case"]["properties"], schema["$defs"]
    where = {
        "format": schema["properties"]["format"],
        "provenance/source": schema["properties"]["provenance"]["properties"]["source"],
        "cases/1/op": case["op"],
        "cases/0/tolerance": case["tolerance"],
        "cases/1/io_dtype": case["io_dtype"],
        "cases/0/config/layout": defs["config"]["properties"]["layout"],
        "cases/1/expected/sin/dtype": defs["tensorSpec"]["properties"]["dtype"],
    }
    return [(path, value) for path, spec in where.items() for value in spec["enum"]]


@pytest.mark.parametrize(("path", "value"), _schema_enums(), ids=lambda v: str(v))
def test_every_value_the_published_schema_allows_is_accepted(path, value):
    m = _manifest()
    _set(path, value)(m)
    validate_manifest(m, "hand/manifest.json")
