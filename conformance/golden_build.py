"""A golden set built in memory: every tensor file's bytes and the validated manifest, nothing on disk."""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .case import Case
from .golden_manifest import (
    _ID_RE,
    _TENSOR_RE,
    FORMATS,
    LICENSE,
    SCHEMA_VERSION,
    SUITE_VERSION,
    TENSOR_DTYPES,
    validate_manifest,
)
from .safetensors_io import safetensors_bytes, write_npz

__all__ = ["build_set", "manifest_bytes"]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())  # a NumPy NaN or inf is refused like a Python one
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite number {obj} cannot go into a golden manifest")
    return obj


def _stored(arr: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype.name not in TENSOR_DTYPES:
        raise TypeError(f"{what}: dtype {arr.dtype} cannot be stored (allowed: {TENSOR_DTYPES})")
    return arr


def _tensor_file_bytes(case: Case, fmt: str) -> bytes:
    tensors = {}
    for role, group in (("inputs", case.inputs), ("expected", case.expected), ("aux", case.aux)):
        for name, arr in group.items():
            if not _TENSOR_RE.match(name):
                raise ValueError(f"case {case.id!r}: tensor name {name!r} is not allowed")
            tensors[f"{role}.{name}"] = _stored(arr, f"case {case.id!r} {role}.{name}")
    if fmt == "safetensors":
        return safetensors_bytes(tensors, {"case_id": case.id, "schema_version": str(SCHEMA_VERSION)})
    buf = io.BytesIO()
    write_npz(buf, tensors)
    return buf.getvalue()


def _specs(group: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {
        name: {"dtype": np.asarray(a).dtype.name, "shape": list(np.shape(a))} for name, a in group.items()
    }


def build_set(
    cases: Iterable[Case], fmt: str, generator: str, source: str, bug_classes, informational
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of the new set in memory, and its manifest (validated). Nothing touches the disk."""
    import rope_ref

    from .catalogue import BUG_CLASSES

    files: dict[str, bytes] = {}
    entries = []
    for case in cases:
        if not isinstance(case.id, str) or not _ID_RE.match(case.id):
            raise ValueError(f"case id {case.id!r} is not allowed (letters, digits, '_', '.', '-')")
        file = case.id + FORMATS[fmt]
        if file in files:
            raise ValueError(f"case id {case.id!r} occurs twice (each case needs its own file)")
        data = _tensor_file_bytes(case, fmt)
        files[file] = data
        entry: dict[str, Any] = {
            "id": case.id,
            "op": case.op,
            "description": case.description,
            "bug_class": case.bug_class,
            "tolerance": case.tolerance,
            "io_dtype": case.io_dtype,
            "config": _jsonable(case.config),
            "params": _jsonable(case.params),
            "file": file,
            "sha256": hashlib.sha256(data).hexdigest(),
            "inputs": _specs(case.inputs),
            "expected": _specs(case.expected),
        }
        if case.aux:
            entry["aux"] = _specs(case.aux)
        if case.requires:
            entry["requires"] = list(case.requires)
        entries.append(entry)
    used = {e["bug_class"] for e in entries}
    classes = bug_classes if bug_classes is not None else BUG_CLASSES
    provenance: dict[str, Any] = {
        "rope_ref_version": rope_ref.__version__,
        # No numpy_version since suite 2.0.0: the oracle's bits no longer depend on NumPy.
        "license": LICENSE,
        "generator": generator,
        "source": source,
    }
    if informational:
        provenance["informational"] = _jsonable(informational)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "suite_version": SUITE_VERSION,
        "format": fmt,
        "provenance": provenance,
        "bug_classes": {k: v for k, v in classes.items() if k in used},
        "cases": entries,
    }
    validate_manifest(manifest, "the new manifest")
    return files, manifest


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The bytes of ``manifest.json`` as rope-ref writes it (deterministic, ASCII)."""
    return (json.dumps(manifest, indent=1, ensure_ascii=True) + "\n").encode("ascii")
