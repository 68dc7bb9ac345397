"""The golden on-disk format: our safetensors/npz I/O, interop with the `safetensors` package, the
manifest JSON Schema, and integrity failures (tampered, truncated, path-escaping) naming the file."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from rope_ref.conformance import golden
from rope_ref.conformance.golden import GoldenError, load_golden, validate_manifest, write_golden
from rope_ref.conformance.safetensors_io import (
    SafetensorsError,
    read_npz,
    read_safetensors,
    safetensors_bytes,
    write_npz,
    write_safetensors,
)
from shipped_golden import catalogue_cases

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "golden-manifest.schema.json").read_text()
)


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "a.f64": rng.standard_normal((2, 3)),
        "b_f32": rng.standard_normal(5).astype(np.float32),
        "c16": np.array([1.0, -2.5, 65504.0], dtype=np.float16),
        "ids": np.arange(12, dtype=np.int64).reshape(3, 4),
        "scalar": np.array(1.25),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "i32": np.array([-1, 7], dtype=np.int32),
    }


# -- our reader/writer ----------------------------------------------------------------------------------


def test_roundtrip_and_layout(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, _tensors(), {"k": "v"})
    got, meta = read_safetensors(path)
    assert meta == {"k": "v"}
    for name, arr in _tensors().items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
        np.testing.assert_array_equal(got[name], arr)
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0  # header padded to 8 bytes
    header = json.loads(blob[8 : 8 + n])
    assert header["ids"] == {"dtype": "I64", "shape": [3, 4], "data_offsets": header["ids"]["data_offsets"]}
    # Raw little-endian C-order bytes, independent of our reader.
    b, e = header["ids"]["data_offsets"]
    assert blob[8 + n + b : 8 + n + e] == np.arange(12, dtype="<i8").tobytes()


def test_writer_is_deterministic():
    assert safetensors_bytes(_tensors()) == safetensors_bytes(dict(reversed(list(_tensors().items()))))


def test_interop_with_safetensors_package(tmp_path):
    from safetensors.numpy import load_file, save_file

    ours = tmp_path / "ours.safetensors"
    theirs = tmp_path / "theirs.safetensors"
    tensors = {k: v for k, v in _tensors().items() if k != "empty"}
    write_safetensors(ours, tensors, {"case_id": "x"})
    loaded = load_file(str(ours))
    assert set(loaded) == set(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(loaded[k], v)
        assert loaded[k].dtype == v.dtype
    save_file(tensors, str(theirs), metadata={"m": "1"})
    got, meta = read_safetensors(theirs)
    assert meta == {"m": "1"}
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v)


def test_reads_bf16_from_safetensors_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    t = torch.tensor([1.0, -2.0, 3.140625, 1e-3], dtype=torch.bfloat16)
    save_file({"w": t}, str(tmp_path / "bf.safetensors"))
    got, _ = read_safetensors(tmp_path / "bf.safetensors")
    assert got["w"].dtype == np.float32
    np.testing.assert_array_equal(got["w"], t.float().numpy())


def test_shipped_golden_file_reads_with_safetensors_package():
    from safetensors.numpy import load_file

    case = golden.read_manifest()[1]["cases"][0]
    path = golden.shipped_dir() / case["file"]
    theirs = load_file(str(path))
    ours, _ = read_safetensors(path)
    assert set(theirs) == set(ours)
    for k in ours:
        np.testing.assert_array_equal(theirs[k], ours[k])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:5], "truncated"),
        (lambda b: b[:-3], "truncated"),
        (lambda b: b + b"\0" * 8, "cover"),
        (lambda b: struct.pack("<Q", 10**12) + b[8:], "header length"),
        (lambda b: b[:8] + b"[" + b[9:], "JSON"),
    ],
)
def test_reader_rejects_corrupt_files(tmp_path, mutate, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(mutate(safetensors_bytes(_tensors())))
    with pytest.raises(SafetensorsError, match=message) as err:
        read_safetensors(path)
    assert str(path) in str(err.value)


def test_reader_rejects_overlapping_offsets(tmp_path):
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    text = json.dumps(header).encode()
    path = tmp_path / "o.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 12)
    with pytest.raises(SafetensorsError, match="overlap"):
        read_safetensors(path)


def test_npz_is_pickle_free_and_deterministic(tmp_path):
    tensors = _tensors()
    write_npz(tmp_path / "a.npz", tensors)
    write_npz(tmp_path / "b.npz", dict(reversed(list(tensors.items()))))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with np.load(tmp_path / "a.npz", allow_pickle=False) as z:
        for k, v in tensors.items():
            np.testing.assert_array_equal(z[k], v)
    assert set(read_npz(tmp_path / "a.npz")) == set(tensors)
    with pytest.raises(TypeError, match="pickle"):
        write_npz(tmp_path / "c.npz", {"o": np.array([object()])})
    (tmp_path / "d.npz").write_bytes(b"not a zip")
    with pytest.raises(SafetensorsError, match="d.npz"):
        read_npz(tmp_path / "d.npz")


# -- manifest schema --------------------------------------------------------------------------------------


def test_schema_is_valid_and_accepts_shipped_manifest():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    _, manifest = golden.read_manifest()
    jsonschema.validate(manifest, SCHEMA)


def _mutations():
    def case0(m):
        return m["cases"][0]

    return [
        ("schema_version", lambda m: m.__setitem__("schema_version", 2)),
        ("format", lambda m: m.__setitem__("format", "pickle")),
        ("provenance", lambda m: m["provenance"].pop("generator")),
        ("provenance", lambda m: m["provenance"].__setitem__("license", 2)),
        ("extra key", lambda m: m.__setitem__("surprise", 1)),
        ("op", lambda m: case0(m).__setitem__("op", "rotate")),
        ("tolerance", lambda m: case0(m).__setitem__("tolerance", "loose")),
        ("io_dtype", lambda m: case0(m).__setitem__("io_dtype", "float8")),
        ("sha256", lambda m: case0(m).__setitem__("sha256", "abc")),
        ("file escape", lambda m: case0(m).__setitem__("file", "../evil.safetensors")),
        ("file subdir", lambda m: case0(m).__setitem__("file", "sub/evil.safetensors")),
        (
            "tensor escape",
            lambda m: case0(m)["expected"].__setitem__("../x", {"dtype": "float64", "shape": [1]}),
        ),
        ("dtype", lambda m: next(iter(case0(m)["expected"].values())).__setitem__("dtype", "object")),
        ("shape", lambda m: next(iter(case0(m)["expected"].values())).__setitem__("shape", [-1])),
        ("layout", lambda m: case0(m)["config"].__setitem__("layout", "neox")),
        ("head_dim", lambda m: case0(m)["config"].__setitem__("head_dim", 7)),
        ("missing key", lambda m: case0(m).pop("bug_class")),
        ("empty expected", lambda m: case0(m).__setitem__("expected", {})),
        ("requires type", lambda m: case0(m).__setitem__("requires", "apply-x")),
        ("requires id", lambda m: case0(m).__setitem__("requires", ["../evil"])),
        ("requires duplicate", lambda m: case0(m).__setitem__("requires", ["a", "a"])),
        ("aux dtype", lambda m: case0(m).__setitem__("aux", {"inv_freq": {"dtype": "object", "shape": [2]}})),
        ("aux name", lambda m: case0(m).__setitem__("aux", {"a/b": {"dtype": "float64", "shape": []}})),
    ]


def test_requires_must_name_an_earlier_case():
    """The validator (beyond the JSON Schema) also requires prerequisites to come earlier."""
    _, manifest = golden.read_manifest()
    manifest = json.loads(json.dumps(manifest))
    ids = [c["id"] for c in manifest["cases"]]
    manifest["cases"][1]["requires"] = [ids[0]]
    validate_manifest(manifest, "x/manifest.json")
    jsonschema.validate(manifest, SCHEMA)
    for bad in ([ids[2]], [ids[1]], ["no-such-case"]):
        manifest["cases"][1]["requires"] = bad
        with pytest.raises(GoldenError, match="not the id of an earlier case"):
            validate_manifest(manifest, "x/manifest.json")


def test_requires_and_aux_round_trip(tmp_path):
    cases = [c for c in catalogue_cases() if "dynamic_" in c.id and c.id.endswith("-fp32")]
    assert any(c.requires for c in cases) and all(c.aux for c in cases)
    for fmt in ("safetensors", "npz"):
        loaded = load_golden(write_golden(cases, tmp_path / fmt, generator="t", source="custom", fmt=fmt))
        for a, b in zip(cases, loaded, strict=True):
            assert a.requires == b.requires and set(a.aux) == set(b.aux)
            for k in a.aux:
                assert a.aux[k].shape == b.aux[k].shape and a.aux[k].dtype == b.aux[k].dtype
                np.testing.assert_array_equal(a.aux[k], b.aux[k])


@pytest.mark.parametrize("label, mutate", _mutations(), ids=[m[0] for m in _mutations()])
@pytest.mark.slow
def test_schema_and_validator_reject_the_same_violations(label, mutate):
    _, manifest = golden.read_manifest()
    manifest = json.loads(json.dumps(manifest))
    manifest["cases"] = manifest["cases"][:2]
    mutate(manifest)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, SCHEMA)
    with pytest.raises(GoldenError, match="manifest.json: schema violation"):
        validate_manifest(manifest, "x/manifest.json")


# -- integrity of a golden directory ---------------------------------------------------------------------


@pytest.fixture()
def small_dir(tmp_path):
    cases = [
        c for c in catalogue_cases() if c.id.startswith(("apply-tiny_d4", "inv_freq-default_d64"))
    ]
    return write_golden(cases, tmp_path / "g", generator="test", source="custom")


def _first_file(root: Path) -> Path:
    return root / json.loads((root / "manifest.json").read_text())["cases"][0]["file"]


def _edit_manifest(root: Path, fn) -> None:
    m = json.loads((root / "manifest.json").read_text())
    fn(m)
    (root / "manifest.json").write_text(json.dumps(m))


def test_small_dir_loads(small_dir):
    cases = load_golden(small_dir)
    assert [c.id for c in cases][:1] == ["inv_freq-default_d64_base10000"]


def test_tampered_file_fails_naming_it(small_dir):
    path = _first_file(small_dir)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(GoldenError, match="checksum mismatch") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)


def test_truncated_file_fails_naming_it(small_dir):
    path = _first_file(small_dir)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(GoldenError, match="checksum mismatch") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)


def _rewrite_first_file(small_dir, data: bytes):
    """Replace the first case's file by ``data`` and give the manifest its checksum: only the structure is
    left to catch it. Returns the file's path."""
    path = _first_file(small_dir)
    path.write_bytes(data)
    _edit_manifest(small_dir, lambda m: m["cases"][0].__setitem__("sha256", hashlib.sha256(data).hexdigest()))
    return path


