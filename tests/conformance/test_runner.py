"""Robustness of the conformance runner and its command line.

A backend that raises, hangs, returns the wrong shape or dtype, returns NaN, or changes its input
without declaring in-place gets a recorded failure and the run goes on; unsupported cases are never
passes; xfails need reasons and stale ones are warned about; a corrupted golden directory fails before
anything runs. Cases are built in memory here (expected values from the oracle: these tests check the
runner, not the oracle).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import numpy as np
import pytest
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner, load_xfails

import rope_ref
from rope_ref.cli import main

TESTS = Path(__file__).resolve().parents[1]


def _shipped_cases():
    from shipped_golden import shipped_cases

    return shipped_cases()


def apply_case(cid: str, positions=(0, 1, 5, 300), head_dim: int = 16) -> Case:
    rng = np.random.default_rng(zlib.crc32(cid.encode()))  # stable across PYTHONHASHSEED, unlike hash()
    x = rng.standard_normal((len(positions), head_dim))
    pos = np.asarray(positions, dtype=np.float64)
    cfg = {"head_dim": head_dim, "layout": "half", "base": 10000.0}
    case = Case(
        cid, "apply", cfg, {"x": x, "positions": pos}, {}, "layout", "rotation", {"seq_len": None}, "float64"
    )
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


CASES = [apply_case("apply-a"), apply_case("apply-b"), apply_case("apply-c")]


class Raises(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        if self.calls.append(1) or len(self.calls) == 1:
            raise RuntimeError("kernel launch failed")
        return super().apply(x, positions, cfg, seq_len)

    def __init__(self):
        self.calls = []


class Hangs(OracleBackend):
    """Blocks its first ``apply`` until released; each instance has its own event (no shared state)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def apply(self, x, positions, cfg, seq_len=None):
        if not hasattr(self, "hung"):
            self.hung = True
            self.release.wait(20)
        return super().apply(x, positions, cfg, seq_len)


class WrongShape(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len)[..., :-1]


class WrongDtype(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len).astype(np.float32)


class ReturnsNaN(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        out[0, 3] = np.nan
        return out


class Mutates(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        x[...] = out
        return x


class MutatesDeclared(Mutates):
    inplace = True


class Unsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError("no apply on this device")


def run(backend, cases=CASES, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 10.0), spec="test").run(cases, **kw)


def statuses(report):
    return [(r.case_id, r.status, r.kind) for r in report.results]


def test_oracle_passes_in_order():
    report = run(OracleBackend())
    assert statuses(report) == [(c.id, "passed", "") for c in CASES]
    assert report.ok


def test_exception_is_recorded_and_the_run_goes_on():
    report = run(Raises())
    assert statuses(report)[0] == ("apply-a", "failed", "exception")
    assert "kernel launch failed" in report.results[0].message
    assert [r.status for r in report.results[1:]] == ["passed", "passed"]
    assert not report.ok


def test_hang_past_timeout_is_recorded_and_the_run_goes_on():
    backend = Hangs()
    try:
        report = run(backend, timeout=0.5)
    finally:
        backend.release.set()
    assert statuses(report)[0] == ("apply-a", "failed", "timeout")
    assert [r.status for r in report.results[1:]] == ["passed", "passed"]


@pytest.mark.parametrize(
    ("backend", "kind"),
    [(WrongShape(), "shape"), (WrongDtype(), "dtype"), (ReturnsNaN(), "non-finite"), (Mutates(), "mutation")],
)
def test_bad_outputs_fail_each_case(backend, kind):
    report = run(backend)
    assert [r.status for r in report.results] == ["failed"] * 3
    assert {r.kind for r in report.results} == {kind}


def test_nan_failure_names_the_element():
    worst = run(ReturnsNaN()).results[0].worst
    assert worst.index == (0, 3) and np.isnan(worst.got)


def test_declared_inplace_may_overwrite_its_input():
    assert run(MutatesDeclared()).ok


def test_mutating_the_numpy_array_handed_over_is_caught():
    class SharesMemory(Mutates):
        def from_numpy(self, array, dtype=None):
            return array  # no copy: the backend writes into the runner's array

    assert {r.kind for r in run(SharesMemory()).results} == {"mutation"}


def test_unsupported_is_counted_apart_and_never_a_pass():
    report = run(Unsupported())
    counts = report.counts()
    assert counts["unsupported"] == 3 and counts["passed"] == 0
    assert report.ok  # unsupported is not a failure ...
    assert "unsupported" in report.summary_table()  # ... but it is reported


def test_case_for_another_io_dtype_is_skipped():
    case = apply_case("apply-fp32")
    case.io_dtype = "float32"
    assert run(OracleBackend(), [case]).results[0].status == "skipped"


def test_xfails_need_reasons_and_stale_entries_warn(tmp_path):
    path = tmp_path / "xfails.txt"
    path.write_text("# comment\napply-a  known bug #12\napply-b  fixed long ago\napply-zz  no such case\n")
    xfails = load_xfails(path)
    report = run(Raises(), xfails=xfails)
    assert statuses(report)[:2] == [("apply-a", "xfailed", "exception"), ("apply-b", "xpassed", "")]
    assert report.ok
    assert any("apply-b" in w for w in report.warnings)
    assert any("apply-zz" in w and "matches no" in w for w in report.warnings)
    path.write_text("apply-a\n")
    with pytest.raises(ValueError, match="needs a reason"):
        load_xfails(path)
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"apply-*": "glob entry"}))
    assert load_xfails(path) == {"apply-*": "glob entry"}


