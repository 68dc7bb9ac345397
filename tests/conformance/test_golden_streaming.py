"""``conformance run`` and ``golden verify`` read a golden set case by case.

A file is read when its case runs (once for a run of consecutive cases that list it) and released before
the next file is read, so memory is bounded by one case's file, not by the set; the report is the one a
run over the fully loaded set gives; a file found corrupt or over a limit when its case is reached stops
the run with the documented status and a one-line error naming it (``docs/golden-format.md``).
"""

from __future__ import annotations

import io
import weakref
import zipfile
from pathlib import Path

import numpy as np
import pytest
import test_golden_reading_limits
from _hostile_sets import (
    CORRUPT,
    PASSED,
    REFUSED,
    copy_set,
    one_line,
    read_manifest,
    resign,
    write_manifest,
)
from rope_ref.conformance import golden_reading
from rope_ref.conformance.golden import GoldenCases, iter_golden, load_golden, open_golden, plan_golden
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner

from rope_ref.cli import main


class _ReadSpy:
    """Wraps ``golden_reading._read_tensors``: records each file read, and how many tensors of files read
    before it are still alive when it is read (weak references: alive means held by someone)."""

    def __init__(self, monkeypatch) -> None:
        self.files: list[str] = []
        self.alive_at_read: list[int] = []
        self._refs: list[weakref.ref] = []
        real = golden_reading._read_tensors

        def spy(path, data, fmt, limits):
            self.alive_at_read.append(sum(ref() is not None for ref in self._refs))
            tensors = real(path, data, fmt, limits)
            self.files.append(Path(path).name)
            self._refs += [weakref.ref(arr) for arr in tensors.values()]
            return tensors

        monkeypatch.setattr(golden_reading, "_read_tensors", spy)


sets = test_golden_reading_limits.sets  # the fixture: a --preset set per format


def _run(root: Path, *extra: str) -> int:
    return main(["conformance", "run", "--backend", "numpy", "-q", "--golden", str(root), *extra])


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_run_holds_one_case_file_at_a_time(sets, monkeypatch, capsys, fmt):
    spy = _ReadSpy(monkeypatch)
    assert _run(sets[fmt]) == PASSED, capsys.readouterr().err
    files = [c["file"] for c in read_manifest(sets[fmt])["cases"]]
    assert spy.files == files  # each file once, in manifest order
    assert spy.alive_at_read == [0] * len(files)  # nothing of an earlier case is held any more


def test_verify_holds_one_case_file_at_a_time(sets, monkeypatch, capsys):
    spy = _ReadSpy(monkeypatch)
    assert main(["golden", "verify", str(sets["safetensors"])]) == PASSED, capsys.readouterr().err
    assert spy.alive_at_read == [0] * len(read_manifest(sets["safetensors"])["cases"])


def test_a_file_listed_by_consecutive_cases_is_read_once_then_released(sets, tmp_path, monkeypatch, capsys):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    first, second = m["cases"][0], m["cases"][1]
    # file A by three consecutive cases, then B, then A again: A is read twice, never held with B
    m["cases"] = [
        first,
        dict(first, id="again-1"),
        dict(first, id="again-2"),
        second,
        dict(first, id="later"),
    ]
    write_manifest(root, m)
    spy = _ReadSpy(monkeypatch)
    assert _run(root) == PASSED, capsys.readouterr().err
    assert spy.files == [first["file"], second["file"], first["file"]]
    assert spy.alive_at_read == [0, 0, 0]


def test_run_bytes_counts_every_read_of_a_file(sets, tmp_path, capsys):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    first, second = m["cases"][2], m["cases"][3]
    a, b = ((root / c["file"]).stat().st_size for c in (first, second))
    assert a != b
    m["cases"] = [first, second, dict(first, id="later")]
    write_manifest(root, m)
    # read: a + b + a (hand count), more than the two distinct files a + b
    assert _run(root, "--limit", f"run_bytes={2 * a + b}") == PASSED, capsys.readouterr().err
    capsys.readouterr()
    assert _run(root, "--limit", f"run_bytes={2 * a + b - 1}") == REFUSED
    line = one_line(capsys.readouterr().err)
    assert "run_bytes" in line and f"= {2 * a + b} bytes" in line and str(root) in line


def test_selected_run_reads_only_the_selected_files(sets, monkeypatch, capsys):
    root = sets["safetensors"]
    cases = read_manifest(root)["cases"]
    spy = _ReadSpy(monkeypatch)
    assert _run(root, "-k", "^(cos_sin|apply_vjp)-") == PASSED, capsys.readouterr().err
    wanted = [c["file"] for c in cases if c["op"] in ("cos_sin", "apply_vjp")]
    assert len(wanted) == 2 and spy.files == wanted


def test_list_reads_no_tensor_file(sets, monkeypatch, capsys):
    spy = _ReadSpy(monkeypatch)
    assert _run(sets["npz"], "--list") == PASSED
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids == [c["id"] for c in read_manifest(sets["npz"])["cases"]]
    assert spy.files == []


def _tamper_expected(root: Path, index: int) -> str:
    """Re-sign case ``index`` with its first expected value moved by 1e-3: a backend must fail it."""
    from rope_ref.conformance.safetensors_io import read_safetensors, safetensors_bytes

    m = read_manifest(root)
    path = root / m["cases"][index]["file"]
    tensors = dict(read_safetensors(path)[0])
    key = next(k for k in tensors if k.startswith("expected."))
    arr = np.array(tensors[key], copy=True)
    arr.flat[0] += 1e-3
    tensors[key] = arr
    resign(root, index, safetensors_bytes(tensors), m)
    return m["cases"][index]["id"]