def test_truncated_file_with_updated_checksum_fails_structurally(small_dir):
    path = _rewrite_first_file(small_dir, _first_file(small_dir).read_bytes()[:-8])
    with pytest.raises(GoldenError, match="truncated") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)


def test_tensor_swap_with_valid_checksum_is_caught(small_dir):
    path = _rewrite_first_file(small_dir, safetensors_bytes({"expected.other": np.zeros(32)}))
    with pytest.raises(GoldenError, match="the manifest lists") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)


def test_schema_violation_names_manifest(small_dir):
    _edit_manifest(small_dir, lambda m: m["cases"][0].__setitem__("tolerance", "vibes"))
    with pytest.raises(GoldenError, match=r"manifest\.json: schema violation at /cases/0/tolerance"):
        load_golden(small_dir)


def test_invalid_json_manifest(small_dir):
    (small_dir / "manifest.json").write_text("{not json")
    with pytest.raises(GoldenError, match="manifest.json: not valid"):
        load_golden(small_dir)


def test_path_escape_is_refused(small_dir, tmp_path):
    outside = tmp_path / "evil.safetensors"
    shutil.copy(_first_file(small_dir), outside)
    _edit_manifest(small_dir, lambda m: m["cases"][0].__setitem__("file", "../evil.safetensors"))
    with pytest.raises(GoldenError, match="escapes"):
        load_golden(small_dir)


