"""The golden manifest: its constants and the schema check (mirrors ``docs/golden-manifest.schema.json``).

:func:`validate_manifest` enforces the rules of ``docs/golden-format.md`` §1 without the ``jsonschema``
package (a test keeps the two in agreement); :func:`parse_json` reads a manifest's bytes, refusing bad
UTF-8, absurd nesting and duplicate keys (the last one would silently win).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from .case import OPS
from .safetensors_io import loads_bounded

__all__ = [
    "GoldenError",
    "SCHEMA_VERSION",
    "SUITE_VERSION",
    "LICENSE",
    "MANIFEST",
    "FORMATS",
    "TOLERANCES",
    "IO_DTYPES",
    "TENSOR_DTYPES",
    "LAYOUTS",
    "validate_manifest",
    "parse_json",
]

SCHEMA_VERSION = 1
#: Version of the shipped case set, independent of the package version; bump when cases change.
SUITE_VERSION = "2.1.0"
#: The licence of the golden vectors (the project's; the text is LICENSE at the repository root).
LICENSE = "Apache-2.0"
MANIFEST = "manifest.json"
FORMATS = {"safetensors": ".safetensors", "npz": ".npz"}
TOLERANCES = ("exact", "table", "trig", "rotation", "emulation", "decay", "scale")
IO_DTYPES = ("float64", "float32", "float16", "bfloat16")
TENSOR_DTYPES = ("float64", "float32", "float16", "int64", "int32")
LAYOUTS = ("half", "interleaved")

# \Z, not $: "$" also matches before a trailing newline, which would let "cos\n" or a sha256 plus "\n" pass.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\.(safetensors|npz)\Z")
_TENSOR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_SHA_RE = re.compile(r"^[0-9a-f]{64}\Z")
_ROLES = ("inputs", "expected", "aux")  # "aux" is optional in a manifest entry


class GoldenError(ValueError):
    """A golden directory is corrupt, tampered with or malformed; the message names the file."""


def parse_json(data: bytes | str, where: str) -> Any:
    """Parse a manifest's JSON; bad UTF-8, bad JSON, absurd nesting and duplicate keys raise
    :class:`GoldenError` naming ``where``."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return loads_bounded(text, unique_keys=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise GoldenError(f"{where}: not valid UTF-8 JSON ({exc})") from None


# -- manifest validation (mirrors docs/golden-manifest.schema.json) ---------------------------------


def _fail(where: str, pointer: str, msg: str) -> GoldenError:
    return GoldenError(f"{where}: schema violation at {pointer or '/'}: {msg}")


