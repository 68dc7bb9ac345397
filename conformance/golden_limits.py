"""Limits on what reading a golden set may cost, checked before anything is allocated.

A golden set is untrusted input (``docs/golden-format.md`` "Reading a set from a stranger"). Every size
is checked against what the manifest and the file headers declare and against :class:`ReadLimits`, whose
values a user can raise (``--limit NAME=N``). A set over a limit raises :class:`GoldenLimitError`: one line
naming the file, the field, the value and the limit (exit status 2; a corrupt set is exit status 3).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from .golden_manifest import MANIFEST, GoldenError

__all__ = [
    "GoldenLimitError",
    "ReadLimits",
    "DEFAULT_LIMITS",
    "parse_limits",
    "check_declared",
    "check_values",
    "evaluation_parts",
    "evaluation_elements",
    "data_parts",
]

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "int64": 8, "int32": 4}
#: Inputs that a re-evaluation expands by the head width (one table row per position or distance).
_POSITION_NAMES = ("positions", "position_ids", "block_position_ids", "distances", "offset", "start_offsets")
#: Inputs whose leading axes the positions broadcast against.
_ACTIVATION_NAMES = ("x", "grad_out", "q", "k", "qkv")


class GoldenLimitError(GoldenError):
    """A golden set is over a reading limit (not necessarily corrupt): raise the limit to read it."""


@dataclass(frozen=True)
class ReadLimits:
    """Upper bounds on reading one golden set; every field can be raised with ``--limit NAME=N``."""

    #: Bytes of ``manifest.json``.
    manifest_bytes: int = 64 * 2**20
    #: Bytes of one safetensors header (the JSON after the 8-byte length) or one npy header.
    header_bytes: int = 16 * 2**20
    #: Bytes of one tensor, as its dtype and shape declare.
    tensor_bytes: int = 2**30
    #: Elements of one case: its stored tensors plus what a re-evaluation allocates (positions x width).
    case_elements: int = 2**27
    #: Bytes of all tensor files of a run together (each distinct file counted once).
    run_bytes: int = 8 * 2**30
    #: Uncompressed / compressed size of an npz member (stored members have ratio 1).
    npz_ratio: int = 64

    def refuse(self, where: str, what: str, value: int, name: str, unit: str = "") -> GoldenLimitError:
        limit = getattr(self, name)
        return GoldenLimitError(
            f"{where}: {what} = {value}{unit} is over the limit {name} = {limit}{unit} "
            f"(raise it with --limit {name}=N if you trust this set)"
        )


DEFAULT_LIMITS = ReadLimits()
_SUFFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_limits(specs: list[str] | None, base: ReadLimits = DEFAULT_LIMITS) -> ReadLimits:
    """``["run_bytes=16G", ...]`` -> :class:`ReadLimits`; a bad spec raises ``ValueError`` (exit 2)."""
    names = [f.name for f in fields(ReadLimits)]
    changes: dict[str, int] = {}
    for spec in specs or []:
        key, sep, value = spec.partition("=")
        m = re.fullmatch(r"\s*(\d{1,18})\s*([kKmMgGtT]?)(i?[bB])?\s*", value)
        if not sep or key.strip() not in names or m is None:
            raise ValueError(
                f"--limit {spec!r:.80}: expected NAME=N with NAME one of {', '.join(names)} and N a "
                f"positive integer, optionally with K, M, G or T (binary multiples)"
            )
        n = int(m.group(1)) * _SUFFIX[m.group(2).lower()]
        if n < 1:
            raise ValueError(f"--limit {spec!r:.80}: the limit must be positive")
        changes[key.strip()] = n
    return replace(base, **changes)


def _elements(shape: list[int]) -> int:
    return math.prod(shape)


def _width(entry: dict[str, Any]) -> int:
    """The widest head a re-evaluation of ``entry`` builds tables for (1 when there is none)."""
    widths = [1]
    cfg = entry.get("config")
    if isinstance(cfg, dict):
        widths += [v for v in (cfg.get("head_dim"), cfg.get("rotary_dim")) if isinstance(v, int)]
    params = entry.get("params", {})
    for key in ("spec", "mla"):
        block = params.get(key) if isinstance(params, dict) else None
        if isinstance(block, dict):
            widths += [v for k, v in block.items() if "head_dim" in k and isinstance(v, int)]
            for sub in [block.get("rope")] + list(block.get("tables") or []):
                if isinstance(sub, dict):
                    widths += [
                        v for k, v in sub.items() if k in ("head_dim", "rotary_dim") and isinstance(v, int)
                    ]
            if isinstance(block.get("streams"), list):
                widths.append(2 * len(block["streams"]))
    inputs = entry.get("inputs", {})
    widths += [
        spec["shape"][-1] for name, spec in inputs.items() if name in _ACTIVATION_NAMES and spec["shape"]
    ]
    return max(w for w in widths if isinstance(w, int) and not isinstance(w, bool))


def evaluation_parts(entry: dict[str, Any]) -> list[tuple[str, int]]:
    """``(field, elements)``: what a case holds and what re-evaluating it allocates, from its manifest
    entry alone, one part per field that sizes it (``field`` names it and its value).

    Stored tensors count once; every position-like input counts once per channel of the widest head
    (a table row per position), after broadcasting against the activations' leading axes;
    ``mrope_decode_ids`` allocates ``3·B·n_new``. Python integers throughout, so no size can overflow.
    """
    groups = [entry.get(role, {}) for role in ("inputs", "expected", "aux")]
    parts = [("stored tensors", sum(_elements(spec["shape"]) for group in groups for spec in group.values()))]
    inputs = entry.get("inputs", {})
    width = _width(entry)
    lead = [
        spec["shape"][:-1] for name, spec in inputs.items() if name in _ACTIVATION_NAMES and spec["shape"]
    ]
    for name, spec in inputs.items():
        if name not in _POSITION_NAMES:
            continue
        n = _elements(spec["shape"])
        for shape in lead:
            n = max(n, _elements(shape), _elements(_broadcast(spec["shape"], shape)))
        parts.append((f"inputs.{name} shape {spec['shape']} x head width {width}", n * width))
    if entry.get("op") in ("inv_freq", "attention_factor", "mla_softmax_scale"):
        parts.append((f"a table of head width {width}", width))
    params = entry.get("params", {})
    n_new = params.get("n_new") if isinstance(params, dict) else None
    if isinstance(n_new, int) and "deltas" in inputs:
        parts.append(
            (f"params.n_new = {n_new}", 3 * max(n_new, 0) * _elements(inputs["deltas"]["shape"][:1]))
        )
    return parts


def evaluation_elements(entry: dict[str, Any]) -> int:
    """Elements a case holds plus what re-evaluating it allocates (the sum of :func:`evaluation_parts`)."""
    return sum(n for _, n in evaluation_parts(entry))


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    """NumPy's broadcast shape of ``a`` and ``b`` (the larger dimension where they disagree)."""
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    return [max(x, y) for x, y in zip(a, b, strict=True)]


