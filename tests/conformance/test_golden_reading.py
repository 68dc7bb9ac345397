"""Reading a golden directory as untrusted input (``conformance/golden_reading.py``), at the helpers:
what the plan refuses before any tensor file is read, and what reading a file refuses.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _hostile_sets import copy_set, read_manifest, resign, write_manifest
from rope_ref.conformance.golden import (
    DEFAULT_LIMITS,
    GoldenError,
    GoldenLimitError,
    load_golden,
    open_golden,
    plan_golden,
    write_golden,
)
from rope_ref.conformance.golden import (
    read_manifest as read_golden_manifest,
)
from rope_ref.conformance.safetensors_io import read_safetensors, safetensors_bytes
from test_golden_build import _case


def _cases():
    """Three hand-written cases (values do not matter to reading)."""
    table = _case("inv_freq-c", op="inv_freq", inputs={}, expected={"out": np.full(4, 0.25)}, aux={})
    return [_case("cos_sin-a"), _case("cos_sin-b", inputs={"positions": np.arange(3)}), table]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    base = tmp_path_factory.mktemp("reading")
    cases = _cases()
    assert len(cases) == 3
    return {
        fmt: write_golden(cases, base / fmt, generator="test", source="custom", fmt=fmt)
        for fmt in ("safetensors", "npz")
    }


@pytest.fixture()
def root(sets, tmp_path):
    return copy_set(sets["safetensors"], tmp_path / "g")


def test_a_symlinked_manifest_is_refused_even_to_a_valid_one(sets, root):
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(sets["safetensors"] / "manifest.json")
    with pytest.raises(GoldenError, match="manifest.json: is a symlink"):
        read_golden_manifest(root)


def test_a_manifest_of_exactly_manifest_bytes_is_read(root):
    size = (root / "manifest.json").stat().st_size
    read_golden_manifest(root, replace(DEFAULT_LIMITS, manifest_bytes=size))
    with pytest.raises(GoldenLimitError, match=f"file size = {size} bytes is over the limit manifest_bytes"):
        read_golden_manifest(root, replace(DEFAULT_LIMITS, manifest_bytes=size - 1))


def test_a_set_of_no_cases_is_refused(root):
    m = read_manifest(root)
    m["cases"], m["bug_classes"] = [], {}
    write_manifest(root, m)
    with pytest.raises(GoldenError, match="lists no cases"):
        plan_golden(root)


def test_cases_sharing_a_file_must_agree_on_its_sha256(root):
    m = read_manifest(root)
    m["cases"].append(dict(m["cases"][0], id="shared", sha256="0" * 64))
    write_manifest(root, m)
    with pytest.raises(GoldenError, match="cases list it with different sha256 values \\(case 'shared'\\)"):
        plan_golden(root)


def test_a_file_of_the_other_format_is_refused_by_the_plan(sets, root):
    m = read_manifest(root)
    other = read_manifest(sets["npz"])["cases"][0]
    (root / other["file"]).write_bytes((sets["npz"] / other["file"]).read_bytes())
    m["cases"][0].update(file=other["file"], sha256=other["sha256"])
    write_manifest(root, m)
    with pytest.raises(GoldenError, match="the manifest's format is 'safetensors' but the file is .npz"):
        plan_golden(root)


def test_a_file_larger_than_its_tensors_and_header_allow_is_refused_unread(root):
    m = read_manifest(root)
    path = root / m["cases"][0]["file"]
    size = path.stat().st_size
    with pytest.raises(GoldenError, match=f"file size {size} bytes, but the tensors case") as info:
        plan_golden(root, replace(DEFAULT_LIMITS, header_bytes=16))
    assert not isinstance(info.value, GoldenLimitError) and path.name in str(info.value)


def _rewrite_cos_sin_file(root, edit) -> tuple[dict, dict]:
    """Re-sign the first cos_sin case's file with ``edit`` applied to its tensors (the manifest entry kept
    as it was): ``(manifest entry, tensors written)``."""
    m = read_manifest(root)
    i = next(k for k, c in enumerate(m["cases"]) if c["op"] == "cos_sin")
    tensors = dict(read_safetensors(root / m["cases"][i]["file"])[0])
    edit(tensors)
    resign(root, i, safetensors_bytes(tensors), m)
    return m["cases"][i], tensors


@pytest.mark.parametrize("wrong", ["float32", "int64"])
def test_a_tensor_of_another_dtype_than_the_manifest_says_is_refused(root, wrong):
    def edit(t):
        t["expected.cos"] = t["expected.cos"].astype(wrong)  # same shape, re-signed

    entry, tensors = _rewrite_cos_sin_file(root, edit)
    shape = entry["expected"]["cos"]["shape"]
    with pytest.raises(
        GoldenError, match=rf"tensor expected.cos is {wrong}\[.*\], the manifest says float64"
    ):
        load_golden(root)
    assert list(tensors["expected.cos"].shape) == shape


def test_a_tensor_of_another_shape_than_the_manifest_says_is_refused(root):
    """cos stored transposed: the same dtype and byte count as the manifest's (3, 8), another shape."""

    def edit(t):
        t["expected.cos"] = np.ascontiguousarray(t["expected.cos"].T)

    entry, tensors = _rewrite_cos_sin_file(root, edit)
    assert entry["expected"]["cos"]["shape"] == [3, 8] and tensors["expected.cos"].shape == (8, 3)
    with pytest.raises(
        GoldenError, match=r"tensor expected.cos is float64\[8, 3\], the manifest says float64\[3, 8\]"
    ):
        load_golden(root)


