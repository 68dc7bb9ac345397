"""Writing a golden directory in process (``conformance/golden.py``): the swap's journal and order, the
files it creates, what it keeps and removes, and its helpers called directly. Cases are written by hand
(``test_golden_build._case``); every sha256 expected here is hashed from bytes read back from disk.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
from rope_ref.conformance import golden
from rope_ref.conformance.golden import GoldenWriteError, load_golden, write_golden
from test_golden_build import _case

JOURNAL, MANIFEST = ".rope-ref-golden.journal", "manifest.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(out: Path, *ids: str, **kwargs) -> Path:
    cases = [_case(i, inputs={"positions": np.arange(k + 2)}) for k, i in enumerate(ids)]
    return write_golden(cases, out, generator=f"by hand {' '.join(ids)}", source="custom", **kwargs)


def test_the_swap_journals_every_file_then_moves_the_manifest_last(tmp_path, monkeypatch):
    out = _write(tmp_path / "g", "cos_sin-a", "cos_sin-b", "cos_sin-c")
    stale_sha = _sha(out / "cos_sin-c.safetensors")
    journals, renames = [], []
    real_journal, real_rename = golden.journal_bytes, golden._rename
    monkeypatch.setattr(
        golden, "journal_bytes", lambda files: journals.append(dict(files)) or real_journal(files)
    )
    monkeypatch.setattr(
        golden, "_rename", lambda s, d, c: renames.append((s.name, d)) or real_rename(s, d, c)
    )
    _write(out, "cos_sin-b", "cos_sin-a", replace=True)
    assert renames == [
        (JOURNAL, out / JOURNAL),
        ("cos_sin-b.safetensors", out / "cos_sin-b.safetensors"),
        ("cos_sin-a.safetensors", out / "cos_sin-a.safetensors"),
        (MANIFEST, out / MANIFEST),
    ]
    assert journals == [
        {
            "cos_sin-c.safetensors": stale_sha,
            "cos_sin-a.safetensors": _sha(out / "cos_sin-a.safetensors"),
            "cos_sin-b.safetensors": _sha(out / "cos_sin-b.safetensors"),
            MANIFEST: _sha(out / MANIFEST),
        }
    ]
    assert sorted(os.listdir(out)) == ["cos_sin-a.safetensors", "cos_sin-b.safetensors", MANIFEST]
    assert [c.id for c in load_golden(out)] == ["cos_sin-b", "cos_sin-a"]


def test_a_failed_read_back_leaves_neither_staging_nor_journal(tmp_path, monkeypatch):
    out = _write(tmp_path / "g", "cos_sin-a")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def refuse(path):
        raise golden.GoldenError(f"{path}: refused by the test")

    monkeypatch.setattr(golden, "load_golden", refuse)
    with pytest.raises(golden.GoldenError, match="refused by the test"):
        _write(out, "cos_sin-b", replace=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_foreign_directory_is_refused_unless_forced_and_its_files_are_kept(tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    (out / "b-notes.txt").write_text("theirs")
    (out / "a-notes.txt").write_text("theirs too")
    with pytest.raises(GoldenWriteError, match=f"--out {out} is not empty .*holds e.g. 'a-notes.txt'"):
        _write(out, "cos_sin-a")
    assert sorted(os.listdir(out)) == ["a-notes.txt", "b-notes.txt"]
    _write(out, "cos_sin-a", force=True)
    assert (out / "a-notes.txt").read_text() == "theirs too" and (out / "b-notes.txt").read_text() == "theirs"
    _write(out, "cos_sin-b", replace=True)  # a set now: no force needed, foreign files still kept
    assert {"a-notes.txt", "b-notes.txt", "cos_sin-b.safetensors"} <= set(os.listdir(out))
    assert not (out / "cos_sin-a.safetensors").exists()


def test_a_file_in_the_way_is_refused_even_with_force(tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    (out / "cos_sin-b.safetensors").write_bytes(b"not ours")
    (out / "cos_sin-a.safetensors").write_bytes(b"not ours either")
    (out / "notes.txt").write_text("foreign, but not in the way")
    with pytest.raises(
        GoldenWriteError, match="'cos_sin-a.safetensors' exists and is not a file .*\\(2 such"
    ):
        _write(out, "cos_sin-a", "cos_sin-b", force=True)
    assert (out / "cos_sin-b.safetensors").read_bytes() == b"not ours"
    assert sorted(os.listdir(out)) == ["cos_sin-a.safetensors", "cos_sin-b.safetensors", "notes.txt"]


def test_a_merge_keeps_the_other_groups_files_byte_for_byte(tmp_path):
    out = _write(tmp_path / "g", "cos_sin-a", group="first")
    kept = (out / "cos_sin-a.safetensors").read_bytes()
    _write(out, "cos_sin-b", group="second")
    assert (out / "cos_sin-a.safetensors").read_bytes() == kept
    assert [c.id for c in load_golden(out)] == ["cos_sin-a", "cos_sin-b"]


def test_kept_bytes_reads_only_files_that_are_ours_and_unchanged(tmp_path):
    data = b"golden bytes"
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "a.npz").write_bytes(data)
    entry = {"id": "cos_sin-a", "file": "a.npz", "sha256": sha}
    assert golden._kept_bytes(tmp_path, [entry], {"a.npz": sha}) == {"a.npz": data}
    assert golden._kept_bytes(tmp_path, [], {"a.npz": sha}) == {}
    message = f"--out {tmp_path}: 'a.npz' of case 'cos_sin-a', which this run would keep, is missing or"
    for owned in ({"a.npz": "0" * 64}, {}, {"b.npz": sha}):
        with pytest.raises(GoldenWriteError, match=message):
            golden._kept_bytes(tmp_path, [entry], owned)
    (tmp_path / "a.npz").write_bytes(b"golden bytez")  # same size, changed since the set was owned
    with pytest.raises(GoldenWriteError, match=message):
        golden._kept_bytes(tmp_path, [entry], {"a.npz": sha})
    (tmp_path / "a.npz").unlink()
    with pytest.raises(GoldenWriteError, match=message):
        golden._kept_bytes(tmp_path, [entry], {"a.npz": sha})
    (tmp_path / "real.npz").write_bytes(data)
    (tmp_path / "a.npz").symlink_to(tmp_path / "real.npz")  # never followed
    with pytest.raises(GoldenWriteError, match=message):
        golden._kept_bytes(tmp_path, [entry], {"a.npz": sha})


def test_write_new_file_creates_only_a_new_regular_file(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    golden._write_new_file(tmp_path / "new", b"abc")
    st = os.lstat(tmp_path / "new")
    assert (tmp_path / "new").read_bytes() == b"abc" and stat.S_IMODE(st.st_mode) == 0o644 & ~umask
    with pytest.raises(FileExistsError):
        golden._write_new_file(tmp_path / "new", b"xyz")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        golden._write_new_file(tmp_path / "link", b"xyz")
    assert (tmp_path / "new").read_bytes() == b"abc" and not (tmp_path / "target").exists()


def test_write_all_keeps_writing_after_a_short_write(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        golden._write_all(fd, b"0123456789")
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_the_kill_hook_fires_at_its_step_only(monkeypatch):
    kills = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setenv(golden.KILL_AT_RENAME_ENV, "2")
    assert golden.KILL_AT_RENAME_ENV == "ROPE_REF_GOLDEN_KILL_AT_RENAME"
    count = [0]
    golden._step(count)
    assert count == [1] and kills == []
    golden._step(count)
    assert count == [2] and kills == [(os.getpid(), signal.SIGKILL)]
    golden._step(count)
    assert count == [3] and len(kills) == 1
    monkeypatch.delenv(golden.KILL_AT_RENAME_ENV)
    golden._step([1])
    assert len(kills) == 1


class _Killed(BaseException):
    """What the test's ``os.kill`` raises instead of killing the process."""


