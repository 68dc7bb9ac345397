"""A small, dependency-free safetensors reader/writer, and a pickle-free ``.npz`` writer/reader.

The safetensors format (huggingface/safetensors ``README.md``, "Format"): 8 bytes holding N, the
header length as an unsigned little-endian 64-bit integer; N bytes of UTF-8 JSON mapping each tensor
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the byte buffer
that follows the header), plus an optional ``"__metadata__"`` string-to-string map; then the raw
little-endian, C-order tensor bytes. The buffer must be covered by the tensors without holes or
overlaps. We pad the header with spaces to a multiple of 8 bytes, as the reference writer does.

rope_ref depends only on NumPy at run time, so the golden files are read and written here; the
``safetensors`` package is used only in the tests, to prove both directions interoperate.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import struct
import zipfile
from pathlib import Path

import numpy as np

__all__ = [
    "SafetensorsError",
    "TENSOR_NAME_RE",
    "read_safetensors",
    "write_safetensors",
    "safetensors_bytes",
    "read_npz",
    "write_npz",
    "NUMPY_TO_ST",
    "ST_TO_NUMPY",
    "MAX_JSON_DEPTH",
    "loads_bounded",
]

#: Tensor names we write and accept in golden files (safetensors itself allows any string).
TENSOR_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")

#: NumPy dtype name -> safetensors dtype code (BF16 is read-only: NumPy has no bfloat16).
NUMPY_TO_ST = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}
ST_TO_NUMPY = {v: k for k, v in NUMPY_TO_ST.items()}

# A header larger than this is refused before it is parsed (the reference reader uses 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


#: Deepest JSON nesting accepted in a safetensors header or a golden manifest (ours use 4 or 5 levels).
MAX_JSON_DEPTH = 64


class SafetensorsError(ValueError):
    """A file is not valid safetensors (or npz); the message starts with the file's path."""


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> object:
    """``json.loads`` that refuses nesting deeper than ``max_depth`` with a ``ValueError`` (never a
    ``RecursionError``, whose depth depends on the interpreter's stack)."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"JSON nested deeper than {max_depth} levels")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return obj


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not TENSOR_NAME_RE.match(name):
        raise SafetensorsError(
            f"{where}: tensor name {name!r} is not allowed (use letters, digits, '_' and '.')"
        )
    return name


def safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    """Serialise ``tensors`` to safetensors bytes, deterministically (names sorted, no timestamps)."""
    header: dict[str, object] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata must map str to str (a safetensors rule)")
        header["__metadata__"] = dict(sorted(metadata.items()))
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        _check_name(name, "write_safetensors")
        arr = np.asarray(tensors[name])
        code = NUMPY_TO_ST.get(arr.dtype.name)
        if code is None:
            raise TypeError(
                f"tensor {name!r}: dtype {arr.dtype} cannot be stored (allowed: {sorted(NUMPY_TO_ST)})"
            )
        data = np.require(arr, dtype=arr.dtype.newbyteorder("<"), requirements="C").tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write_safetensors(
    path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` to ``path`` in safetensors format (see :func:`safetensors_bytes`)."""
    Path(path).write_bytes(safetensors_bytes(tensors, metadata))


def _parse_entry(name: str, info: object, where: str) -> tuple[str, tuple[int, ...], int, int]:
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(
            f"{where}: tensor {name!r} needs exactly dtype, shape and data_offsets, got {info!r:.200}"
        )
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if code not in ST_TO_NUMPY and code != "BF16":
        raise SafetensorsError(f"{where}: tensor {name!r} has unsupported dtype {code!r}")
    if not isinstance(shape, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has a bad shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has bad data_offsets {offsets!r}")
    return code, tuple(shape), offsets[0], offsets[1]


def _decode(code: str, raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    if code == "BF16":
        # bfloat16 is the top half of a float32 (Google Brain float), so widen the bit pattern.
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    dtype = np.dtype(ST_TO_NUMPY[code]).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def read_safetensors(
    path: str | os.PathLike, data: bytes | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file: ``(tensors, metadata)``. BF16 tensors come back as float32.

    Every structural rule is checked (header length, JSON, dtypes, shapes, offsets that tile the
    buffer exactly); a violation raises :class:`SafetensorsError` naming ``path``. ``data`` lets a
    caller pass bytes it already read (and checksummed).
    """
    where = str(path)
    blob = Path(path).read_bytes() if data is None else data
    if len(blob) < 8:
        raise SafetensorsError(f"{where}: truncated: {len(blob)} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER or 8 + n > len(blob):
        raise SafetensorsError(
            f"{where}: truncated or corrupt: header length {n} but the file has {len(blob)} bytes"
        )
    try:
        header = loads_bounded(blob[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError(f"{where}: header is not valid UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: header must be a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{where}: __metadata__ must map str to str")
    buffer = blob[8 + n :]
    entries = []
    for name, info in header.items():
        code, shape, begin, end = _parse_entry(_check_name(name, where), info, where)
        itemsize = 2 if code == "BF16" else np.dtype(ST_TO_NUMPY[code]).itemsize
        if end < begin or end - begin != math.prod(shape) * itemsize:
            raise SafetensorsError(
                f"{where}: tensor {name!r}: data_offsets {[begin, end]} != shape {list(shape)} of {code}"
            )
        entries.append((begin, end, name, code, shape))
    entries.sort()
    cursor = 0
    for begin, end, name, _, _ in entries:
        if begin != cursor:
            raise SafetensorsError(
                f"{where}: tensor {name!r} starts at byte {begin}, expected {cursor} (hole or overlap)"
            )
        cursor = end
    if cursor != len(buffer):
        raise SafetensorsError(
            f"{where}: data buffer has {len(buffer)} bytes but tensors cover {cursor} (truncated/padded)"
        )
    tensors = {name: _decode(code, buffer[begin:end], shape) for begin, end, name, code, shape in entries}
    return dict(sorted(tensors.items())), dict(metadata)


# -- npz: a zip of .npy files, written without pickle and without timestamps ---------------------

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def write_npz(path: str | os.PathLike | io.BytesIO, tensors: dict[str, np.ndarray]) -> None:
    """Write an uncompressed ``.npz`` that ``np.load(path, allow_pickle=False)`` reads (``path`` may be a
    binary file object).

    Unlike ``np.savez`` the result is byte-for-byte deterministic: members are sorted and stamped
    with the zip epoch (1980-01-01). Object arrays are refused (they would need pickle).
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(tensors):
            _check_name(name, "write_npz")
            arr = np.asarray(tensors[name])
            if arr.dtype.hasobject:
                raise TypeError(f"tensor {name!r} is an object array; npz golden files never use pickle")
            buf = io.BytesIO()
            # np.ascontiguousarray would turn a 0-d scalar into shape (1,); np.require keeps the shape.
            np.lib.format.write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read an ``.npz`` with ``allow_pickle=False``; a bad file raises :class:`SafetensorsError` naming it."""
    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {_check_name(k, where): np.array(z[k]) for k in z.files}
    except SafetensorsError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise SafetensorsError(f"{where}: not a readable pickle-free npz ({exc})") from None
    return dict(sorted(out.items()))
