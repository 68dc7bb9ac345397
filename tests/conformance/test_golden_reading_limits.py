"""Reading a golden set from a stranger is bounded, follows nothing and is never ambiguous.

Each test is one of the attacks of issue 28 on ``golden verify`` / ``conformance run``, run in a child
limited to 1 GiB of address space: a refusal is one line naming the file, the field, the value and the
limit, with the documented exit status (2: over a limit the user can raise; 3: corrupt or hostile).
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _hostile_sets import (
    CASE_FAILED,
    CORRUPT,
    PASSED,
    REFUSED,
    CappedCli,
    case_index,
    copy_set,
    make_set,
    one_line,
    read_manifest,
    resign,
    run_capped,
    write_manifest,
)
from rope_ref.conformance.safetensors_io import safetensors_bytes
from shipped_golden import catalogue_cases


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    base = tmp_path_factory.mktemp("limits")
    return {fmt: make_set(base / fmt, fmt) for fmt in ("safetensors", "npz")}


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """The CLI in one child under the memory cap, for every run of this module."""
    child = CappedCli(tmp_path_factory.mktemp("cli"))
    yield child
    child.close()


def _verify(cli: CappedCli, root: Path, *extra: str):
    out = cli.run("golden", "verify", str(root), *extra)
    return out.returncode, out.stderr


def _run(cli: CappedCli, root: Path, *extra: str):
    out = cli.run("conformance", "run", "--backend", "numpy", "-q", "--golden", str(root), *extra)
    return out.returncode, out.stderr


# -- 1. memory from a tiny file --------------------------------------------------------------------------


def _wide_cos_sin(root: Path) -> str:
    """A cos_sin case of 10^5 stored positions whose manifest claims head_dim 65536 (about 800 KB)."""
    m = read_manifest(root)
    i = case_index(m, "cos_sin")
    case = m["cases"][i]
    case["config"].update(head_dim=65536, rotary_dim=65536)
    positions = np.arange(100_000, dtype=np.int64)
    tensors = {"inputs.positions": positions, "expected.cos": np.zeros(2), "expected.sin": np.zeros(2)}
    tensors["aux.inv_freq"] = np.ones(4)
    tensors["aux.attention_factor"] = np.array(1.0)
    case["inputs"] = {"positions": {"dtype": "int64", "shape": [100_000]}}
    case["expected"] = {n: {"dtype": "float64", "shape": [2]} for n in ("cos", "sin")}
    case["aux"] = {
        "inv_freq": {"dtype": "float64", "shape": [4]},
        "attention_factor": {"dtype": "float64", "shape": []},
    }
    resign(root, i, safetensors_bytes(tensors), m)
    return case["id"]


def test_reevaluation_size_is_refused_before_allocating(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    case_id = _wide_cos_sin(root)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == REFUSED, err
    # 10^5 positions x 65536 channels: far over the default limit, named with its value
    assert "case_elements" in line and "manifest.json" in line and case_id in line
    value = int(re.search(r"allocated by re-evaluation \(most for [^)]*\) = (\d+) is over", line).group(1))
    assert value >= 100_000 * 32768
    code, err = _run(cli, root)
    assert code == REFUSED and "case_elements" in one_line(err)


def test_raised_limit_still_fails_cleanly_under_a_memory_cap(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    _wide_cos_sin(root)
    code, err = _verify(cli, root, "--limit", "case_elements=1T")
    assert code in (1, CORRUPT), err  # a wrong result or out of memory, never a traceback
    if code == CORRUPT:
        assert "memory" in one_line(err)


# -- 2. an npz header claiming 2^40 float64 ----------------------------------------------------------------


def _npz_member_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _npy_data_offset(data: bytes) -> int:
    buf = io.BytesIO(data)
    np.lib.format.read_magic(buf)
    np.lib.format.read_array_header_1_0(buf)
    return buf.tell()


def _rezip(path: Path, edit) -> bytes:
    """The npz at ``path`` with each member's bytes passed through ``edit(name, bytes)``."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, edit(info.filename, src.read(info)))
    return out.getvalue()