def data_parts(inputs: dict[str, Any]) -> list[tuple[str, int]]:
    """``(field, elements)`` a re-evaluation allocates that only the stored *values* reveal: per patch
    grid row (``t, h, w`` or ``h, w``) ``3·t·h·w`` ids, counting a zero or negative entry as 1 (the axes
    are still laid out; the oracle refuses it only later), and the longest sequence of ``cu_seqlens``."""
    parts = []
    for name in ("grids", "image_grid_thw", "video_grid_thw"):
        arr = inputs.get(name)
        if arr is None or getattr(arr, "ndim", 0) != 2:
            continue
        for i, row in enumerate(arr.tolist()):
            parts.append((f"inputs.{name}[{i}] = {row}", 3 * math.prod(max(abs(int(v)), 1) for v in row)))
    cu = inputs.get("cu_seqlens")
    if cu is not None and getattr(cu, "size", 0):
        top = max(abs(int(v)) for v in cu.ravel().tolist())
        parts.append((f"inputs.cu_seqlens holding {top}", top))
    return parts


def check_values(where: str, inputs: dict[str, Any], limits: ReadLimits) -> None:
    """Refuse a case whose stored values (:func:`data_parts`) would make re-evaluation allocate more than
    ``limits.case_elements``, before it allocates anything; the error names the largest field."""
    _check_parts(where, "elements its stored values make re-evaluation allocate", data_parts(inputs), limits)


def _check_parts(where: str, what: str, parts: list[tuple[str, int]], limits: ReadLimits) -> None:
    total = sum(n for _, n in parts)
    if total > limits.case_elements:
        field = max(parts, key=lambda part: part[1])[0]
        raise limits.refuse(where, f"{what} (most for {field})", total, "case_elements")


def check_declared(root_name: str, entry: dict[str, Any], limits: ReadLimits) -> None:
    """Refuse a case whose declared tensors or re-evaluation exceed ``limits`` (no allocation)."""
    where = f"{root_name}/{MANIFEST}: case {entry['id']!r}"
    for role in ("inputs", "expected", "aux"):
        for name, spec in entry.get(role, {}).items():
            shape = spec["shape"]
            big = next((d for d in shape if d > 2**62), None)
            if big is not None:
                raise GoldenError(f"{where}: {role}.{name} shape has dimension {big}, over 2^62 (corrupt)")
            nbytes = _elements(shape) * _ITEMSIZE[spec["dtype"]]
            if nbytes > limits.tensor_bytes:
                raise limits.refuse(
                    where, f"{role}.{name} {spec['dtype']}{shape} size", nbytes, "tensor_bytes", " bytes"
                )
    _check_parts(where, "elements held and allocated by re-evaluation", evaluation_parts(entry), limits)
