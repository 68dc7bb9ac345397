"""`rope-ref golden generate` never loses data: ownership, symlinks, atomicity, locking, full/read-only disks.

Reproducers from issue 17: a foreign ``manifest.json`` made generate delete the files it listed; symlinks
were followed; Ctrl-C or a concurrent run left a set that failed ``verify``; ``--ops apply,apply`` was
refused only after files were written. Sets are small custom ones (``--preset``) to keep this fast.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _signals import interruptible
from rope_ref.conformance import golden

from rope_ref.cli import main

OLD = "llama-2-7b"  # the "previous" set in a directory
NEW = "llama-3.1-8b"  # what the run under test writes
LOCK = ".rope-ref-golden.lock"


def _gen(out, preset=NEW, *extra):
    return main(["golden", "generate", "--preset", preset, "--out", str(out), *extra])


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every entry of ``root`` (recursively), symlinks as their target text, files as their bytes."""
    snap = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            snap[rel] = b"->" + os.readlink(p).encode()
        elif p.is_file():
            snap[rel] = p.read_bytes()
        else:
            snap[rel] = b"<dir>"
    return snap


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Reference sets for OLD and NEW generated into their own fresh directories."""
    base = tmp_path_factory.mktemp("refs")
    out = {}
    for name in (OLD, NEW):
        assert _gen(base / name, name) == 0
        out[name] = _snapshot(base / name)
    return out


def _is_set(root: Path, ref: dict[str, bytes]) -> bool:
    """``root`` holds exactly the files of ``ref`` (nothing left over), and they load with checksums."""
    golden.load_golden(root)
    return _snapshot(root) == ref


# -- reproducer 1: files that are not ours ----------------------------------------------------------------


def test_foreign_manifest_never_deletes_listed_files(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "model.safetensors").write_text("precious\n")
    (d / "data.npz").write_text("precious\n")
    (d / "manifest.json").write_text('{"cases":[{"file":"model.safetensors"},{"file":"data.npz"}]}\n')
    before = _snapshot(d)
    capsys.readouterr()
    assert main(["golden", "generate", "--out", str(d)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "not a rope-ref golden set" in line and "--force" in line
    assert _snapshot(d) == before
    # --force adds files only where nothing of someone else's is in the way: manifest.json is.
    assert main(["golden", "generate", "--out", str(d), "--force"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "manifest.json" in line
    assert _snapshot(d) == before


def test_file_with_a_case_name_is_never_overwritten(tmp_path, capsys, refs):
    d = tmp_path / "d"
    d.mkdir()
    victim = next(n for n in refs[NEW] if n != "manifest.json")
    (d / victim).write_bytes(b"someone else's file")
    before = _snapshot(d)
    for extra in ([], ["--force"]):
        capsys.readouterr()
        assert _gen(d, NEW, *extra) == 2
        assert victim in _one_line_error(capsys.readouterr().err)
        assert _snapshot(d) == before


def test_force_keeps_foreign_files(tmp_path, refs):
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    assert _gen(d, NEW) == 2
    assert _gen(d, NEW, "--force") == 0
    snap = _snapshot(d)
    assert snap.pop("notes.txt") == b"mine"
    assert snap == refs[NEW]
    golden.load_golden(d)
    # Now a golden set: a later run needs no --force and still keeps notes.txt.
    assert _gen(d, OLD) == 0
    assert (d / "notes.txt").read_text() == "mine"


def test_regenerate_replaces_own_set_and_removes_only_verified_stale_files(tmp_path, refs):
    # --replace: replacing another model's set is explicit since issue 28 (without it the sets merge).
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    assert _is_set(d, refs[OLD])
    assert _gen(d, NEW, "--replace") == 0
    assert _is_set(d, refs[NEW])  # every OLD-only file is gone, nothing extra remains
    # A listed file the user changed (its sha256 no longer matches) is not ours to delete.
    assert _gen(d, OLD, "--replace") == 0
    edited = next(n for n in refs[OLD] if n not in refs[NEW])
    (d / edited).write_bytes(b"edited by hand")
    assert _gen(d, NEW, "--replace") == 0
    assert (d / edited).read_bytes() == b"edited by hand"


def test_nothing_written_outside_the_target(tmp_path):
    (tmp_path / "sibling.txt").write_text("x")
    before = {p.name for p in tmp_path.iterdir()}
    assert _gen(tmp_path / "out", NEW) == 0
    assert {p.name for p in tmp_path.iterdir()} == before | {"out"}
    assert (tmp_path / "sibling.txt").read_text() == "x"
    assert not (tmp_path / "out" / LOCK).exists()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


# -- reproducer 2: symlinks -----------------------------------------------------------------------------


def test_symlinked_case_file_is_not_followed(tmp_path, capsys, refs):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"outside")
    d = tmp_path / "d"
    assert _gen(d, NEW) == 0
    name = next(n for n in refs[NEW] if n != "manifest.json")
    (d / name).unlink()
    (d / name).symlink_to(outside)
    before = _snapshot(d)
    for extra in ([], ["--force"]):
        capsys.readouterr()
        assert _gen(d, NEW, *extra) == 2
        assert name in _one_line_error(capsys.readouterr().err)
        assert outside.read_bytes() == b"outside"
        assert _snapshot(d) == before


def test_symlinked_manifest_is_not_followed(tmp_path, capsys, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    outside = tmp_path / "outside.json"
    outside.write_bytes((d / "manifest.json").read_bytes())  # even a valid manifest of ours
    (d / "manifest.json").unlink()
    (d / "manifest.json").symlink_to(outside)
    before, outside_before = _snapshot(d), outside.read_bytes()
    for extra in ([], ["--force"]):
        capsys.readouterr()
        assert _gen(d, NEW, *extra) == 2
        _one_line_error(capsys.readouterr().err)
        assert _snapshot(d) == before
        assert outside.read_bytes() == outside_before


def test_symlinked_target_and_lock_are_refused(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _gen(link, NEW) == 2
    assert "symlink" in _one_line_error(capsys.readouterr().err)
    assert list(real.iterdir()) == []
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    elsewhere = tmp_path / "elsewhere.lock"
    (d / LOCK).symlink_to(elsewhere)
    capsys.readouterr()
    assert _gen(d, NEW) == 2
    assert "symlink" in _one_line_error(capsys.readouterr().err)
    assert not elsewhere.exists()


# -- reproducer 3: arguments validated before the first byte -------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--ops", "apply,apply"],
        ["--ops", "apply,nope"],
        ["--shape", "1,8,2"],
        ["--shape", "1000,1000,1000,128"],
        ["--shape", "0,8,2,128"],
        ["--positions", "0:3"],  # S=3 does not match --shape's S=8
        ["--dtype", "fp8"],
    ],
)
def test_bad_arguments_write_nothing(tmp_path, capsys, extra):
    out = tmp_path / "out"
    argv = ["golden", "generate", "--preset", NEW, "--out", str(out), *extra]
    if extra[0] == "--positions":
        argv += ["--shape", "1,8,2,128"]
    assert main(argv) == 2
    _one_line_error(capsys.readouterr().err)
    assert not out.exists()


def test_duplicate_ops_named_in_the_error(tmp_path, capsys):
    assert _gen(tmp_path / "o", NEW, "--ops", "apply,apply") == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "--ops" in line and "'apply'" in line


def test_huge_shape_reports_the_size(tmp_path, capsys):
    assert _gen(tmp_path / "o", NEW, "--shape", "1000,1000,1000,128") == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "--shape" in line and "GiB" in line and "953.7" in line


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"fmt": "hdf5"}, ValueError, "fmt must be one of ['npz', 'safetensors'], got 'hdf5'"),
        ({"source": "zoo"}, ValueError, "source must be 'catalogue' or 'custom', got 'zoo'"),
        ({"generator": 7}, TypeError, "generator must be a str, got int"),
    ],
)
def test_write_golden_names_a_bad_argument_before_building_anything(
    tmp_path, monkeypatch, kwargs, exc, message
):
    """``write_golden``'s own checks, called directly: the error names the argument (not a schema
    violation of the manifest built from it), and no case is serialised and no directory made."""
    from test_golden_build import _case

    out = tmp_path / "out"
    args = {"generator": "by hand", **kwargs}
    monkeypatch.setattr(golden, "build_set", lambda *a: pytest.fail(f"build_set called with {a[1:4]}"))
    with pytest.raises(exc) as info:
        golden.write_golden([_case("cos_sin-a")], out, **args)
    assert str(info.value) == message
    assert not out.exists()


# -- interruption and failure: the previous set stays intact -------------------------------------------

_DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from rope_ref.conformance import golden
    from rope_ref.cli import main

    point, k = sys.argv[1], int(sys.argv[2])
    count = [0]

    def fire():
        count[0] += 1
        if count[0] == k:
            os.kill(os.getpid(), signal.SIGINT)

    def hook(owner, name):
        orig = getattr(owner, name)
        def hooked(*args, **kwargs):
            fire()
            return orig(*args, **kwargs)
        setattr(owner, name, hooked)

    {"write": lambda: hook(golden, "_write_new_file"), "verify": lambda: hook(golden, "load_golden"),
     "swap": lambda: hook(os, "replace")}.get(point, lambda: None)()
    sys.exit(main(sys.argv[3:]))
    """
)