def test_a_file_holding_a_tensor_the_manifest_does_not_list_is_refused(root):
    def edit(t):
        t["expected.extra"] = np.zeros(2)

    entry, tensors = _rewrite_cos_sin_file(root, edit)
    assert "extra" not in entry["expected"] and "expected.extra" in tensors
    with pytest.raises(GoldenError, match=r"holds tensors \[.*'expected.extra'.*\], the manifest lists \["):
        load_golden(root)


def test_a_case_params_is_its_own_dict_not_the_manifest_entry(root):
    """Changing one case's params (header or streamed) changes neither the plan nor a later read."""
    headers = open_golden(root)
    header = headers[0]
    header.params["seq_len"] = 77
    assert headers.plan.manifest["cases"][0]["params"] == {"seq_len": None}
    streamed = next(headers.stream([header]))
    assert streamed.params == {"seq_len": None}
    streamed.params["seq_len"] = 55
    assert next(headers.stream([header])).params == {"seq_len": None}
    assert header.params == {"seq_len": 77}


def test_a_nan_in_a_file_is_read_as_stored(root):
    """Reading does not judge values (``verify`` does); a NaN comes back as the NaN stored."""
    m = read_manifest(root)
    i = next(k for k, c in enumerate(m["cases"]) if c["op"] == "cos_sin")
    tensors = dict(read_safetensors(root / m["cases"][i]["file"])[0])
    tensors["expected.sin"] = tensors["expected.sin"].copy()
    tensors["expected.sin"][1, 2] = np.nan
    resign(root, i, safetensors_bytes(tensors), m)
    case = next(c for c in load_golden(root) if c.op == "cos_sin")
    assert np.isnan(case.expected["sin"][1, 2]) and np.isnan(case.expected["sin"]).sum() == 1


def test_an_npz_member_over_the_ratio_limit_is_a_limit_not_corruption(sets, tmp_path):
    root = copy_set(sets["npz"], tmp_path / "g")
    m = read_manifest(root)
    src = root / m["cases"][0]["file"]
    out = io.BytesIO()
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in z.infolist():
            dst.writestr(info.filename, z.read(info))
    resign(root, 0, out.getvalue(), m)
    load_golden(root)
    with pytest.raises(GoldenLimitError, match="npz_ratio = 1; raise it with --limit npz_ratio=N"):
        load_golden(root, replace(DEFAULT_LIMITS, npz_ratio=1))


def test_a_file_changed_after_the_plan_is_refused(root):
    plan = plan_golden(root)
    path = plan.paths[0]
    with open(path, "ab") as fh:
        fh.write(b"\0" * 8)
    from rope_ref.conformance.golden import iter_golden

    with pytest.raises(GoldenError, match="changed while being read"):
        next(iter_golden(plan))
    assert os.path.getsize(path) == plan.sizes[path] + 8


def test_a_symlinked_tensor_file_escaping_the_set_is_refused(root, tmp_path):
    m = read_manifest(root)
    path = root / m["cases"][0]["file"]
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    with pytest.raises(GoldenError, match="escapes the golden directory"):
        plan_golden(root)
    assert Path(os.readlink(path)) == outside


@pytest.mark.parametrize(
    "name",
    [".hidden.safetensors", "notes.txt", "-a.npz", "a.npz.bak", "a b.npz", "..", "a/b.npz", "a\\b.npz"],
)
def test_safe_file_refuses_a_name_outside_the_case_file_pattern(tmp_path, name):
    """``_safe_file`` called directly (``validate_manifest`` applies the same pattern first): only
    ``<letter or digit>[letters, digits, '_', '.', '-']*.safetensors|.npz`` names a case file."""
    from rope_ref.conformance.golden_reading import _safe_file

    mpath = tmp_path / "manifest.json"
    with pytest.raises(GoldenError, match="is not allowed"):
        _safe_file(tmp_path, name, mpath)
    assert _safe_file(tmp_path, "cos_sin-a.1.npz", mpath) == tmp_path / "cos_sin-a.1.npz"


def test_read_bounded_refuses_a_file_longer_than_its_stat_size():
    """A file that holds more than ``lstat`` said (one that grew, or a procfs file reporting size 0) is
    refused, not silently cut to the stated size."""
    from rope_ref.conformance.golden import GoldenError
    from rope_ref.conformance.golden_reading import read_bounded

    path = Path("/proc/self/status")
    if not path.exists() or os.stat(path).st_size != 0:
        pytest.skip("needs a procfs file whose stat size (0) understates its contents")
    with pytest.raises(GoldenError, match="changed size while being read"):
        read_bounded(path, 0)