@pytest.mark.parametrize(
    ("step", "left"),
    [
        (1, []),  # killed before the journal is moved in: nothing changed
        (2, [JOURNAL]),
        (3, [JOURNAL, "cos_sin-a.safetensors"]),
        (4, [JOURNAL, "cos_sin-a.safetensors", "cos_sin-b.safetensors"]),
        (5, [JOURNAL, "cos_sin-a.safetensors", "cos_sin-b.safetensors", MANIFEST]),  # before the clean-up
    ],
)
def test_a_kill_at_step_k_stops_the_swap_before_its_kth_rename(tmp_path, monkeypatch, step, left):
    def kill(pid, sig):
        if sig == signal.SIGKILL:
            raise _Killed

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setenv(golden.KILL_AT_RENAME_ENV, str(step))
    out = tmp_path / "g"
    with pytest.raises(_Killed):
        _write(out, "cos_sin-a", "cos_sin-b")
    assert sorted(p.name for p in out.iterdir() if p.name != golden.LOCK_NAME) == sorted(left)


def test_write_golden_defaults_to_a_catalogue_set_in_safetensors(tmp_path):
    import json

    out = write_golden([_case("cos_sin-a")], tmp_path / "g", generator="by hand")
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["provenance"]["source"] == "catalogue" and manifest["format"] == "safetensors"
    assert sorted(os.listdir(out)) == ["cos_sin-a.safetensors", MANIFEST]