def test_select_regex_and_bad_regex():
    assert [r.case_id for r in run(OracleBackend(), select="-b$").results] == ["apply-b"]
    with pytest.raises(ValueError, match="regular expression"):
        run(OracleBackend(), select="(")


def test_reports_json_and_junit(tmp_path):
    report = run(ReturnsNaN())
    report.write_json(tmp_path / "r.json")
    report.write_junit_xml(tmp_path / "r.xml")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["counts"]["failed"] == 3 and data["cases"][0]["worst"]["index"] == [0, 3]
    root = ET.parse(tmp_path / "r.xml").getroot()
    assert root.get("failures") == "3" and len(root.findall("testcase")) == 3
    assert root.find("testcase/failure") is not None


# -- the command line, on the shipped golden set -----------------------------------------------------------


@pytest.fixture
def broken_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    sys.modules.pop("broken_backends", None)


def test_cli_oracle_passes(capsys):
    assert main(["conformance", "run", "--backend", "numpy", "-q"]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "operation" in out and "bug class" in out


def test_cli_failure_details_reproducer_and_reports(capsys, tmp_path, broken_on_path):
    spec = "broken_backends:FlippedDirection"
    code = main(
        [
            "conformance",
            "run",
            "--backend",
            spec,
            "--json-report",
            str(tmp_path / "r.json"),
            "--junit-xml",
            str(tmp_path / "r.xml"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert (
        "FAILED apply-" in captured.out and "error/tolerance" in captured.out and "reproduce:" in captured.out
    )
    assert "%]" in captured.err  # progress
    data = json.loads((tmp_path / "r.json").read_text())
    failed = [c for c in data["cases"] if c["status"] == "failed"]
    assert failed and all("reproducer" in c for c in failed)
    # The one-line reproducer runs exactly that case, and it fails again.
    argv = shlex.split(failed[0]["reproducer"])
    assert argv[:3] == ["rope-ref", "conformance", "run"]
    assert main(argv[1:] + ["--json-report", str(tmp_path / "one.json")]) == 1
    one = json.loads((tmp_path / "one.json").read_text())
    assert [c["id"] for c in one["cases"]] == [failed[0]["id"]]
    capsys.readouterr()


def test_cli_no_match_and_unknown_backend(capsys):
    assert main(["conformance", "run", "--backend", "numpy", "-k", "^nothing-matches$"]) == 2
    assert main(["conformance", "run", "--backend", "no-such-backend"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def _golden_copy(tmp_path) -> Path:
    from rope_ref.conformance.golden import shipped_dir

    dst = tmp_path / "golden"
    shutil.copytree(shipped_dir(), dst)
    return dst


def _tensor_file(golden: Path) -> Path:
    return sorted(golden.glob("apply-*.safetensors"))[0]


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "schema", "escape"])
def test_cli_corrupted_golden_fails_before_running_naming_the_file(tmp_path, capsys, damage):
    golden = _golden_copy(tmp_path)
    manifest = golden / "manifest.json"
    target = _tensor_file(golden)
    if damage == "flip_byte":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0x01
        target.write_bytes(bytes(data))
        expect = target.name
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-16])
        expect = target.name
    elif damage == "schema":
        m = json.loads(manifest.read_text())
        m["cases"][0]["tolerance"] = "approximately"
        manifest.write_text(json.dumps(m))
        expect = "manifest.json"
    else:
        m = json.loads(manifest.read_text())
        m["cases"][0]["file"] = "../outside.safetensors"
        manifest.write_text(json.dumps(m))
        expect = "manifest.json"
    code = main(["conformance", "run", "--backend", "numpy", "--golden", str(golden)])
    captured = capsys.readouterr()
    assert code == 3  # a corrupt golden set: exit status 3 since issue 28 (was 2)
    assert expect in captured.err
    assert "operation" not in captured.out  # no summary: nothing ran


# -- the documented example backend ------------------------------------------------------------------------

EXAMPLES = TESTS.parent / "docs" / "examples"


def test_documented_example_backend_runs_and_passes(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLES))])
    sys.modules.pop("minimal_backend", None)
    report = tmp_path / "r.json"
    code = main(
        [
            "conformance",
            "run",
            "--backend",
            "minimal_backend:MinimalBackend",
            "--precision",
            "fp32",
            "--json-report",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    counts = json.loads(report.read_text())["counts"]
    assert counts["failed"] == 0 and counts["passed"] > 50
    assert "PASSED" in out


def test_example_is_quoted_verbatim_in_the_guide():
    guide = (TESTS.parent / "docs" / "writing-a-backend.md").read_text()
    assert (EXAMPLES / "minimal_backend.py").read_text() in guide


# -- order-dependent cases: prerequisites run first under -k -----------------------------------------------


def test_select_includes_prerequisites_in_manifest_order():
    from rope_ref.conformance.runner import select_cases

    a, b, c = (apply_case(f"apply-{n}") for n in "xyz")
    c.requires = ["apply-y"]
    b.requires = ["apply-x"]
    assert [k.id for k in select_cases([a, b, c], "^apply-z$")] == ["apply-x", "apply-y", "apply-z"]
    assert [k.id for k in select_cases([a, b, c], "-x$")] == ["apply-x"]
    c.requires = ["apply-missing"]
    with pytest.raises(ValueError, match="apply-missing"):
        select_cases([a, b, c], "-z$")


@pytest.mark.slow  # runs the written reproducer in a child: `pytest --full`
def test_dynamic_ntk_leak_reproducer_reproduces(capsys, tmp_path, broken_on_path):
    """The printed one-line reproducer of the state-leak failure fails again on its own."""
    spec = "broken_backends:DynamicNTKLeak"
    target = "apply-dynamic_short_after_long_d64-fp32"
    assert (
        main(["conformance", "run", "--backend", spec, "-q", "--json-report", str(tmp_path / "all.json")])
        == 1
    )
    full = {c["id"]: c for c in json.loads((tmp_path / "all.json").read_text())["cases"]}
    assert full[target]["status"] == "failed"
    argv = shlex.split(full[target]["reproducer"])
    assert argv[-2:] == ["-k", f"^{target}$"]
    assert main(argv[1:] + ["-q", "--json-report", str(tmp_path / "one.json")]) == 1
    one = json.loads((tmp_path / "one.json").read_text())["cases"]
    # The long case it requires ran first, on the same instance, and the short case failed again.
    assert [(c["id"], c["status"]) for c in one] == [
        ("apply-dynamic_long_d64-fp32", "passed"),
        (target, "failed"),
    ]
    capsys.readouterr()
    main(["conformance", "run", "--backend", "numpy", "--list", "-k", f"^{target}$"])
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == ["apply-dynamic_long_d64-fp32", target]
    assert "runs after apply-dynamic_long_d64-fp32" in listed[1]


# -- a backend that holds the GIL past the timeout ----------------------------------------------------------


class HoldsGIL(OracleBackend):
    """Busy-loops in Python with a huge switch interval: the runner's thread cannot run until it returns."""

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        if not hasattr(self, "done"):
            self.done = True
            old = sys.getswitchinterval()
            sys.setswitchinterval(60.0)
            try:
                end = time.perf_counter() + 0.6
                while time.perf_counter() < end:
                    pass
            finally:
                sys.setswitchinterval(old)
        return out


def test_late_return_while_holding_the_gil_is_a_timeout():
    report = run(HoldsGIL(), timeout=0.2)
    first = report.results[0]
    assert (first.status, first.kind) == ("failed", "timeout")
    # Which message appears depends on a race the runner cannot control: after the busy loop restores the
    # switch interval, the main thread may see the worker still alive (plain timeout) or already finished
    # (late return, "held the GIL"). Either way it must be a timeout, never a pass.
    assert first.duration > 0.2
    assert "held the GIL" in first.message or "did not return within" in first.message
    assert [r.status for r in report.results[1:]] == ["passed", "passed"]


class _JoinIgnoresTimeout(threading.Thread):
    """What a GIL-holding backend does to the runner: join(timeout) cannot return before the call ends."""

    def join(self, timeout=None):
        super().join()


class SleepsPastTimeout(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        if not hasattr(self, "done"):
            self.done = True
            time.sleep(0.3)
        return super().apply(x, positions, cfg, seq_len)


def test_late_return_branch_names_the_gil(monkeypatch):
    import rope_ref.conformance.runner as runner_module

    monkeypatch.setattr(runner_module.threading, "Thread", _JoinIgnoresTimeout)
    first = run(SleepsPastTimeout(), timeout=0.2).results[0]
    assert (first.status, first.kind) == ("failed", "timeout")
    assert first.duration > 0.2 and "held the GIL" in first.message


# -- backend discovery through the 'rope_ref.backends' entry-point group ----------------------------------


def test_entry_point_backend_is_discovered(tmp_path, monkeypatch):
    """A fake installed distribution (a .dist-info on sys.path) registers a backend by name."""
    from rope_ref.conformance.registry import ENTRY_POINT_GROUP, get_backend

    (tmp_path / "ep_backend_pkg.py").write_text(
        "from rope_ref.conformance.oracle_backend import OracleBackend\n"
        "class EPBackend(OracleBackend):\n"
        "    name = 'entry-point-oracle'\n"
        "def factory(precision=None):\n"
        "    b = EPBackend()\n"
        "    b.asked = precision\n"
        "    return b\n"
    )
    dist = tmp_path / "rope_ref_fake_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rope-ref-fake-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nfake-ep = ep_backend_pkg:EPBackend\nfake-factory = ep_backend_pkg:factory\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ep_backend_pkg", raising=False)
    backend = get_backend("fake-ep")
    assert type(backend).__name__ == "EPBackend" and backend.name == "entry-point-oracle"
    assert get_backend("fake-factory", "fp64").asked == "fp64"
    assert Runner(backend).run(CASES).ok
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("fake-ep-not-registered")


# -- the suite under pytest (`pytest --pyargs rope_ref.conformance`) ---------------------------------------


def _pytest(args, cwd):
    # -P: like the `pytest` script, do not put the current directory on sys.path (`python -m` would).
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "pytest",
        "--pyargs",
        "rope_ref.conformance",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.run(cmd + args, cwd=cwd, capture_output=True, text=True, timeout=300)


def _summary(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_pytest_mode_numpy(tmp_path):
    proc = _pytest(["--rope-backend", "numpy"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    n = sum(c.io_dtype in (None, "float64") for c in _shipped_cases())
    assert f"{n} passed" in _summary(proc) and "error" not in _summary(proc)


@pytest.mark.slow
def test_pytest_mode_documented_minimal_backend_command():
    """The command of docs/writing-a-backend.md, run from the example's directory, passes."""
    proc = _pytest(["--rope-backend", "minimal_backend:MinimalBackend", "--rope-precision", "fp32"], EXAMPLES)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert " passed" in _summary(proc) and "error" not in _summary(proc)


def test_pytest_mode_bad_backend_is_one_usage_error(tmp_path):
    proc = _pytest(["--rope-backend", "no_such_module:Backend"], tmp_path)
    assert proc.returncode == 4  # pytest's usage-error exit code, before any test runs
    assert "no_such_module" in proc.stderr and "passed" not in proc.stdout and "error" not in proc.stdout
    assert proc.stderr.count("ERROR") == 1


@pytest.mark.slow
def test_pytest_mode_prerequisites_run_under_k(tmp_path):
    """`-k` on the short dynamic-NTK case still runs its long prerequisite first, so the leak is caught."""
    (tmp_path / "leaky.py").write_text((TESTS / "broken_backends.py").read_text())
    target = "apply-dynamic_short_after_long_d64-fp32"
    proc = _pytest(["--rope-backend", "leaky:DynamicNTKLeak", "-k", target], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "FAILED " in proc.stdout and target in proc.stdout and "1 failed" in _summary(proc)
    fixed = _pytest(["--rope-backend", "leaky:Float32Backend", "-k", target], tmp_path)
    assert fixed.returncode == 0 and "1 passed" in _summary(fixed)
