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

import numpy as np
import pytest
from rope_ref.conformance import safetensors_io
from rope_ref.conformance.safetensors_io import (
    MAX_JSON_DEPTH,
    SafetensorsError,
    SizeLimitError,
    loads_bounded,
    read_npz,
    read_safetensors,
    safetensors_bytes,
    write_npz,
    write_safetensors,
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
_F64_PAIR = bytes.fromhex("000000000000f83f00000000000000c0")


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


# Each safetensors dtype code with the struct format that the format's README assigns it, and NumPy's name.
_CODES = [
    ("F64", "d", "float64", (1.5, -2.0)),
    ("F32", "f", "float32", (1.5, -2.0)),
    ("F16", "e", "float16", (1.5, -2.0)),
    ("I64", "q", "int64", (-(2**40), 3)),
    ("I32", "i", "int32", (-(2**20), 3)),
    ("I16", "h", "int16", (-300, 3)),
    ("I8", "b", "int8", (-100, 3)),
    ("U64", "Q", "uint64", (2**40, 3)),
    ("U32", "I", "uint32", (2**20, 3)),
    ("U16", "H", "uint16", (300, 3)),
    ("U8", "B", "uint8", (200, 3)),
    ("BOOL", "?", "bool", (True, False)),
]


@pytest.mark.parametrize(("code", "fmt", "name", "values"), _CODES, ids=[c[0] for c in _CODES])
def test_each_dtype_code_reads_and_writes_as_the_format_says(code, fmt, name, values):
    raw = struct.pack(f"<2{fmt}", *values)
    _, blob = _st_file({"t": {"dtype": code, "shape": [2], "data_offsets": [0, len(raw)]}}, raw)
    got = read_safetensors("codes.safetensors", data=blob)[0]["t"]
    assert got.dtype.name == name and got.dtype.isnative
    assert got.tolist() == list(values)
    written = safetensors_bytes({"t": np.array(values, dtype=name)})
    (n,) = struct.unpack("<Q", written[:8])
    assert json.loads(written[8 : 8 + n]) == {
        "t": {"dtype": code, "shape": [2], "data_offsets": [0, len(raw)]}
    }
    assert n % 8 == 0 and written[8 + n :] == raw


def test_bf16_is_widened_to_float32_exactly():
    # bfloat16 1.5 = 0x3FC0, -2.0 = 0xC000, 2^-126 = 0x0080 (the top half of the float32 bit pattern)
    raw = struct.pack("<3H", 0x3FC0, 0xC000, 0x0080)
    _, blob = _st_file({"b": {"dtype": "BF16", "shape": [3, 1], "data_offsets": [0, 6]}}, raw)
    got = read_safetensors("bf.safetensors", data=blob)[0]["b"]
    assert got.dtype.name == "float32" and got.shape == (3, 1)
    assert got[:, 0].tolist() == [1.5, -2.0, 2.0**-126]


def test_writer_sorts_names_pads_the_header_and_keeps_metadata():
    a, b = np.array([1, 2], dtype=np.int8), np.array([3.0], dtype=np.float32)
    blob = safetensors_bytes({"z": a, "a": b}, metadata={"y": "2", "x": "1"})
    (n,) = struct.unpack("<Q", blob[:8])
    head = blob[8 : 8 + n]
    assert n % 8 == 0 and head.rstrip(b" ") == head[: len(head.rstrip(b" "))]
    assert list(json.loads(head)) == ["__metadata__", "a", "z"]
    assert list(json.loads(head)["__metadata__"]) == ["x", "y"]
    assert json.loads(head)["z"]["data_offsets"] == [4, 6]
    tensors, meta = read_safetensors("w.safetensors", data=blob)
    assert meta == {"x": "1", "y": "2"} and list(tensors) == ["a", "z"]
    assert tensors["z"].tolist() == [1, 2] and tensors["a"].dtype.name == "float32"


def test_writer_refuses_bad_metadata_names_and_dtypes():
    with pytest.raises(TypeError, match="metadata must map str to str"):
        safetensors_bytes({"a": np.zeros(1)}, metadata={"k": 1})
    with pytest.raises(TypeError, match=r"tensor 'c': dtype complex128 cannot be stored"):
        safetensors_bytes({"c": np.zeros(1, dtype=complex)})
    with pytest.raises(SafetensorsError, match="write_safetensors: tensor name 'a-b' is not allowed"):
        safetensors_bytes({"a-b": np.zeros(1)})
    with pytest.raises(SafetensorsError, match="write_npz: tensor name '1a' is not allowed"):
        write_npz(io.BytesIO(), {"1a": np.zeros(1)})
    with pytest.raises(TypeError, match="tensor 'o' is an object array"):
        write_npz(io.BytesIO(), {"o": np.array([None, 1], dtype=object)})


def _entry(**change) -> dict:
    entry = {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}
    entry.update(change)
    return entry


BAD_HEADERS = [
    ("header not an object", [], "header must be a JSON object"),
    ("metadata not an object", {"__metadata__": ["x"], "a": _entry()}, "__metadata__ must map str to str"),
    ("metadata value not a str", {"__metadata__": {"k": 1}, "a": _entry()}, "__metadata__ must map str"),
    ("name with a dash", {"a-b": _entry()}, "tensor name 'a-b' is not allowed"),
    ("name and a newline", {"a\n": _entry()}, r"tensor name 'a\\n' is not allowed"),
    ("entry not an object", {"a": [0, 16]}, "tensor 'a' needs exactly dtype"),
    ("entry missing a key", {"a": {"dtype": "F64", "shape": [2]}}, "tensor 'a' needs exactly dtype"),
    ("unknown dtype", {"a": _entry(dtype="F8")}, "tensor 'a' has unsupported dtype 'F8'"),
    ("numpy name as dtype", {"a": _entry(dtype="float64")}, "unsupported dtype 'float64'"),
    ("shape not a list", {"a": _entry(shape=2)}, "tensor 'a' has a bad shape 2"),
    ("negative dimension", {"a": _entry(shape=[-2])}, "tensor 'a' has a bad shape"),
    ("bool dimension", {"a": _entry(shape=[True, 2])}, "tensor 'a' has a bad shape"),
    ("dimension over 2^62", {"a": _entry(shape=[2**62 + 1, 0], data_offsets=[0, 0])}, "bad shape"),
    ("float dimension", {"a": _entry(shape=[2.0])}, "tensor 'a' has a bad shape"),
    ("one offset", {"a": _entry(data_offsets=[16])}, "tensor 'a' has bad data_offsets"),
    ("three offsets", {"a": _entry(data_offsets=[0, 8, 16])}, "bad data_offsets"),
    ("negative offset", {"a": _entry(data_offsets=[-1, 16])}, "bad data_offsets"),
    ("bool offset", {"a": _entry(data_offsets=[False, 16])}, "bad data_offsets"),
    ("offsets not a list", {"a": _entry(data_offsets="0:16")}, "bad data_offsets"),
    ("offsets too short", {"a": _entry(data_offsets=[0, 8])}, r"data_offsets \[0, 8\] != shape \[2\] of F64"),
    ("offsets reversed", {"a": _entry(data_offsets=[16, 0])}, r"data_offsets \[16, 0\] != shape"),
    ("a hole", {"a": _entry(shape=[1], data_offsets=[8, 16])}, "starts at byte 8, expected 0"),
    ("overlap", {"a": _entry(), "b": _entry(shape=[1], data_offsets=[8, 16])}, "expected 16 .hole or"),
    ("buffer not covered", {"a": _entry(shape=[1], data_offsets=[0, 8])}, "has 16 bytes but tensors cover 8"),
]


@pytest.mark.parametrize(("label", "header", "message"), BAD_HEADERS, ids=[b[0] for b in BAD_HEADERS])
def test_each_header_rule_is_enforced(label, header, message):
    _, blob = _st_file(header, _F64_PAIR)
    with pytest.raises(SafetensorsError, match=message) as err:
        read_safetensors("bad.safetensors", data=blob)
    assert str(err.value).startswith("bad.safetensors: ") and type(err.value) is SafetensorsError


def test_tensors_are_placed_by_their_offsets_not_by_their_names():
    header = {"a": _entry(shape=[1], data_offsets=[8, 16]), "b": _entry(shape=[1], data_offsets=[0, 8])}
    _, blob = _st_file(header, _F64_PAIR)
    tensors, _ = read_safetensors("order.safetensors", data=blob)
    assert list(tensors) == ["a", "b"] and tensors["a"].tolist() == [-2.0] and tensors["b"].tolist() == [1.5]


def test_the_default_limits_are_the_documented_ones():
    """The reference reader's 100 MiB header, NumPy's signed 64-bit index, 2^30-byte npz members at a
    ratio of 64 (``docs/golden-format.md``), 64 levels of JSON."""
    assert safetensors_io._MAX_HEADER == 100 * 2**20 and safetensors_io.MAX_DIM == 2**62
    assert safetensors_io.MAX_NPZ_MEMBER == 2**30 and safetensors_io.MAX_NPZ_RATIO == 64
    assert MAX_JSON_DEPTH == 64


def test_largest_dimension_and_empty_metadata_are_accepted():
    header = {"__metadata__": {}, "e": {"dtype": "U8", "shape": [2**62, 0], "data_offsets": [0, 0]}}
    _, blob = _st_file(header, b"")
    tensors, meta = read_safetensors("edge.safetensors", data=blob)
    assert tensors["e"].shape == (2**62, 0) and tensors["e"].dtype.name == "uint8" and meta == {}


@pytest.mark.parametrize("blob", [b"", b"\x01" * 7], ids=["empty", "7 bytes"])
def test_fewer_than_8_bytes_is_truncated(blob):
    with pytest.raises(SafetensorsError, match=f"short.safetensors: truncated: {len(blob)} bytes"):
        read_safetensors("short.safetensors", data=blob)


def test_header_length_past_the_end_is_refused_and_exact_end_is_read():
    n, blob = _st_file({}, b"")
    assert read_safetensors("h.safetensors", data=blob) == ({}, {})
    with pytest.raises(SafetensorsError, match=f"header length {n + 1} but the file has {len(blob)} bytes"):
        read_safetensors("h.safetensors", data=struct.pack("<Q", n + 1) + blob[8:])


def test_header_reads_from_a_path_when_no_bytes_are_given(tmp_path):
    _, blob = _st_file({"a": _entry()}, _F64_PAIR)
    (tmp_path / "p.safetensors").write_bytes(blob)
    assert read_safetensors(tmp_path / "p.safetensors")[0]["a"].tolist() == [1.5, -2.0]
    write_safetensors(tmp_path / "w.safetensors", {"a": np.array([1.5, -2.0])}, {"k": "v"})
    assert read_safetensors(tmp_path / "w.safetensors")[1] == {"k": "v"}


@pytest.mark.parametrize(
    "text",
    [b"{not json}", b'{"a": "\xff"}', b'{"a": 1, "a": 1}'],
    ids=["bad JSON", "bad UTF-8", "repeated key"],
)
def test_header_that_is_not_utf8_json_of_unique_keys_is_refused(text):
    blob = struct.pack("<Q", len(text)) + text
    with pytest.raises(SafetensorsError, match="j.safetensors: header is not valid UTF-8 JSON"):
        read_safetensors("j.safetensors", data=blob)


def test_loads_bounded_depth_limit_is_inclusive():
    assert loads_bounded("[[[1]]]", max_depth=3) == [[[1]]]
    assert loads_bounded('{"a": {"b": [1]}}', max_depth=3) == {"a": {"b": [1]}}
    for text in ("[[[[1]]]]", '{"a": {"b": {"c": []}}}'):
        with pytest.raises(ValueError, match="JSON nested deeper than 3 levels"):
            loads_bounded(text, max_depth=3)
    assert loads_bounded("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(ValueError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        loads_bounded("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(ValueError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        loads_bounded("[" * 100000 + "]" * 100000)


def test_loads_bounded_repeated_keys_only_with_unique_keys():
    assert loads_bounded('{"a": 1, "a": 2}') == {"a": 2}
    with pytest.raises(ValueError, match="duplicate key 'a' in one object"):
        loads_bounded('{"b": 0, "a": 1, "a": 2}', unique_keys=True)


def test_npz_round_trip_keeps_dtype_shape_and_is_deterministic():
    tensors = {"z": np.arange(6, dtype=np.int16).reshape(2, 3), "s": np.float32(2.5), "a": np.zeros(0)}
    first, second = io.BytesIO(), io.BytesIO()
    write_npz(first, tensors)
    write_npz(second, dict(reversed(list(tensors.items()))))
    assert first.getvalue() == second.getvalue()
    with zipfile.ZipFile(first) as zf:
        assert [i.filename for i in zf.infolist()] == ["a.npy", "s.npy", "z.npy"]
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    got = read_npz("rt.npz", data=first.getvalue())
    assert list(got) == ["a", "s", "z"]
    assert got["s"].shape == () and got["s"].dtype.name == "float32" and float(got["s"]) == 2.5
    assert got["z"].dtype.name == "int16" and got["z"].tolist() == [[0, 1, 2], [3, 4, 5]]


def _npy2(descr: str, shape: tuple[int, ...], data: bytes) -> bytes:
    """A version 2.0 ``.npy`` (uint32 header length)."""
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    head += " " * (-(12 + len(head) + 1) % 64) + "\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(head)) + head.encode("latin1") + data


def test_npy_version_2_is_read_and_version_3_refused():
    got = read_npz("v2.npz", data=_zip([("a.npy", _npy2("<f8", (2,), _F64_PAIR))]))["a"]
    assert got.tolist() == [1.5, -2.0]
    v3 = b"\x93NUMPY\x03\x00" + _npy2("<f8", (2,), _F64_PAIR)[8:]
    with pytest.raises(SafetensorsError, match=r"v3.npz: .*a.npy: .npy format version \(3, 0\)"):
        read_npz("v3.npz", data=_zip([("a.npy", v3)]))


BAD_NPZ = [
    ("member not .npy", [("a.txt", b"x")], "member 'a.txt' is not a .npy file"),
    ("member name with a dash", [("a-b.npy", _npy("<f8", (2,), _F64_PAIR))], "tensor name 'a-b' is not"),
    ("object member", [("o.npy", _npy("|O", (2,), _F64_PAIR))], "o.npy: object arrays need pickle"),
    ("dimension over 2^62", [("d.npy", _npy("<f8", (2**62 + 1, 0), b""))], "d.npy: shape .* over 2"),
    (
        "member too short",
        [("a.npy", _npy("<f8", (2,), _F64_PAIR[:8]))],
        r"needs 16 bytes, the member holds 8",
    ),
    ("not a zip", None, "not a readable pickle-free npz"),
]


@pytest.mark.parametrize(("label", "members", "message"), BAD_NPZ, ids=[b[0] for b in BAD_NPZ])
def test_each_npz_rule_is_enforced(label, members, message):
    blob = b"PK not a zip" if members is None else _zip(members)
    with pytest.raises(SafetensorsError, match=message) as err:
        read_npz("bad.npz", data=blob)
    assert str(err.value).startswith("bad.npz: ") and type(err.value) is SafetensorsError


def test_npz_largest_dimension_is_accepted():
    got = read_npz("e.npz", data=_zip([("e.npy", _npy("|u1", (2**62, 0), b""))]))["e"]
    assert got.shape == (2**62, 0) and got.dtype.name == "uint8"


def _deflated(raw: bytes) -> tuple[bytes, int]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.npy", raw)
        size = zf.infolist()[0].compress_size
    return buf.getvalue(), size


def test_npz_member_size_limit_is_inclusive_and_names_tensor_bytes():
    raw = _npy("<f8", (2,), _F64_PAIR)
    blob = _zip([("a.npy", raw)])
    assert read_npz("m.npz", data=blob, max_member=len(raw))["a"].tolist() == [1.5, -2.0]
    with pytest.raises(
        SizeLimitError, match=f"m.npz: member a.npy: uncompressed size = {len(raw)} bytes"
    ) as e:
        read_npz("m.npz", data=blob, max_member=len(raw) - 1)
    assert e.value.limit == "tensor_bytes"


def test_npz_ratio_limit_is_inclusive_and_names_npz_ratio():
    raw = _npy("<f8", (512,), b"\0" * 4096)
    blob, packed = _deflated(raw)
    ratio = len(raw) / packed
    assert read_npz("r.npz", data=blob, max_ratio=ratio)["a"].shape == (512,)
    with pytest.raises(
        SizeLimitError, match=f"r.npz: member a.npy: expansion ratio = {len(raw)}/{packed}"
    ) as e:
        read_npz("r.npz", data=blob, max_ratio=ratio * 0.999)
    assert e.value.limit == "npz_ratio"


def test_npz_with_an_unsupported_compression_is_refused():
    blob = bytearray(_zip([("a.npy", _npy("<f8", (2,), _F64_PAIR))]))
    for at in (8, blob.rindex(b"PK\x01\x02") + 10):  # compression method: local and central headers
        blob[at : at + 2] = struct.pack("<H", 12)  # bzip2
    with pytest.raises(SafetensorsError, match="bad.npz: .*a.npy: compression 12 is not supported"):
        read_npz("bad.npz", data=bytes(blob))


def test_npz_reads_from_a_path_when_no_bytes_are_given(tmp_path):
    (tmp_path / "p.npz").write_bytes(_zip([("a.npy", _npy("<f8", (2,), _F64_PAIR))]))
    assert read_npz(tmp_path / "p.npz")["a"].tolist() == [1.5, -2.0]


def test_a_header_length_past_the_end_is_corruption_not_a_limit():
    blob = struct.pack("<Q", 2**40) + b"{}      "
    with pytest.raises(
        SafetensorsError, match="huge.safetensors: truncated or corrupt: header length"
    ) as err:
        read_safetensors("huge.safetensors", data=blob, max_header=16)
    assert not isinstance(err.value, SizeLimitError)


def test_writer_stores_any_layout_or_byte_order_as_little_endian_c_order():
    f_order = np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))
    big = np.array([1.5, -2.0], dtype=">f8")
    blob = safetensors_bytes({"f": f_order, "big": big, "view": f_order[:, ::2]})
    (n,) = struct.unpack("<Q", blob[:8])
    assert blob[8 + n : 8 + n + 16] == _F64_PAIR  # "big" sorts first
    tensors, _ = read_safetensors("layout.safetensors", data=blob)
    assert tensors["f"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert tensors["view"].tolist() == [[0.0, 2.0], [3.0, 5.0]]
    assert tensors["big"].tolist() == [1.5, -2.0] and tensors["big"].dtype.isnative


def test_npz_tensors_are_writable_copies():
    blob = _zip([("a.npy", _npy("<f8", (2,), _F64_PAIR))])
    a = read_npz("w.npz", data=blob)["a"]
    a[0] = 9.0
    assert a.flags.writeable and read_npz("w.npz", data=blob)["a"].tolist() == [1.5, -2.0]