def _check_keys(
    obj: Any, where: str, ptr: str, required: Sequence[str], optional: Sequence[str] = ()
) -> dict:
    if not isinstance(obj, dict):
        raise _fail(where, ptr, f"expected an object, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise _fail(where, ptr, f"missing required key(s) {missing}")
    extra = sorted(set(obj) - set(required) - set(optional))
    if extra:
        raise _fail(where, ptr, f"unexpected key(s) {extra}")
    return obj


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check_str(v: Any, where: str, ptr: str, pattern: re.Pattern | None = None, choices=None) -> None:
    if not isinstance(v, str):
        raise _fail(where, ptr, f"expected a string, got {v!r:.80}")
    if pattern is not None and not pattern.match(v):
        raise _fail(where, ptr, f"{v!r:.80} does not match {pattern.pattern}")
    if choices is not None and v not in choices:
        raise _fail(where, ptr, f"{v!r:.80} is not one of {list(choices)}")


def _check_config(cfg: Any, where: str, ptr: str) -> None:
    if cfg is None:
        return
    _check_keys(cfg, where, ptr, ("head_dim", "layout", "rotary_dim", "base", "scaling"))
    for key in ("head_dim", "rotary_dim"):
        if not _is_int(cfg[key]) or cfg[key] < 2 or cfg[key] % 2:
            raise _fail(where, f"{ptr}/{key}", f"expected an even integer >= 2, got {cfg[key]!r}")
    _check_str(cfg["layout"], where, f"{ptr}/layout", choices=LAYOUTS)
    if not _is_num(cfg["base"]) or cfg["base"] <= 1:
        raise _fail(where, f"{ptr}/base", f"expected a number > 1, got {cfg['base']!r}")
    scaling = cfg["scaling"]
    if scaling is not None and (
        not isinstance(scaling, dict) or not isinstance(scaling.get("rope_type"), str)
    ):
        raise _fail(where, f"{ptr}/scaling", "expected null or an HF-style dict with a string 'rope_type'")


def _check_tensor_specs(specs: Any, where: str, ptr: str) -> None:
    if not isinstance(specs, dict):
        raise _fail(where, ptr, f"expected an object of tensor specs, got {type(specs).__name__}")
    if not specs and ptr.endswith("/expected"):
        raise _fail(where, ptr, "a case needs at least one expected tensor")
    for name, spec in specs.items():
        p = f"{ptr}/{name}"
        if not _TENSOR_RE.match(name):
            raise _fail(
                where,
                p,
                f"tensor name {name!r} is not allowed (it could escape the directory or "
                f"collide); use letters, digits and '_'",
            )
        _check_keys(spec, where, p, ("dtype", "shape"))
        _check_str(spec["dtype"], where, f"{p}/dtype", choices=TENSOR_DTYPES)
        shape = spec["shape"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise _fail(where, f"{p}/shape", f"expected a list of non-negative integers, got {shape!r:.80}")


def validate_manifest(manifest: Any, where: str = MANIFEST) -> None:
    """Raise :class:`GoldenError` (naming ``where`` and a JSON pointer) if ``manifest`` breaks the schema."""
    _check_keys(
        manifest,
        where,
        "",
        ("schema_version", "suite_version", "format", "provenance", "bug_classes", "cases"),
    )
    if manifest["schema_version"] != SCHEMA_VERSION or not _is_int(manifest["schema_version"]):
        raise _fail(
            where,
            "/schema_version",
            f"this reader supports {SCHEMA_VERSION}, got {manifest['schema_version']!r}",
        )
    _check_str(manifest["suite_version"], where, "/suite_version")
    _check_str(manifest["format"], where, "/format", choices=tuple(FORMATS))
    prov = _check_keys(
        manifest["provenance"],
        where,
        "/provenance",
        ("rope_ref_version", "generator", "source"),
        ("informational", "numpy_version", "license"),
    )
    for key in ("rope_ref_version", "generator", "numpy_version", "license"):
        if key in prov:
            _check_str(prov[key], where, f"/provenance/{key}")
    _check_str(prov["source"], where, "/provenance/source", choices=("catalogue", "custom"))
    if "informational" in prov and not isinstance(prov["informational"], dict):
        raise _fail(where, "/provenance/informational", "expected an object")
    bug_classes = manifest["bug_classes"]
    if not isinstance(bug_classes, dict) or not all(isinstance(v, str) for v in bug_classes.values()):
        raise _fail(where, "/bug_classes", "expected an object mapping names to descriptions")
    cases = manifest["cases"]
    if not isinstance(cases, list):
        raise _fail(where, "/cases", "expected an array")
    seen: set[str] = set()
    for i, case in enumerate(cases):
        ptr = f"/cases/{i}"
        _check_keys(
            case,
            where,
            ptr,
            (
                "id",
                "op",
                "description",
                "bug_class",
                "tolerance",
                "io_dtype",
                "config",
                "params",
                "file",
                "sha256",
                "inputs",
                "expected",
            ),
            ("aux", "requires"),
        )
        _check_str(case["id"], where, f"{ptr}/id", _ID_RE)
        if case["id"] in seen:
            raise _fail(where, f"{ptr}/id", f"duplicate case id {case['id']!r}")
        seen.add(case["id"])
        _check_str(case["op"], where, f"{ptr}/op", choices=OPS)
        _check_str(case["description"], where, f"{ptr}/description")
        _check_str(case["bug_class"], where, f"{ptr}/bug_class", choices=tuple(bug_classes))
        _check_str(case["tolerance"], where, f"{ptr}/tolerance", choices=TOLERANCES)
        if case["io_dtype"] is not None:
            _check_str(case["io_dtype"], where, f"{ptr}/io_dtype", choices=IO_DTYPES)
        _check_config(case["config"], where, f"{ptr}/config")
        if not isinstance(case["params"], dict):
            raise _fail(where, f"{ptr}/params", "expected an object")
        file = case["file"]
        if isinstance(file, str) and ("/" in file or "\\" in file or file.startswith("..")):
            raise _fail(where, f"{ptr}/file", f"file name {file!r} escapes the golden directory")
        _check_str(file, where, f"{ptr}/file", _FILE_RE)
        _check_str(case["sha256"], where, f"{ptr}/sha256", _SHA_RE)
        _check_tensor_specs(case["inputs"], where, f"{ptr}/inputs")
        _check_tensor_specs(case["expected"], where, f"{ptr}/expected")
        if "aux" in case:
            _check_tensor_specs(case["aux"], where, f"{ptr}/aux")
        requires = case.get("requires", [])
        if not isinstance(requires, list) or len(set(map(str, requires))) != len(requires):
            raise _fail(where, f"{ptr}/requires", "expected an array of distinct case ids")
        for j, req in enumerate(requires):
            _check_str(req, where, f"{ptr}/requires/{j}", _ID_RE)
            if req not in seen or req == case["id"]:
                raise _fail(
                    where,
                    f"{ptr}/requires/{j}",
                    f"{req!r} is not the id of an earlier case (prerequisites run first, in manifest order)",
                )
