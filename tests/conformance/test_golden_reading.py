"""Reading a golden directory as untrusted input (``conformance/golden_reading.py``), at the helpers:
what the plan refuses before any tensor file is read, and what reading a file refuses.
"""

from __future__ import annotations

import copy
import io
import os
import re
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


def test_a_case_config_is_its_own_nested_dict_not_the_manifest_entry(root):
    """Changing a case's config, a scaling's nested dict included, changes neither the manifest entry it
    was read from nor a later read of it."""
    from rope_ref.conformance.golden_reading import _case

    headers = open_golden(root)
    entry = copy.deepcopy(headers.plan.manifest["cases"][0])
    entry["config"]["scaling"] = {"rope_type": "linear", "factor": 4.0}
    stored = copy.deepcopy(entry["config"])
    case = _case(entry, {"inputs": {}, "expected": {}, "aux": {}})
    case.config["scaling"]["factor"] = 123.0
    case.config["base"] = 1.5
    assert entry["config"] == stored
    header = headers[0]
    header.config["base"] = 2.5
    assert next(headers.stream([header])).config == read_manifest(root)["cases"][0]["config"]


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


# -- the helpers, called directly -----------------------------------------------------------------

_WHY = "listed by case 'x'"


def test_check_regular_names_each_kind_of_file_it_refuses(tmp_path):
    from rope_ref.conformance.golden_reading import _check_regular

    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to_file").symlink_to(tmp_path / "file")
    (tmp_path / "to_dir").symlink_to(tmp_path / "dir")
    (tmp_path / "to_fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert _check_regular(tmp_path / "file", _WHY).st_size == 5
    refused = {
        "nowhere": "missing",
        "dir": "is a directory, not a regular file",
        "fifo": r"is a FIFO \(named pipe\), not a regular file",
        "to_file": "is a symlink; a golden set's files must be regular files",
        "to_dir": "is a directory, not a regular file",
        "to_fifo": r"is a FIFO \(named pipe\), not a regular file",
        "dangling": "a dangling symlink",
        "file/below": r"cannot be read \(Not a directory;",
    }
    for name, message in refused.items():
        with pytest.raises(GoldenError, match=f"^{re.escape(str(tmp_path / name))}: {message}.*{_WHY}\\)$"):
            _check_regular(tmp_path / name, _WHY)


def test_check_regular_names_a_socket_and_a_character_device(tmp_path):
    import socket

    from rope_ref.conformance.golden_reading import _check_regular

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(GoldenError, match="is a socket, not a regular file"):
            _check_regular(tmp_path / "s", _WHY)
    with pytest.raises(GoldenError, match="/dev/null: is a character device, not a regular file"):
        _check_regular(Path("/dev/null"), _WHY)
    (tmp_path / "null").symlink_to("/dev/null")
    with pytest.raises(GoldenError, match="null: is a character device, not a regular file"):
        _check_regular(tmp_path / "null", _WHY)


def test_read_bounded_reads_and_hashes_a_file_of_several_chunks(tmp_path):
    import hashlib

    from rope_ref.conformance.golden_reading import read_bounded

    data = np.random.default_rng(7).bytes(2 * 2**20 + 3)  # three reads of at most 1 MiB
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    got = read_bounded(path, len(data), sha)
    assert isinstance(got, bytearray) and bytes(got) == data
    assert bytes(read_bounded(path, len(data))) == data  # no sha256: not checked
    wrong = "0" * 64
    with pytest.raises(
        GoldenError, match=f"big.bin: checksum mismatch \\(sha256 {sha}, manifest says {wrong}\\)"
    ):
        read_bounded(path, len(data), wrong)
    with pytest.raises(GoldenError, match="big.bin: changed while being read"):
        read_bounded(path, len(data) - 1, sha)
    with pytest.raises(GoldenError, match="missing.bin: cannot be opened"):
        read_bounded(tmp_path / "missing.bin", 3)
    (tmp_path / "link.bin").symlink_to(path)
    with pytest.raises(GoldenError, match="link.bin: cannot be opened"):
        read_bounded(tmp_path / "link.bin", len(data))


def test_read_manifest_refuses_a_missing_directory_and_defaults_to_the_shipped_set(tmp_path):
    from rope_ref.conformance.golden_reading import shipped_dir

    with pytest.raises(GoldenError, match=f"{tmp_path / 'none'}: not a golden directory"):
        read_golden_manifest(tmp_path / "none")
    (tmp_path / "f").write_text("{}")
    with pytest.raises(GoldenError, match="not a golden directory"):
        read_golden_manifest(tmp_path / "f")
    with pytest.raises(GoldenError, match=f"{tmp_path / 'manifest.json'}: missing"):
        read_golden_manifest(tmp_path)
    root, manifest = read_golden_manifest()
    assert root == shipped_dir() and (root / "manifest.json").is_file()
    assert manifest["provenance"]["source"] == "catalogue"


def test_read_manifest_names_the_manifest_in_a_parse_or_schema_error(root):
    mpath = root / "manifest.json"
    mpath.write_bytes(b'{"cases": [], "cases": []}')
    with pytest.raises(GoldenError, match=f"^{mpath}: not valid UTF-8 JSON .*duplicate key"):
        read_golden_manifest(root)
    mpath.write_text("{}")
    with pytest.raises(GoldenError, match=f"^{mpath}: schema violation at /"):
        read_golden_manifest(root)


def test_safe_file_lets_a_link_inside_the_set_or_one_that_does_not_resolve_through(tmp_path):
    """``_safe_file`` refuses only a link that resolves outside; the regular-file check refuses the rest."""
    from rope_ref.conformance.golden_reading import _safe_file

    mpath = tmp_path / "manifest.json"
    (tmp_path / "a.npz").write_bytes(b"x")
    (tmp_path / "b.npz").symlink_to(tmp_path / "a.npz")
    (tmp_path / "c.npz").symlink_to(tmp_path / "nowhere.npz")
    (tmp_path / "d.npz").symlink_to(tmp_path / "d.npz")  # a loop
    for name in ("a.npz", "b.npz", "c.npz", "d.npz"):
        assert _safe_file(tmp_path, name, mpath) == tmp_path / name
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.npz").write_bytes(b"x")
    (tmp_path / "f.npz").symlink_to(tmp_path / "sub" / "e.npz")
    with pytest.raises(
        GoldenError, match=f"f.npz: escapes the golden directory \\(resolves to {tmp_path}/sub"
    ):
        _safe_file(tmp_path, "f.npz", mpath)


def test_max_file_size_counts_every_role_by_its_itemsize():
    """inputs int64[3] (24 bytes) + expected float32[2, 5] (40) + aux float16[4] (8) = 72 bytes of data in 3
    tensors: a safetensors file may add 8 + header_bytes; an npz 4096 + 2 * len(file) per member and 4096."""
    from rope_ref.conformance.golden_reading import _max_file_size

    case = {
        "file": "ab.npz",
        "inputs": {"p": {"dtype": "int64", "shape": [3]}},
        "expected": {"c": {"dtype": "float32", "shape": [2, 5]}},
        "aux": {"w": {"dtype": "float16", "shape": [4]}},
    }
    limits = replace(DEFAULT_LIMITS, header_bytes=100)
    assert _max_file_size(case, "safetensors", limits) == 8 + 100 + 72
    assert _max_file_size(case, "npz", limits) == 72 + 3 * (4096 + 12) + 4096
    del case["aux"]
    assert _max_file_size(case, "safetensors", limits) == 8 + 100 + 64
    assert _max_file_size(case, "npz", limits) == 64 + 2 * (4096 + 12) + 4096


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "int64": 8, "int32": 4}


