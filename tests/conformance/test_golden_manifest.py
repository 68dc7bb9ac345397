"""The manifest schema check and its JSON parser (``conformance/golden_manifest.py``), at the helpers.

A small manifest written by hand (not one the code wrote) is valid; each rule of ``docs/golden-format.md``
§1 is broken once, and the edge that the rule still allows is accepted.
"""

from __future__ import annotations

import copy

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
        obj[last] = value

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


def test_parse_json_refuses_bad_utf8():
    with pytest.raises(GoldenError, match="m.json: not valid UTF-8 JSON"):
        parse_json(b'{"a": "\xff"}', "m.json")