def test_symlink_escape_is_refused(small_dir, tmp_path):
    path = _first_file(small_dir)
    outside = tmp_path / "outside.safetensors"
    shutil.move(path, outside)
    path.symlink_to(outside)
    with pytest.raises(GoldenError, match="escapes") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)


def test_missing_file_and_missing_manifest(small_dir, tmp_path):
    path = _first_file(small_dir)
    path.unlink()
    with pytest.raises(GoldenError, match="missing") as err:
        load_golden(small_dir)
    assert path.name in str(err.value)
    with pytest.raises(GoldenError, match="manifest.json: missing"):
        load_golden(tmp_path)


def test_nothing_is_returned_before_all_checks(small_dir):
    # Corrupt the *last* file: loading must fail, never yield the earlier cases.
    m = json.loads((small_dir / "manifest.json").read_text())
    last = small_dir / m["cases"][-1]["file"]
    last.write_bytes(last.read_bytes()[:-1])
    with pytest.raises(GoldenError, match=last.name):
        load_golden(small_dir)


def test_npz_golden_dir_roundtrip(tmp_path):
    cases = [c for c in catalogue_cases() if c.id.startswith("apply-tiny_d2")]
    root = write_golden(cases, tmp_path / "n", generator="test", source="custom", fmt="npz")
    loaded = load_golden(root)
    for a, b in zip(cases, loaded, strict=True):
        assert a.id == b.id and a.io_dtype == b.io_dtype
        for k in a.inputs:
            np.testing.assert_array_equal(a.inputs[k], b.inputs[k])
            assert a.inputs[k].dtype == b.inputs[k].dtype
        for k in a.expected:
            np.testing.assert_array_equal(a.expected[k], b.expected[k])