def test_a_file_of_exactly_the_size_its_tensors_and_header_allow_is_planned(root):
    m = read_manifest(root)
    entry = m["cases"][0]
    size = (root / entry["file"]).stat().st_size
    data = sum(
        _ITEMSIZE[s["dtype"]] * int(np.prod(s["shape"]))
        for role in ("inputs", "expected", "aux")
        for s in entry.get(role, {}).values()
    )
    header = size - 8 - data
    plan = plan_golden(root, replace(DEFAULT_LIMITS, header_bytes=header))
    assert plan.sizes[root / entry["file"]] == size
    with pytest.raises(GoldenError, match=f"allow {size - 1} \\(corrupt or hostile\\)"):
        plan_golden(root, replace(DEFAULT_LIMITS, header_bytes=header - 1))


def test_the_plan_counts_a_file_once_per_run_of_cases_that_list_it(root):
    m = read_manifest(root)
    first = m["cases"][0]
    m["cases"].append(dict(first, id="again"))  # the first file, listed again after the others
    write_manifest(root, m)
    files = [root / c["file"] for c in m["cases"]]
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values()) + sizes[files[0]]
    limits = replace(DEFAULT_LIMITS, run_bytes=total)
    plan = plan_golden(root, limits)
    assert plan.paths == files and plan.sizes == sizes and plan.limits is limits and plan.root == root
    with pytest.raises(GoldenLimitError, match=f"bytes of tensor files a run reads = {total} bytes"):
        plan_golden(root, replace(DEFAULT_LIMITS, run_bytes=total - 1))
    m["cases"].insert(1, m["cases"].pop())  # now consecutive: read once
    write_manifest(root, m)
    assert plan_golden(root, replace(DEFAULT_LIMITS, run_bytes=total - sizes[files[0]])).sizes == sizes