def _driver(tmp_path, point, k, out, preset=NEW):
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    argv = ["golden", "generate", "--preset", preset, "--out", str(out), "--replace"]
    return subprocess.run(
        [sys.executable, str(script), point, str(k), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=interruptible,
    )


@pytest.mark.parametrize(
    ("point", "k", "finished"),
    [
        ("write", 1, False),  # first staged file
        ("write", 3, False),  # mid-way
        ("write", 6, False),  # the staged manifest (5 case files + manifest)
        ("verify", 1, False),  # reading the staged set back
        ("swap", 1, True),  # first rename: the swap completes, then the signal is delivered
        ("swap", 4, True),
    ],
)
@pytest.mark.slow
def test_sigint_leaves_a_whole_set(tmp_path, refs, point, k, finished):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    proc = _driver(tmp_path, point, k, d)
    assert proc.returncode == 130, proc.stderr
    assert "interrupted" in _one_line_error(proc.stderr)
    assert _is_set(d, refs[NEW] if finished else refs[OLD])
    assert main(["golden", "verify", str(d)]) == 0


@pytest.mark.slow
def test_sigint_at_random_times_real_signal(tmp_path, refs):
    """A real Ctrl-C at several delays while the full catalogue is written over an older set."""
    full = tmp_path / "full"
    assert main(["golden", "generate", "--out", str(full)]) == 0
    full_ref = _snapshot(full)
    code = (
        "import sys; from rope_ref.cli import main; import rope_ref.conformance.catalogue; "
        "print('ready', file=sys.stderr, flush=True); sys.exit(main(sys.argv[1:]))"
    )
    for delay in (0.05, 0.2, 0.4, 0.7):
        d = tmp_path / f"d{delay}"
        assert _gen(d, OLD) == 0
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "golden", "generate", "--out", str(d), "--replace"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=interruptible,
        )
        assert proc.stderr.readline() == "ready\n"  # imports done: main() handles the signal from here
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130), err
        assert "Traceback" not in err
        snap = _snapshot(d)
        assert snap in (refs[OLD], full_ref), f"delay {delay}: a mixed set"
        golden.load_golden(d)