# -- docs/golden-format.md §4 as a foreign reader would implement it ----------------------------------------

_U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_TINY = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}


def _doc_k(w):
    w = np.abs(np.asarray(w, dtype=np.float64))
    with np.errstate(divide="ignore"):
        return 8.0 + 2.0 * np.where(w > 0, np.abs(np.log(np.where(w > 0, w, 1.0))), 0.0)


def _doc_yarn(cfg, n):
    """§4.2 y_i: YaRN truncate=False correction-range rounding, per pair (0 otherwise)."""
    sc = (cfg or {}).get("scaling") or {}
    if sc.get("rope_type") != "yarn" or sc.get("truncate", True) or sc["factor"] <= 1:
        return np.zeros(n)
    d, base, f, l0 = cfg["rotary_dim"], cfg["base"], sc["factor"], sc["original_max_position_embeddings"]

    def corr(beta):
        return d * np.log(l0 / (2 * np.pi * beta)) / (2 * np.log(base))

    low, high = max(corr(sc["beta_fast"]), 0.0), min(corr(sc["beta_slow"]), d - 1.0)
    high = high + 0.001 if low == high else high
    s, u = d / (2 * np.log(base)), 2.0**-24
    d_low, d_high = 4 * (abs(low) + s) * u, 4 * (abs(high) + s) * u
    i = np.arange(n)
    r = np.clip((i - low) / (high - low), 0, 1)
    dr, g = (d_low + d_high) / (high - low) + 3 * u, 1 - 1 / f
    return np.where((i > low - d_low) & (i < high + d_high), g * dr / (1 - r * g) / u, 0.0)


def _doc_pairs(n, layout):
    i = np.arange(n)
    return (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)


def _doc_rotation(v, positions, theta, factor, rotary_dim, layout, u_a, u_r, floor, y=0.0):
    """§4.2 rotation rule: (tol, exact mask, per-pair norm tolerance, amplitude)."""
    n = rotary_dim // 2
    a, b = _doc_pairs(n, layout)
    lead = v.shape[:-1]
    pos = np.asarray(positions, dtype=np.float64)
    pos = pos.reshape((1,) * (len(lead) - pos.ndim) + pos.shape)
    t = np.broadcast_to(pos[..., None] * theta, lead + (n,))
    amp = abs(factor) * np.hypot(v[..., a], v[..., b])
    pair_tol = amp * ((_doc_k(theta) + y) * np.abs(t) * u_a + 8 * u_r) + floor
    tol = np.zeros(v.shape)
    tol[..., a], tol[..., b] = pair_tol, pair_tol
    exact = np.zeros(v.shape, dtype=bool)
    exact[..., rotary_dim:] = True
    if factor == 1.0:
        exact[..., :rotary_dim] |= np.broadcast_to(pos == 0, lead)[..., None]
    tol[exact] = 0.0
    return tol, exact, amp * 8 * u_r + floor, amp