def test_read_tensors_turns_a_size_limit_into_a_limit_error_naming_it(sets):
    from rope_ref.conformance.golden_reading import _NPZ_OVERHEAD, _read_tensors

    entry = read_manifest(sets["safetensors"])["cases"][0]
    path = sets["safetensors"] / entry["file"]
    data = path.read_bytes()
    (n,) = np.frombuffer(data[:8], dtype="<u8")
    assert _read_tensors(path, data, "safetensors", replace(DEFAULT_LIMITS, header_bytes=int(n)))
    with pytest.raises(
        GoldenLimitError, match=f"limit header_bytes = {n - 1}; raise it with --limit header_bytes"
    ):
        _read_tensors(path, data, "safetensors", replace(DEFAULT_LIMITS, header_bytes=int(n) - 1))
    with pytest.raises(GoldenError, match=f"{path}: truncated") as info:
        _read_tensors(path, data[:5], "safetensors", DEFAULT_LIMITS)
    assert not isinstance(info.value, GoldenLimitError)

    npz = sets["npz"] / read_manifest(sets["npz"])["cases"][0]["file"]
    with zipfile.ZipFile(npz) as zf:
        biggest = max(i.file_size for i in zf.infolist())
    blob = npz.read_bytes()
    assert _read_tensors(npz, blob, "npz", replace(DEFAULT_LIMITS, tensor_bytes=biggest - _NPZ_OVERHEAD))
    over = replace(DEFAULT_LIMITS, tensor_bytes=biggest - _NPZ_OVERHEAD - 1)
    with pytest.raises(GoldenLimitError, match=f"limit tensor_bytes = {over.tensor_bytes}; raise it"):
        _read_tensors(npz, blob, "npz", over)
    with pytest.raises(GoldenError, match="not a readable pickle-free npz"):
        _read_tensors(npz, blob[:40], "npz", DEFAULT_LIMITS)
    assert _NPZ_OVERHEAD == 4096


def test_every_field_of_a_case_is_read_from_its_own_key(tmp_path):
    """Each field gets a value no other field has, so a field read from another key shows."""
    case = _case(
        "cos_sin-fields",
        config={"head_dim": 10, "layout": "interleaved", "rotary_dim": 6, "base": 500.0, "scaling": None},
        bug_class="rotation",
        tolerance="trig",
        params={"seq_len": 9},
        io_dtype="float32",
        description="fields by hand",
        inputs={"positions": np.array([5, 1], dtype=np.int32)},
        expected={"cos": np.full((2, 6), 0.5, dtype=np.float32), "sin": np.zeros((2, 6), dtype=np.float16)},
        aux={"inv_freq": np.array([1.0, 0.25, 0.0625])},
    )
    later = _case("cos_sin-later", requires=["cos_sin-fields"])
    classes = {"rotation": "the rotation", "tables": "the tables"}
    root = write_golden([case, later], tmp_path / "g", generator="t", source="custom", bug_classes=classes)
    got, got_later = load_golden(root)
    assert (got.id, got.op, got.bug_class, got.tolerance) == ("cos_sin-fields", "cos_sin", "rotation", "trig")
    assert (got.io_dtype, got.description, got.requires) == ("float32", "fields by hand", [])
    assert got.config == case.config and got.params == {"seq_len": 9}
    assert got_later.requires == ["cos_sin-fields"] and got_later.io_dtype is None
    headers = open_golden(root)
    headers[1].requires.append("cos_sin-edited")  # a header's list is its own, not the manifest's
    assert next(headers.stream([headers[1]])).requires == ["cos_sin-fields"]
    for group, want in ((got.inputs, case.inputs), (got.expected, case.expected), (got.aux, case.aux)):
        assert group.keys() == want.keys()
        for name, arr in want.items():
            assert group[name].dtype == arr.dtype and np.array_equal(group[name], arr)


