"""conformance/safetensors_io.py read directly from hand-built bytes: a safetensors header made with
``struct`` + ``json`` (huggingface/safetensors ``README.md``, "Format") and ``.npy`` members made by hand
(NumPy ``doc/neps/nep-0001-npy-format.rst``), so each expected value is fixed by the format, not our writer.
"""

from __future__ import annotations

import io
import json
import struct
import warnings
import zipfile

import pytest
from rope_ref.conformance.safetensors_io import (
    SafetensorsError,
    SizeLimitError,
    read_npz,
    read_safetensors,
)


def _st_file(header: dict, data: bytes) -> tuple[int, bytes]:
    """A safetensors blob: 8-byte little-endian header length, the JSON header, the data buffer."""
    text = json.dumps(header).encode("utf-8")
    return len(text), struct.pack("<Q", len(text)) + text + data


def _npy(descr: str, shape: tuple[int, ...], data: bytes, fortran: bool = False) -> bytes:
    """A version 1.0 ``.npy``: magic, uint16 header length, dict literal padded to 64 bytes, data."""
    head = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
    head += " " * (-(10 + len(head) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode("latin1") + data


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns on the repeated name we build on purpose
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
            for name, raw in members:
                zf.writestr(name, raw)
    return buf.getvalue()


# float64 1.5 = 0x3FF8000000000000 and -2.0 = 0xC000000000000000, stored little-endian
_F64_PAIR = bytes.fromhex("000000000000f83f" "00000000000000c0")


def test_decoded_tensor_is_a_writable_copy_not_the_callers_buffer():
    _, blob = _st_file({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}, _F64_PAIR)
    buffer = bytearray(blob)
    tensors, _ = read_safetensors("own.safetensors", data=buffer)
    a = tensors["a"]
    assert a.tolist() == [1.5, -2.0]
    assert a.flags.writeable, "read_safetensors: tensor 'a' is read-only"
    a[0] = 7.0
    assert bytes(buffer) == blob, "read_safetensors: tensor 'a' aliases the caller's bytes"


def test_header_exactly_at_the_limit_is_accepted_one_over_is_refused():
    n, blob = _st_file({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}, _F64_PAIR)
    tensors, _ = read_safetensors("edge.safetensors", data=blob, max_header=n)
    assert tensors["a"].tolist() == [1.5, -2.0]
    with pytest.raises(SizeLimitError, match=f"edge.safetensors: header length = {n} bytes") as err:
        read_safetensors("edge.safetensors", data=blob, max_header=n - 1)
    assert err.value.limit == "header_bytes"


def test_entry_with_an_extra_key_is_refused():
    entry = {"dtype": "F64", "shape": [2], "data_offsets": [0, 16], "scale": 2}
    _, blob = _st_file({"a": entry}, _F64_PAIR)
    with pytest.raises(SafetensorsError, match="extra.safetensors: tensor 'a' needs exactly dtype"):
        read_safetensors("extra.safetensors", data=blob)


def test_npz_member_repeated_is_refused():
    first = _npy("<f8", (2,), _F64_PAIR)
    second = _npy("<f8", (1,), _F64_PAIR[:8])
    blob = _zip([("a.npy", first), ("a.npy", second)])
    with pytest.raises(SafetensorsError, match=r"dup.npz: .*'a.npy' occurs twice"):
        read_npz("dup.npz", data=blob)


def test_npy_member_with_bytes_beyond_its_shape_is_refused():
    blob = _zip([("a.npy", _npy("<f8", (2,), _F64_PAIR + b"\0" * 8))])
    with pytest.raises(SafetensorsError, match=r"pad.npz: .*a.npy: shape \[2\].* holds 24"):
        read_npz("pad.npz", data=blob)


def test_npy_member_in_fortran_order_is_read_column_major():
    # six int32 values 0..5 stored column-major for shape (2, 3): element [i, j] is value i + 2 * j
    data = struct.pack("<6i", 0, 1, 2, 3, 4, 5)
    got = read_npz("f.npz", data=_zip([("m.npy", _npy("<i4", (2, 3), data, fortran=True))]))["m"]
    assert got.tolist() == [[0, 2, 4], [1, 3, 5]]