def _summary(report) -> list[tuple]:
    return [(r.case_id, r.status, r.kind, r.message, r.diagnosis) for r in report.results]


def test_streamed_run_reports_what_a_loaded_run_reports(sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    failing = _tamper_expected(root, 2)
    streamed = Runner(OracleBackend(), spec="numpy").run(open_golden(root))
    loaded = Runner(OracleBackend(), spec="numpy").run(load_golden(root))
    assert _summary(streamed) == _summary(loaded)
    # the float64 oracle: float32 cases skipped, the tampered case failed, every other case passed
    expected = [
        (c["id"], "skipped" if c["io_dtype"] == "float32" else "failed" if c["id"] == failing else "passed")
        for c in read_manifest(root)["cases"]
    ]
    assert [(r.case_id, r.status) for r in streamed.results] == expected
    assert "failed" in dict(expected).values() and "skipped" in dict(expected).values()


@pytest.mark.parametrize("quiet", [True, False])
def test_corrupt_file_of_a_late_case_stops_the_run_naming_it(sets, tmp_path, monkeypatch, capsys, quiet):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    victim = root / m["cases"][-1]["file"]
    blob = bytearray(victim.read_bytes())
    blob[-1] ^= 0xFF  # not re-signed: a checksum mismatch
    victim.write_bytes(bytes(blob))
    spy = _ReadSpy(monkeypatch)
    argv = ["conformance", "run", "--backend", "numpy", "--golden", str(root)]
    assert main(argv + (["-q"] if quiet else [])) == CORRUPT
    err = capsys.readouterr().err
    line = err.splitlines()[-1]
    assert line.startswith("rope-ref conformance: error: ") and victim.name in line and "checksum" in line
    assert "Traceback" not in err
    if quiet:
        assert one_line(err) == line
    else:  # the progress of the cases that ran, then the error on a line of its own
        ran = "".join("s" if c["io_dtype"] == "float32" else "." for c in m["cases"][:-1])  # fp64 oracle
        assert err.splitlines()[0] == ran
    assert spy.files == [c["file"] for c in m["cases"][:-1]]  # the earlier cases ran


def test_late_file_over_a_limit_stops_the_run_with_status_2(sets, tmp_path, capsys):
    root = copy_set(sets["npz"], tmp_path / "g")
    m = read_manifest(root)
    index = len(m["cases"]) - 1
    src = root / m["cases"][index]["file"]
    out = io.BytesIO()
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in z.infolist():
            dst.writestr(info.filename, z.read(info))  # deflated: about 2x on random float32 data
    resign(root, index, out.getvalue(), m)
    assert _run(root) == PASSED, capsys.readouterr().err
    capsys.readouterr()
    assert _run(root, "--limit", "npz_ratio=1") == REFUSED
    line = one_line(capsys.readouterr().err)
    assert "npz_ratio = 1" in line and src.name in line


def test_iter_golden_releases_a_case_when_the_next_is_asked_for(sets):
    plan = plan_golden(sets["safetensors"])
    stream = iter_golden(plan)
    first = next(stream)
    assert first.inputs == {} and set(first.expected) == {"out"}  # inv_freq: no input, one output
    second = next(stream)
    assert first.expected == {} and first.aux == {}
    assert second.id == plan.manifest["cases"][1]["id"] and second.expected
    kept = load_golden(sets["safetensors"])
    assert all(c.expected for c in kept)  # load_golden keeps every case's tensors


def test_iter_golden_reads_only_the_given_ids_in_manifest_order(sets):
    plan = plan_golden(sets["safetensors"])
    ids = [c["id"] for c in plan.manifest["cases"]]
    got = [c.id for c in iter_golden(plan, {ids[3], ids[1]})]
    assert got == [ids[1], ids[3]]


def test_golden_cases_are_headers_until_streamed(sets):
    cases = open_golden(sets["safetensors"])
    assert isinstance(cases, GoldenCases)
    m = read_manifest(sets["safetensors"])
    assert len(cases) == len(m["cases"]) == 5
    assert [c.id for c in cases] == [c["id"] for c in m["cases"]]
    assert [c.io_dtype for c in cases[3:]] == ["float32", "float32"]
    assert all(c.inputs == {} and c.expected == {} and c.aux == {} for c in cases)
    loaded = [(c.id, sorted(c.inputs), sorted(c.expected)) for c in cases.stream([cases[4], cases[2]])]
    assert loaded == [
        (m["cases"][2]["id"], ["positions"], ["cos", "sin"]),
        (m["cases"][4]["id"], ["grad_out", "positions", "x"], ["out"]),
    ]
    assert all(c.inputs == {} for c in cases)  # the headers stay headers


def test_golden_cases_refuse_a_case_of_another_set(sets):
    cases = open_golden(sets["safetensors"])
    other = load_golden(sets["npz"])[0]
    stranger = type(other)(**{**other.__dict__, "id": "not-in-this-set"})
    with pytest.raises(ValueError, match="'not-in-this-set' is not a case of the golden set"):
        cases.stream([cases[0], stranger])


def test_a_corrupt_file_is_found_only_when_its_case_is_reached(sets, tmp_path):
    root = copy_set(sets["safetensors"], tmp_path / "g")
    m = read_manifest(root)
    (root / m["cases"][-1]["file"]).write_bytes(b"\0" * 16)
    cases = open_golden(root)  # the plan checks sizes, not content
    stream = cases.stream(cases)
    assert [next(stream).id for _ in range(len(cases) - 1)] == [c["id"] for c in m["cases"][:-1]]
    with pytest.raises(golden_reading.GoldenError, match="checksum mismatch"):
        next(stream)