def _doc_kernel_positions(entry, t, shape):
    """§3 positions forms of the kernel-shape ops, laid on the input's axes (negated when inverse)."""
    p = entry["params"]
    letters = p["axes"][:-1]
    if p["form"] == "ids":
        ids = t["inputs.positions"]
    elif p["form"] == "offset":
        b, s = shape[letters.index("b")], shape[letters.index("s")]
        off = t["inputs.offset"] if "inputs.offset" in t else np.full(b, p["offset"])
        ids = off.reshape(-1, 1) + np.arange(s)
    else:
        cu = t["inputs.cu_seqlens"]
        n = len(cu) - 1
        starts = (
            t["inputs.start_offsets"]
            if "inputs.start_offsets" in t
            else np.full(n, p.get("start_offset") or 0)
        )
        ids = np.concatenate([starts[j] + np.arange(cu[j + 1] - cu[j]) for j in range(n)])
    ids = np.asarray(ids, dtype=np.float64)
    if ids.ndim == 2:
        if letters.index("b") > letters.index("s"):
            ids = ids.T
        sizes = iter(ids.shape)
        reshaped = ids.reshape([next(sizes) if c in "bs" else 1 for c in letters])
    else:
        reshaped = ids.reshape([ids.shape[0] if c in "st" else 1 for c in letters])
    pos = np.broadcast_to(reshaped, shape[:-1])
    return -pos if p.get("inverse") else pos


def _doc_kernel(entry, t, name, terms):
    """§4.2 rotation rule of apply_axes / apply_qk / apply_qkv / round_trip: (tol, exact)."""
    u_a, u_r, floor, y = terms
    cfg, p = entry["config"], entry["params"]
    source = {"apply_axes": "x", "round_trip": "x", "apply_qkv": "qkv"}.get(entry["op"], name)
    v = t[f"inputs.{source}"].astype(np.float64)
    pos = _doc_kernel_positions(entry, t, v.shape)
    theta, factor = t["aux.inv_freq"], float(t["aux.attention_factor"])
    rule = (theta, factor, cfg["rotary_dim"], cfg["layout"], u_a, u_r, floor, y)
    tol, exact, _, _ = _doc_rotation(v, pos, *rule)
    if entry["op"] == "round_trip":
        tol2, exact2, _, _ = _doc_rotation(abs(factor) * v, -pos, *rule)
        tol, exact = np.sqrt(2.0) * abs(factor) * tol + tol2, exact & exact2
        tol[exact] = 0.0
    if entry["op"] == "apply_qkv":
        h = p["axes"].index("h")
        heads = np.arange(v.shape[h])
        is_v = (heads >= p["num_heads_q"] + p["num_heads_kv"]).reshape(
            [-1 if i == h else 1 for i in range(v.ndim)]
        )
        is_v = np.broadcast_to(is_v, v.shape)
        tol, exact = np.where(is_v, 0.0, tol), exact | is_v
    return tol, exact