def test_full_disk_leaves_previous_set(tmp_path, capsys, monkeypatch, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    calls = [0]
    real = golden._write_all

    def full(fd, data):
        calls[0] += 1
        if calls[0] >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(golden, "_write_all", full)
    capsys.readouterr()
    assert _gen(d, NEW) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "No space left on device" in line
    assert _is_set(d, refs[OLD])


def test_read_only_target_leaves_previous_set(tmp_path, capsys, monkeypatch, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(d))

    monkeypatch.setattr(golden.tempfile, "mkdtemp", read_only)
    capsys.readouterr()
    assert _gen(d, NEW) == 2
    assert "Read-only file system" in _one_line_error(capsys.readouterr().err)
    assert _is_set(d, refs[OLD])


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_target_directory(tmp_path, capsys, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    d.chmod(0o555)
    try:
        assert _gen(d, NEW) == 2
        _one_line_error(capsys.readouterr().err)
    finally:
        d.chmod(0o755)
    assert _is_set(d, refs[OLD])


def test_leftover_staging_directory_is_cleaned(tmp_path, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    stale = d / (golden.STAGING_PREFIX + "killed")
    stale.mkdir()
    (stale / "half-written.safetensors").write_bytes(b"x")
    assert _gen(d, NEW, "--replace") == 0
    assert _is_set(d, refs[NEW])


# -- concurrency --------------------------------------------------------------------------------------


def test_second_run_is_refused_while_the_lock_is_held(tmp_path, capsys, refs):
    d = tmp_path / "d"
    assert _gen(d, OLD) == 0
    fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        capsys.readouterr()
        assert _gen(d, NEW) == 2
        line = _one_line_error(capsys.readouterr().err)
        assert "another" in line and "nothing was changed" in line
    finally:
        os.close(fd)
    os.unlink(d / LOCK)
    assert _is_set(d, refs[OLD])


@pytest.mark.slow
def test_two_concurrent_runs(tmp_path):
    """Two full-catalogue runs (safetensors and npz, so their files differ) into one directory at once:
    each ends whole or is refused, and the directory holds exactly one whole set."""
    code = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"
    formats = ("safetensors", "npz")
    expected = {}
    for fmt in formats:
        ref_dir = tmp_path / f"ref-{fmt}"
        assert main(["golden", "generate", "--format", fmt, "--out", str(ref_dir)]) == 0
        expected[fmt] = _snapshot(ref_dir)
    for trial in range(2):
        d = tmp_path / f"d{trial}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, "golden", "generate", "--format", fmt, "--replace", "--out"]
                + [str(d)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for fmt in formats
        ]
        results = [(*p.communicate(timeout=120), p.returncode) for p in procs]
        assert any(rc == 0 for _, _, rc in results), results
        winners = []
        for (_, err, rc), fmt in zip(results, formats, strict=True):
            if rc == 0:
                winners.append(fmt)
            else:
                assert rc == 2 and "another" in _one_line_error(err), (rc, err)
        snap = _snapshot(d)
        assert snap in [expected[f] for f in winners], f"trial {trial}: not one whole set"
        golden.load_golden(d)


def test_generated_manifest_hashes_match_files(tmp_path):
    d = tmp_path / "d"
    assert _gen(d, NEW, "--format", "npz") == 0
    _, manifest = golden.read_manifest(d)
    for case in manifest["cases"]:
        assert hashlib.sha256((d / case["file"]).read_bytes()).hexdigest() == case["sha256"]