def test_npz_header_claiming_2_to_the_40_elements(cli, sets, tmp_path):
    root = copy_set(sets["npz"], tmp_path / "g")
    m = read_manifest(root)
    i = case_index(m, "cos_sin")

    def huge(name, data):
        if name != "expected.cos.npy":
            return data
        return _npz_member_header((2**40,)) + data[_npy_data_offset(data) :]

    resign(root, i, _rezip(root / m["cases"][i]["file"], huge), m)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == CORRUPT, err
    assert m["cases"][i]["file"] in line and "expected.cos" in line


def test_manifest_claiming_2_to_the_40_elements_is_over_the_tensor_limit(cli, sets, tmp_path):
    root = copy_set(sets["npz"], tmp_path / "g")
    m = read_manifest(root)
    i = case_index(m, "cos_sin")
    m["cases"][i]["expected"]["cos"]["shape"] = [2**40]
    write_manifest(root, m)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == REFUSED and "tensor_bytes" in line and str(2**43) in line


# -- 3. an npz zip bomb -------------------------------------------------------------------------------------


def test_npz_zip_bomb_is_refused_without_inflating(cli, sets, tmp_path):
    root = copy_set(sets["npz"], tmp_path / "g")
    m = read_manifest(root)
    i = case_index(m, "cos_sin")
    n = 2**25  # 256 MiB of zeros deflates to about 256 KiB
    m["cases"][i]["expected"]["cos"] = {"dtype": "float64", "shape": [n]}
    src = root / m["cases"][i]["file"]
    out = io.BytesIO()
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in z.infolist():
            if info.filename != "expected.cos.npy":
                dst.writestr(info.filename, z.read(info))
                continue
            with dst.open("expected.cos.npy", "w", force_zip64=True) as fh:
                fh.write(_npz_member_header((n,)))
                chunk = bytes(2**20)
                for _ in range(n * 8 // len(chunk)):
                    fh.write(chunk)
    data = out.getvalue()
    assert len(data) < 2**21
    resign(root, i, data, m)
    start = time.monotonic()
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == REFUSED, err
    assert "npz_ratio" in line and "expected.cos.npy" in line and src.name in line
    assert time.monotonic() - start < 30


# -- 4. a sparse tensor file, 5. a sparse manifest ---------------------------------------------------------


def test_sparse_tensor_file_is_refused_from_its_size(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    victim = root / m["cases"][0]["file"]
    os.truncate(victim, 10 * 10**9)  # 10 GB, sparse: nothing is written
    start = time.monotonic()
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == CORRUPT and victim.name in line and "file size 10000000000" in line
    assert time.monotonic() - start < 20
    code, err = _run(cli, root)
    assert code == CORRUPT and victim.name in one_line(err)


def test_sparse_manifest_is_refused_from_its_size(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    os.truncate(root / "manifest.json", 1_500_000_000)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == REFUSED
    assert "manifest.json" in line and "manifest_bytes" in line and "1500000000" in line
    code, err = _run(cli, root)
    assert code == REFUSED and "manifest_bytes" in one_line(err)


# -- 6. amplification: one file listed by many cases -------------------------------------------------------


@pytest.mark.slow
def test_one_file_listed_by_many_cases_is_read_once(cli, tmp_path):
    argv = ("--ops", "cos_sin", "--positions", "0:16384")
    root = make_set(tmp_path / "g", "safetensors", "llama-3.1-8b", *argv)
    m = read_manifest(root)
    assert (root / m["cases"][0]["file"]).stat().st_size > 16 * 2**20
    first = m["cases"][0]
    m["cases"] = [dict(first, id=f"{first['id']}-{k}") for k in range(32)]  # 32 x 16 MiB if held apiece
    write_manifest(root, m)
    start = time.monotonic()
    code, err = _verify(cli, root)
    assert code == PASSED, err
    assert time.monotonic() - start < 120  # generous: the point is the 1 GiB cap
    code, err = _run(cli, root)
    assert code == PASSED, err


# -- 7. a symlinked manifest -------------------------------------------------------------------------------

_AUDIT = """
import sys
seen = []
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and "passwd" in args[0]:
        seen.append(args[0])
sys.addaudithook(hook)
from rope_ref.cli import main
code = main(sys.argv[1:])
print("OPENED", seen, file=sys.stderr) if seen else None
sys.exit(code)
"""


@pytest.mark.parametrize("target", ["other_set", "passwd"])
def test_symlinked_manifest_is_refused(sets, tmp_path, target):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    other = copy_set(sets["safetensors"], tmp_path / "other")
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(other / "manifest.json" if target == "other_set" else "/etc/passwd")
    for argv in (
        ["golden", "verify", str(root)],
        ["conformance", "run", "--backend", "numpy", "--golden", str(root)],
    ):
        proc = run_capped(*argv, code=_AUDIT)
        line = one_line(proc.stderr)
        assert proc.returncode == CORRUPT, proc.stderr
        assert "manifest.json" in line and "symlink" in line


# -- 8. duplicate keys, an empty set ---------------------------------------------------------------------


def test_duplicate_manifest_keys_are_refused(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    text = (root / "manifest.json").read_text().rstrip()
    assert text.endswith("}")
    (root / "manifest.json").write_text(text[:-1] + ',"cases":[]}')
    for code, err in (_verify(cli, root), _run(cli, root)):
        line = one_line(err)
        assert code == CORRUPT and "duplicate key 'cases'" in line and "manifest.json" in line


def test_duplicate_safetensors_header_keys_are_refused(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    path = root / m["cases"][0]["file"]
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = blob[8 : 8 + n].rstrip()
    assert header.endswith(b"}")
    key = json.loads(header)
    name = next(k for k in key if k != "__metadata__")
    extra = b',"' + name.encode() + b'":' + json.dumps(key[name]).encode()
    header = header[:-1] + extra + b"}"
    header += b" " * (-len(header) % 8)
    resign(root, 0, struct.pack("<Q", len(header)) + header + blob[8 + n :], m)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == CORRUPT and "duplicate key" in line and path.name in line


def test_zero_case_manifest_is_not_ok(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    m["cases"] = []
    m["bug_classes"] = {}
    write_manifest(root, m)
    for code, err in (_verify(cli, root), _run(cli, root)):
        assert code == CORRUPT and "no cases" in one_line(err)


# -- 9. shape overflow ---------------------------------------------------------------------------------------


def test_shape_overflow_in_a_header_names_the_file(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    i = case_index(m, "cos_sin")
    path = root / m["cases"][i]["file"]
    header = {"inputs.positions": {"dtype": "I64", "shape": [0, 2**64], "data_offsets": [0, 0]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    resign(root, i, struct.pack("<Q", len(text)) + text, m)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == CORRUPT and path.name in line and "shape" in line


def test_shape_overflow_in_the_manifest_names_it(cli, sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    i = case_index(m, "cos_sin")
    m["cases"][i]["inputs"]["positions"]["shape"] = [0, 2**64]
    write_manifest(root, m)
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == CORRUPT and "manifest.json" in line and "positions" in line and str(2**64) in line


# -- limits are the user's to raise ------------------------------------------------------------------------


def test_a_limit_can_be_raised_and_a_bad_one_is_a_usage_error(cli, sets, tmp_path):
    root = sets["safetensors"]
    code, err = _verify(cli, root, "--limit", "manifest_bytes=100")
    assert code == REFUSED and "manifest_bytes = 100 bytes" in one_line(err)
    assert _verify(cli, root, "--limit", "manifest_bytes=1G")[0] == PASSED
    code, err = _verify(cli, root, "--limit", "nonsense=1")
    assert code == REFUSED and "--limit" in one_line(err)


# -- 10. stored values that size a re-evaluation -------------------------------------------------------------


@pytest.fixture(scope="module")
def value_sets(tmp_path_factory):
    """One set per case whose stored values (or params) size what re-evaluating it allocates."""
    from rope_ref.conformance import golden

    base = tmp_path_factory.mktemp("values")
    wanted = {
        "vision": lambda c: c.op == "vision_ids" and c.params["convention"] == "qwen2-vl",
        "mrope": lambda c: c.op == "mrope_position_ids" and "video_grid_thw" in c.inputs,
        "decode": lambda c: c.op == "mrope_decode_ids",
        "varlen": lambda c: c.op == "apply_qk" and "cu_seqlens" in c.inputs and c.io_dtype == "float64",
    }
    found = {}
    for case in catalogue_cases():
        for key, match in wanted.items():
            if key not in found and match(case):
                found[key] = case
    return {
        key: golden.write_golden([case], base / key, generator="test", source="custom")
        for key, case in found.items()
    }


def _restore(root: Path, name: str, value: np.ndarray) -> str:
    """Replace stored input ``name`` of the set's one case by ``value`` (manifest and checksum updated)."""
    from rope_ref.conformance.safetensors_io import read_safetensors

    m = read_manifest(root)
    case = m["cases"][0]
    tensors = dict(read_safetensors(root / case["file"])[0])
    tensors[f"inputs.{name}"] = value
    case["inputs"][name] = {"dtype": value.dtype.name, "shape": list(value.shape)}
    resign(root, 0, safetensors_bytes(tensors), m)
    return case["id"]


@pytest.mark.parametrize(
    ("key", "name", "rows", "field"),
    [
        # 3·1·2^15·2^15 = 3·2^30 ids from a 24-byte row
        ("vision", "grids", [[1, 2, 2], [1, 2**15, 2**15]], "inputs.grids[1] = [1, 32768, 32768]"),
        # a zero entry still lays the other axes out: counted as 1, not as an empty grid
        ("vision", "grids", [[0, 2**15, 2**14]], "inputs.grids[0] = [0, 32768, 16384]"),
        (
            "mrope",
            "video_grid_thw",
            [[2**30, 1, 1], [1, 2, 2]],
            "inputs.video_grid_thw[0] = [1073741824, 1, 1]",
        ),
        ("varlen", "cu_seqlens", [0, 3, 2**31], "inputs.cu_seqlens holding 2147483648"),
    ],
)
def test_stored_values_over_the_case_limit_are_refused_naming_the_field(
    cli, value_sets, tmp_path, key, name, rows, field
):
    root = copy_set(value_sets[key], tmp_path / "g")
    case_id = _restore(root, name, np.array(rows, dtype=np.int64))
    code, err = _verify(cli, root)
    line = one_line(err)
    assert code == REFUSED, err
    assert f"case {case_id!r}" in line and field in line and "case_elements = 134217728" in line


def test_n_new_over_the_case_limit_is_refused_from_the_manifest(cli, value_sets, tmp_path):
    root = copy_set(value_sets["decode"], tmp_path / "g")
    m = read_manifest(root)
    batch = m["cases"][0]["inputs"]["deltas"]["shape"][0]
    m["cases"][0]["params"]["n_new"] = 10**9
    write_manifest(root, m)
    for code, err in (_verify(cli, root), _run(cli, root)):
        line = one_line(err)
        assert code == REFUSED, err
        assert "params.n_new = 1000000000" in line and m["cases"][0]["id"] in line
        assert f"= {3 * batch * 10**9 + _stored_elements(m['cases'][0])}" in line


def _stored_elements(entry: dict) -> int:
    return sum(
        int(np.prod(spec["shape"]))
        for role in ("inputs", "expected", "aux")
        for spec in entry.get(role, {}).values()
    )


def test_stored_values_within_a_raised_limit_reach_the_oracle(cli, value_sets, tmp_path):
    root = copy_set(value_sets["vision"], tmp_path / "g")
    _restore(root, "grids", np.array([[1, 2**11, 2**11]], dtype=np.int64))  # 3·2^22 ids: over 2^22
    code, err = _verify(cli, root, "--limit", "case_elements=4M")
    assert code == REFUSED and "case_elements = 4194304" in one_line(err)
    code, err = _verify(cli, root, "--limit", "case_elements=16M")
    assert code == CASE_FAILED, err  # the oracle runs (the stored expected ids no longer match)