def test_the_refusal_of_a_foreign_directory_names_a_foreign_file_not_one_of_ours(tmp_path):
    """A killed first write left a journal and one case file (ours, by the journal) but no manifest; a
    foreign file beside them makes the directory foreign, and the refusal names that file."""
    out = tmp_path / "g"
    out.mkdir()
    partial = b"bytes a killed run moved in"
    (out / "cos_sin-a.safetensors").write_bytes(partial)
    sha = hashlib.sha256(partial).hexdigest()
    (out / JOURNAL).write_text(f'{{"journal_version": 1, "files": {{"cos_sin-a.safetensors": "{sha}"}}}}')
    (out / "notes.txt").write_text("theirs")
    with pytest.raises(GoldenWriteError, match=f"--out {out} is not empty .*holds e.g. 'notes.txt'\\)"):
        _write(out, "cos_sin-b")
    assert sorted(os.listdir(out)) == [JOURNAL, "cos_sin-a.safetensors", "notes.txt"]


def test_a_first_run_killed_while_staging_leaves_a_directory_the_rerun_takes_without_force(tmp_path):
    """Killed before anything moved in: --out holds only our staging directory, which is removed before
    the directory is judged, so it is not foreign and the re-run needs no --force."""
    out = tmp_path / "g"
    staging = out / ".rope-ref-staging-killed"
    staging.mkdir(parents=True)
    (staging / "cos_sin-a.safetensors").write_bytes(b"partial")
    _write(out, "cos_sin-a")
    assert sorted(n for n in os.listdir(out) if n != golden.LOCK_NAME) == ["cos_sin-a.safetensors", MANIFEST]


def test_a_killed_runs_staging_directory_is_removed_before_writing(tmp_path):
    out = _write(tmp_path / "g", "cos_sin-a")
    staging = out / ".rope-ref-staging-killed"
    staging.mkdir()
    (staging / MANIFEST).write_bytes((out / MANIFEST).read_bytes())
    (staging / "cos_sin-a.safetensors").write_bytes(b"partial")
    theirs = out / ".rope-ref-staging-theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("not a golden file")
    _write(out, "cos_sin-b", replace=True)
    assert not staging.exists() and (theirs / "notes.txt").read_text() == "not a golden file"
    theirs.joinpath("notes.txt").unlink()
    theirs.rmdir()
    assert sorted(os.listdir(out)) == ["cos_sin-b.safetensors", MANIFEST]


def test_every_option_reaches_the_manifest_on_disk(tmp_path):
    import json

    cases = [_case("cos_sin-a", bug_class="rotation")]
    out = write_golden(
        cases,
        tmp_path / "g",
        generator="by hand --npz",
        source="catalogue",
        fmt="npz",
        bug_classes={"rotation": "the rotation", "tables": "unused"},
        informational={"host": "test"},
    )
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["format"] == "npz" and [c["file"] for c in manifest["cases"]] == ["cos_sin-a.npz"]
    assert manifest["provenance"]["source"] == "catalogue"
    assert manifest["provenance"]["generator"] == "by hand --npz"
    assert manifest["provenance"]["informational"] == {"host": "test"}
    assert manifest["bug_classes"] == {"rotation": "the rotation"}
    assert sorted(os.listdir(out)) == ["cos_sin-a.npz", MANIFEST]


def test_replace_drops_the_other_groups_and_a_foreign_manifest_is_in_the_way(tmp_path):
    out = _write(tmp_path / "g", "cos_sin-a", group="first")
    _write(out, "cos_sin-b", group="second", replace=True)
    assert [c.id for c in load_golden(out)] == ["cos_sin-b"]
    assert sorted(os.listdir(out)) == ["cos_sin-b.safetensors", MANIFEST]
    other = tmp_path / "other"
    other.mkdir()
    (other / MANIFEST).write_text('{"mine": true}')
    with pytest.raises(GoldenWriteError, match="'manifest.json' exists and is not a file of a rope-ref"):
        _write(other, "cos_sin-a", force=True)
    assert (other / MANIFEST).read_text() == '{"mine": true}' and sorted(os.listdir(other)) == [MANIFEST]


def test_the_set_is_staged_inside_out_and_the_staging_directory_removed(tmp_path, monkeypatch):
    """Staging inside ``--out`` keeps every rename on one file system and lets the next run find and
    remove what a killed run left; nothing is ever made beside ``--out``."""
    staged, real_load = [], golden.load_golden
    monkeypatch.setattr(golden, "load_golden", lambda path: staged.append(path) or real_load(path))
    out = write_golden([_case("cos_sin-a")], str(tmp_path / "g"), generator="by hand", source="custom")
    assert isinstance(out, Path) and out == tmp_path / "g"
    assert len(staged) == 1 and staged[0].parent == out
    assert staged[0].name.startswith(golden.STAGING_PREFIX) and not staged[0].exists()
    assert os.listdir(tmp_path) == ["g"]