def test_streaming_releases_each_case_and_keeps_only_the_chosen(sets):
    from rope_ref.conformance.golden import iter_golden

    plan = plan_golden(sets["safetensors"])
    ids = [c["id"] for c in plan.manifest["cases"]]
    seen = []
    for case in iter_golden(plan, {ids[2], ids[0]}):
        assert case.expected and case.inputs is not None
        seen.append(case)
    assert [c.id for c in seen] == [ids[0], ids[2]]  # manifest order, not the order asked
    assert all(not c.inputs and not c.expected and not c.aux for c in seen)
    assert [c.id for c in iter_golden(plan)] == ids
    assert list(iter_golden(plan, set())) == [] and list(open_golden(sets["npz"]).stream([])) == []
    kept = load_golden(sets["safetensors"])
    assert [c.id for c in kept] == ids and all(c.expected for c in kept)


def test_golden_cases_are_headers_and_stream_only_cases_of_the_set(sets):
    headers = open_golden(sets["npz"])
    ids = [c["id"] for c in read_manifest(sets["npz"])["cases"]]
    assert len(headers) == 3 and [h.id for h in headers[:]] == ids and headers[-1].id == ids[2]
    assert all(not h.inputs and not h.expected and not h.aux for h in headers)
    groups = [g for h in headers for g in (h.inputs, h.expected, h.aux)]
    assert len({id(g) for g in groups}) == 3 * len(headers)  # each header's groups are its own
    headers[0].inputs["scratch"] = np.zeros(1)
    assert not headers[0].expected and not headers[0].aux and not headers[1].inputs and not headers[2].aux
    del headers[0].inputs["scratch"]
    streamed = list(headers.stream([headers[2], headers[1]]))
    assert [c.id for c in streamed] == ids[1:]
    headers[1].requires.append("edited")
    headers[1].params["seq_len"] = 99
    again = next(headers.stream([headers[1]]))
    assert again.requires == [] and again.params == read_manifest(sets["npz"])["cases"][1]["params"]
    stranger = _case("cos_sin-stranger")
    with pytest.raises(
        ValueError, match=f"case 'cos_sin-stranger' is not a case of the golden set {sets['npz']}"
    ):
        headers.stream([headers[0], stranger])


@pytest.mark.parametrize("reader", [plan_golden, open_golden, load_golden], ids=lambda f: f.__name__)
def test_each_reader_applies_the_limits_it_is_given(root, reader):
    size = (root / "manifest.json").stat().st_size
    reader(root, replace(DEFAULT_LIMITS, manifest_bytes=size))
    with pytest.raises(GoldenLimitError, match=f"manifest.json: file size = {size} bytes"):
        reader(root, replace(DEFAULT_LIMITS, manifest_bytes=size - 1))


def test_consecutive_cases_of_one_file_are_read_from_one_read(root, monkeypatch):
    from rope_ref.conformance import golden_reading

    m = read_manifest(root)
    m["cases"].insert(1, dict(m["cases"][0], id="again", description="the first file again"))
    write_manifest(root, m)
    reads = []
    real = golden_reading.read_bounded
    monkeypatch.setattr(golden_reading, "read_bounded", lambda p, *a: reads.append(p.name) or real(p, *a))
    first, again, *_ = load_golden(root)
    assert reads == ["manifest.json", m["cases"][0]["file"], m["cases"][2]["file"], m["cases"][3]["file"]]
    assert again.id == "again" and again.description == "the first file again"
    assert again.expected.keys() == first.expected.keys()
    assert all(np.array_equal(again.expected[k], first.expected[k]) for k in first.expected)


def test_a_file_changed_in_place_fails_its_checksum_when_read(root):
    m = read_manifest(root)
    path = root / m["cases"][1]["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # same size, one bit of a tensor
    path.write_bytes(bytes(data))
    plan = plan_golden(root)
    with pytest.raises(
        GoldenError, match=f"{path}: checksum mismatch .*manifest says {m['cases'][1]['sha256']}"
    ):
        load_golden(root)
    assert plan.sizes[path] == len(data)


def test_a_tensor_file_linked_to_another_file_of_the_set_is_refused_by_the_plan(root):
    m = read_manifest(root)
    first, second = (root / m["cases"][i]["file"] for i in (0, 1))
    second.unlink()
    second.symlink_to(first)
    with pytest.raises(
        GoldenError, match=f"{second}: is a symlink; .*listed by case {m['cases'][1]['id']!r}"
    ):
        plan_golden(root)
