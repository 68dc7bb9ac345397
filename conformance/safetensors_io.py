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
import zlib
from pathlib import Path

import numpy as np

__all__ = [
    "SafetensorsError",
    "SizeLimitError",
    "TENSOR_NAME_RE",
    "read_safetensors",
    "write_safetensors",
    "safetensors_bytes",
    "read_npz",
    "write_npz",
    "NUMPY_TO_ST",
    "ST_TO_NUMPY",
    "MAX_JSON_DEPTH",
    "MAX_DIM",
    "MAX_NPZ_MEMBER",
    "MAX_NPZ_RATIO",
    "loads_bounded",
]

#: Tensor names we write and accept in golden files (safetensors itself allows any string); \Z, not $,
#: which also matches before a trailing newline.
TENSOR_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*\Z")

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
#: Largest dimension accepted in a shape (NumPy's index type is a signed 64-bit integer).
MAX_DIM = 2**62
#: Default cap on one npz member's uncompressed size, and on its uncompressed/compressed ratio.
MAX_NPZ_MEMBER = 2**30
MAX_NPZ_RATIO = 64


#: Deepest JSON nesting accepted in a safetensors header or a golden manifest (ours use 4 or 5 levels).
MAX_JSON_DEPTH = 64


class SafetensorsError(ValueError):
    """A file is not valid safetensors (or npz); the message starts with the file's path."""


class SizeLimitError(SafetensorsError):
    """A file is over a size limit of the reader (``limit`` names it) rather than malformed."""

    def __init__(self, message: str, limit: str):
        super().__init__(message)
        self.limit = limit


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r:.80} in one object (the last one would silently win)")
    return obj


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, unique_keys: bool = False) -> object:
    """``json.loads`` that refuses nesting deeper than ``max_depth`` with a ``ValueError`` (never a
    ``RecursionError``, whose depth depends on the interpreter's stack), and with ``unique_keys`` an
    object that repeats a key."""
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys if unique_keys else None)
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
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM for s in shape
    ):
        raise SafetensorsError(
            f"{where}: tensor {name!r} has a bad shape {shape!r:.200} (non-negative integers up to 2^62)"
        )
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
    path: str | os.PathLike, data: bytes | None = None, *, max_header: int = _MAX_HEADER
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file: ``(tensors, metadata)``. BF16 tensors come back as float32.

    Every structural rule is checked (header length, JSON, dtypes, shapes, offsets that tile the
    buffer exactly); a violation raises :class:`SafetensorsError` naming ``path``. ``data`` lets a
    caller pass bytes it already read (and checksummed). A header longer than ``max_header`` bytes, a
    repeated JSON key or a dimension over 2^62 is refused before anything is allocated.
    """
    where = str(path)
    blob = Path(path).read_bytes() if data is None else data
    if len(blob) < 8:
        raise SafetensorsError(f"{where}: truncated: {len(blob)} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise SafetensorsError(
            f"{where}: truncated or corrupt: header length {n} but the file has {len(blob)} bytes"
        )
    if n > max_header:
        raise SizeLimitError(
            f"{where}: header length = {n} bytes is over the limit of {max_header} bytes", "header_bytes"
        )
    try:
        header = loads_bounded(blob[8 : 8 + n].decode("utf-8"), unique_keys=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError(f"{where}: header is not valid UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: header must be a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{where}: __metadata__ must map str to str")
    buffer = memoryview(blob)[8 + n :]
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


def _npy_array(raw: bytes, where: str, member: str) -> np.ndarray:
    """Parse one ``.npy`` member held in memory; its header must account for every byte."""
    buf = io.BytesIO(raw)
    fmt = np.lib.format
    version = fmt.read_magic(buf)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"member {member}: .npy format version {version} is not supported")
    read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran, dtype = read_header(buf)
    if dtype.hasobject:
        raise ValueError(f"member {member}: object arrays need pickle, which is never used")
    if not all(0 <= d <= MAX_DIM for d in shape):
        raise ValueError(f"member {member}: shape {shape!r:.200} has a dimension over 2^62")
    count = math.prod(shape)
    if count * dtype.itemsize != len(raw) - buf.tell():
        raise ValueError(
            f"member {member}: shape {list(shape)} of {dtype} needs {count * dtype.itemsize} bytes, "
            f"the member holds {len(raw) - buf.tell()} (truncated or padded)"
        )
    arr = np.frombuffer(raw, dtype=dtype, count=count, offset=buf.tell())
    return arr.reshape(shape, order="F" if fortran else "C").copy(order="K")


def read_npz(
    path: str | os.PathLike,
    data: bytes | None = None,
    *,
    max_member: int = MAX_NPZ_MEMBER,
    max_ratio: float = MAX_NPZ_RATIO,
) -> dict[str, np.ndarray]:
    """Read an ``.npz`` without pickle; a bad file raises :class:`SafetensorsError` naming it.

    Decompression is bounded before it starts: a member may declare at most ``max_member`` uncompressed
    bytes and at most ``max_ratio`` times its compressed size (a zip bomb is refused, not inflated), and
    no more than the declared size is ever produced. Repeated member names are refused.
    """
    where = str(path)
    try:
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as zf:
            infos = zf.infolist()
            out: dict[str, np.ndarray] = {}
            for info in infos:
                name = info.filename
                if not name.endswith(".npy"):
                    raise ValueError(f"member {name!r:.80} is not a .npy file")
                key = _check_name(name[:-4], where)
                if key in out:
                    raise ValueError(f"member {name!r} occurs twice")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise ValueError(f"member {name}: compression {info.compress_type} is not supported")
                if info.file_size > max_member:
                    raise SizeLimitError(
                        f"{where}: member {name}: uncompressed size = {info.file_size} bytes is over the "
                        f"limit of {max_member} bytes",
                        "tensor_bytes",
                    )
                if info.file_size > max_ratio * max(info.compress_size, 1):
                    raise SizeLimitError(
                        f"{where}: member {name}: expansion ratio = {info.file_size}/{info.compress_size} "
                        f"bytes is over the limit of {max_ratio:g} (a zip bomb?)",
                        "npz_ratio",
                    )
                with zf.open(info) as fh:
                    raw = fh.read(info.file_size + 1)
                if len(raw) != info.file_size:
                    raise ValueError(f"member {name}: holds {len(raw)} bytes, declares {info.file_size}")
                out[key] = _npy_array(raw, where, name)
    except SafetensorsError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, NotImplementedError, zlib.error) as exc:
        raise SafetensorsError(f"{where}: not a readable pickle-free npz ({exc})") from None
    return dict(sorted(out.items()))