def test_a_directory_of_golden_files_without_the_staging_prefix_is_kept(tmp_path):
    out = _write(tmp_path / "g", "cos_sin-a")
    for name in ("backup", ".rope-ref-backup"):
        (out / name).mkdir()
        (out / name / MANIFEST).write_bytes((out / MANIFEST).read_bytes())
    _write(out, "cos_sin-b", replace=True)
    assert os.listdir(out / "backup") == os.listdir(out / ".rope-ref-backup") == [MANIFEST]
    assert sorted(os.listdir(out)) == [".rope-ref-backup", "backup", "cos_sin-b.safetensors", MANIFEST]


def test_a_signal_during_the_swap_is_delivered_only_once_the_set_is_whole(tmp_path, monkeypatch):
    out = _write(tmp_path / "g", "cos_sin-a")
    renames, seen, real_rename = [], [], golden._rename

    def rename(src, dst, count):
        if not renames:
            os.kill(os.getpid(), signal.SIGTERM)
        renames.append(src.name)
        real_rename(src, dst, count)

    monkeypatch.setattr(golden, "_rename", rename)
    previous = signal.signal(
        signal.SIGTERM, lambda signum, frame: seen.append((len(renames), os.listdir(out)))
    )
    try:
        _write(out, "cos_sin-b", replace=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert renames == [JOURNAL, "cos_sin-b.safetensors", MANIFEST]
    assert len(seen) == 1 and seen[0][0] == 3 and JOURNAL not in seen[0][1]
    assert "cos_sin-a.safetensors" not in seen[0][1]


def test_a_stale_file_removed_by_someone_else_during_the_swap_is_no_error(tmp_path, monkeypatch):
    out = _write(tmp_path / "g", "cos_sin-a", "cos_sin-c")
    real_rename = golden._rename

    def rename(src, dst, count):
        real_rename(src, dst, count)
        if src.name == MANIFEST:  # the old set's stale file goes before the clean-up reaches it
            (out / "cos_sin-c.safetensors").unlink()

    monkeypatch.setattr(golden, "_rename", rename)
    _write(out, "cos_sin-b", replace=True)
    assert sorted(os.listdir(out)) == ["cos_sin-b.safetensors", MANIFEST]


def test_a_directory_counts_as_foreign_and_one_named_like_a_case_file_is_in_the_way(tmp_path):
    out = tmp_path / "g"
    (out / "notes").mkdir(parents=True)
    with pytest.raises(GoldenWriteError, match=f"--out {out} is not empty .*holds e.g. 'notes'\\)"):
        _write(out, "cos_sin-a")
    (out / "cos_sin-a.safetensors").mkdir()
    with pytest.raises(GoldenWriteError, match="'cos_sin-a.safetensors' exists and is not a file of a"):
        _write(out, "cos_sin-a", force=True)
    assert sorted(os.listdir(out)) == ["cos_sin-a.safetensors", "notes"]
    assert os.listdir(out / "cos_sin-a.safetensors") == []


def test_each_step_of_the_swap_is_made_durable_in_order(tmp_path, monkeypatch):
    """docs/golden-format.md: every staged file is fsynced; the journal is moved in and the directory
    fsynced before any file; the directory is fsynced after the stale files go and after the journal goes."""
    out = _write(tmp_path / "g", "cos_sin-a")
    log: list[tuple] = []
    real_fsync, real_rename, real_fsync_dir = os.fsync, golden._rename, golden.fsync_dir

    def listing() -> tuple[str, ...]:
        skip = (golden.LOCK_NAME, golden.STAGING_PREFIX)
        return tuple(sorted(n for n in os.listdir(out) if not n.startswith(skip)))

    def fsync(fd):
        log.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(
        golden, "_rename", lambda s, d, c: log.append(("rename", s.name)) or real_rename(s, d, c)
    )
    monkeypatch.setattr(golden, "fsync_dir", lambda p: log.append((str(p), listing())) or real_fsync_dir(p))
    _write(out, "cos_sin-b", replace=True)
    new = "cos_sin-b.safetensors"
    assert log == [
        ("fsync", new),
        ("fsync", MANIFEST),
        ("fsync", JOURNAL),
        ("rename", JOURNAL),
        (str(out), (JOURNAL, "cos_sin-a.safetensors", MANIFEST)),
        ("fsync", "g"),
        ("rename", new),
        ("rename", MANIFEST),
        (str(out), (JOURNAL, new, MANIFEST)),
        ("fsync", "g"),
        (str(out), (new, MANIFEST)),
        ("fsync", "g"),
    ]