def _doc_multiaxis(entry, t, u_a, u_r, floor):
    """§4.2 rotation rule for multiaxis_apply, per pair: (tol, exact, norm tolerance, amplitude)."""
    spec = entry["params"]["spec"]
    v = t["inputs.x"].astype(np.float64)
    phi, amp_f = t["aux.pair_inv_freq"], t["aux.pair_attention_factor"]
    streams, fi = spec["streams"], spec["freq_index"]
    n, per = len(streams), len(streams) // spec["blocks"]
    tables = spec["tables"]
    y = np.array(
        [_doc_yarn(tables[s], tables[s]["rotary_dim"] // 2)[k] for s, k in zip(streams, fi, strict=True)]
    )
    j = np.arange(per)
    if spec["layout"] == "half":
        a = np.concatenate([2 * per * k + j for k in range(spec["blocks"])])
        b = a + per
    else:
        a = np.concatenate([2 * per * k + 2 * j for k in range(spec["blocks"])])
        b = a + 1
    lead = v.shape[:-1]
    m = np.moveaxis(t["inputs.positions"].astype(np.float64), 0, -1)[..., streams]
    m = np.broadcast_to(m.reshape((1,) * (len(lead) + 1 - m.ndim) + m.shape), lead + (n,))
    amp = np.abs(amp_f) * np.hypot(v[..., a], v[..., b])
    pair_tol = amp * ((_doc_k(phi) + y) * np.abs(m * phi) * u_a + 8 * u_r) + floor
    tol, exact = np.zeros(v.shape), np.zeros(v.shape, bool)
    tol[..., a], tol[..., b] = pair_tol, pair_tol
    exact[..., 2 * n :] = True
    zero = (m == 0) & (amp_f == 1.0)
    exact[..., a] |= zero
    exact[..., b] |= zero
    tol[exact] = 0.0
    return tol, exact, amp * 8 * u_r + floor, amp


def _doc_tolerances(entry, t, policy):
    """Per expected output: (tol, exact) from the manifest entry, the file's tensors and the policy only."""
    io, angle, compute = policy
    u_a, u_r = min(_U[angle], 2.0**-24), _U[io] + min(_U[angle], 2.0**-24) + _U[compute]
    floor = 4 * max(_TINY[io], _TINY[compute])
    floor_t = 4 * _TINY["float64" if angle == "float64" else "float32"]
    rule, cfg, out = entry["tolerance"], entry["config"], {}
    y = _doc_yarn(cfg, cfg["rotary_dim"] // 2) if cfg else 0.0
    for name in entry["expected"]:
        e = t[f"expected.{name}"].astype(np.float64)
        if rule == "table":
            k = _doc_k(e) + (y if entry["op"] == "inv_freq" else 0.0)
            out[name] = (np.abs(e) * k * u_a + floor_t, np.zeros(e.shape, bool))
        elif rule == "trig":
            theta, A = t["aux.inv_freq"], float(t["aux.attention_factor"])
            ang = np.asarray(t["inputs.positions"], dtype=np.float64)[..., None] * theta
            out[name] = (
                abs(A) * ((_doc_k(theta) + y) * np.abs(ang) * u_a + 8 * u_r) + floor,
                np.zeros(e.shape, bool),
            )
        elif rule == "decay":
            rd = cfg["rotary_dim"]
            theta = cfg["base"] ** (-2.0 * np.arange(rd // 2) / rd)
            r = np.abs(t["inputs.distances"].astype(np.float64))
            phase = u_a * np.sum(_doc_k(theta) * theta)
            u_t = min(_U[angle], 2.0**-24) + _U[compute]
            tol = r * phase + u_t * ((rd // 2) ** 2 + 8 * np.abs(e)) + floor_t
            out[name] = (tol, np.zeros(e.shape, bool))
        elif entry["op"] == "chatglm_apply_2d":
            x = t["inputs.x"].astype(np.float64)
            h = x.shape[-1] // 2
            theta = entry["params"]["base"] ** (-2.0 * np.arange(h // 2) / h)
            tol, exact = np.zeros(x.shape), np.zeros(x.shape, bool)
            for ch, ids in ((slice(0, h), "position_ids"), (slice(h, None), "block_position_ids")):
                part = x[..., ch]
                if rule == "emulation":
                    a, b = _doc_pairs(h // 2, "half")
                    pair_tol = 3 * 2 * 2.0**-11 * np.hypot(part[..., a], part[..., b]) + 2.0**-24
                    sub = np.zeros(part.shape)
                    sub[..., a], sub[..., b] = pair_tol, pair_tol
                    tol[..., ch] = sub
                else:
                    tol[..., ch], exact[..., ch], _, _ = _doc_rotation(
                        part, t[f"inputs.{ids}"], theta, 1.0, h, "half", u_a, u_r, floor
                    )
            out[name] = (tol, exact)
        elif rule == "scale":
            out[name] = (
                8 * _U["float64" if angle == "float64" else "float32"] * np.abs(e),
                np.zeros(e.shape, bool),
            )
        elif entry["op"] == "multiaxis_apply":
            tol, exact, _, _ = _doc_multiaxis(entry, t, u_a, u_r, floor)
            out[name] = (tol, exact)
        elif entry["op"] in ("apply_axes", "apply_qk", "apply_qkv", "round_trip"):
            out[name] = _doc_kernel(entry, t, name, (u_a, u_r, floor, y))
        elif rule == "rotation":
            v = t["inputs.grad_out" if entry["op"] == "apply_vjp" else "inputs.x"].astype(np.float64)
            tol, exact, _, _ = _doc_rotation(
                v,
                t["inputs.positions"],
                t["aux.inv_freq"],
                float(t["aux.attention_factor"]),
                cfg["rotary_dim"],
                cfg["layout"],
                u_a,
                u_r,
                floor,
                y,
            )
            out[name] = (tol, exact)
    return out


@pytest.mark.parametrize(
    "policy",
    [
        ("float32",) * 3,
        ("bfloat16", "float32", "float32"),
        ("float16", "bfloat16", "float16"),
        ("float64",) * 3,
    ],
    ids=lambda p: "/".join(p),
)
@pytest.mark.slow
def test_documented_procedure_reproduces_the_tolerance_model(policy):
    """docs/golden-format.md §4.2, implemented from the manifest, raw tensors and aux alone (no rope_ref
    maths), gives the runner's tolerances and exact masks for every non-exact shipped case."""
    from rope_ref.conformance.protocol import PrecisionPolicy
    from rope_ref.conformance.tolerance import element_tolerance

    root, manifest = golden.read_manifest()
    loaded = {c.id: c for c in load_golden()}
    checked = 0
    for entry in manifest["cases"]:
        if entry["tolerance"] == "exact":
            continue
        tensors, _ = read_safetensors(root / entry["file"])
        case = loaded[entry["id"]]
        for name, (tol, exact) in _doc_tolerances(entry, tensors, policy).items():
            bounds = element_tolerance(case, name, PrecisionPolicy(*policy))
            np.testing.assert_array_equal(exact, bounds.exact, err_msg=entry["id"])
            np.testing.assert_allclose(tol, bounds.tol, rtol=1e-12, atol=0, err_msg=entry["id"])
            checked += 1
        if entry["op"] in ("apply", "apply_vjp"):  # the pair-norm check of §4.2
            u_a = min(_U[policy[1]], 2.0**-24)
            _, _, norm_tol, amp = _doc_rotation(
                tensors["inputs.grad_out" if entry["op"] == "apply_vjp" else "inputs.x"].astype(np.float64),
                tensors["inputs.positions"],
                tensors["aux.inv_freq"],
                float(tensors["aux.attention_factor"]),
                entry["config"]["rotary_dim"],
                entry["config"]["layout"],
                u_a,
                _U[policy[0]] + u_a + _U[policy[2]],
                4 * max(_TINY[policy[0]], _TINY[policy[2]]),
            )
            (_, _, _, want_amp, want_tol) = element_tolerance(case, "out", PrecisionPolicy(*policy)).norms[0]
            np.testing.assert_allclose(amp, want_amp, rtol=1e-14, err_msg=entry["id"])
            np.testing.assert_allclose(norm_tol, want_tol, rtol=1e-12, err_msg=entry["id"])
        if entry["op"] == "multiaxis_apply":  # its pair-norm check, pair by pair
            u_a = min(_U[policy[1]], 2.0**-24)
            u_r = _U[policy[0]] + u_a + _U[policy[2]]
            _, _, norm_tol, amp = _doc_multiaxis(
                entry, tensors, u_a, u_r, 4 * max(_TINY[policy[0]], _TINY[policy[2]])
            )
            (_, _, _, want_amp, want_tol) = element_tolerance(case, "out", PrecisionPolicy(*policy)).norms[0]
            np.testing.assert_allclose(amp, want_amp, rtol=1e-14, err_msg=entry["id"])
            np.testing.assert_allclose(norm_tol, want_tol, rtol=1e-12, err_msg=entry["id"])
    assert checked == sum(c.tolerance != "exact" for c in loaded.values()) + sum(
        c.op in ("cos_sin", "apply_qk") for c in loaded.values()  # two outputs each
    )
