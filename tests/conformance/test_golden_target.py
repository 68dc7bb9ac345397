"""The target directory of ``golden generate`` (``conformance/golden_target.py``), at the helpers: what
is ours (listed with its exact sha256 by a valid manifest or the journal), the journal's contents, leftover
staging directories, and signals held during the swap.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading

import pytest
from rope_ref.conformance.golden import write_golden
from rope_ref.conformance.golden_target import (
    JOURNAL_NAME,
    LOCK_NAME,
    is_our_staging,
    owned_files,
    read_journal,
    signals_deferred,
)
from test_golden_build import _case

SHA = "ab" * 32


def test_read_journal_keeps_only_golden_names_with_a_sha256(tmp_path):
    files = {
        "manifest.json": SHA,
        "cos_sin-a.safetensors": SHA,
        "apply-b.npz": "cd" * 32,
        "../escape.safetensors": SHA,
        LOCK_NAME: SHA,
        "notes.txt": SHA,
        "short-sha.safetensors": "ab" * 31,
        "upper-sha.safetensors": SHA.upper(),
        "number-sha.safetensors": 7,
    }
    (tmp_path / JOURNAL_NAME).write_text(json.dumps({"journal_version": 1, "files": files}))
    assert read_journal(tmp_path) == {
        "manifest.json": SHA,
        "cos_sin-a.safetensors": SHA,
        "apply-b.npz": "cd" * 32,
    }


@pytest.mark.parametrize("text", ["not json", '{"files": []}', '{"files": {"a.npz": 1}, "files": {}}'])
def test_a_broken_journal_claims_nothing(tmp_path, text):
    (tmp_path / JOURNAL_NAME).write_text(text)
    assert read_journal(tmp_path) == {}


def test_owned_files_are_the_listed_ones_with_their_exact_sha256(tmp_path):
    root = write_golden(
        [_case("cos_sin-a"), _case("cos_sin-b")], tmp_path / "g", generator="t", source="custom"
    )
    manifest_sha = hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    (root / "cos_sin-b.safetensors").write_bytes(b"edited by the user")
    (root / "stray.safetensors").write_bytes(b"x")
    manifest, owned = owned_files(root, {"stray.safetensors": SHA})
    assert [c["id"] for c in manifest["cases"]] == ["cos_sin-a", "cos_sin-b"]
    assert set(owned) == {"manifest.json", "cos_sin-a.safetensors"}  # b edited, stray's sha is not SHA
    assert owned["manifest.json"] == manifest_sha


# The journal's wrong claim sorts before and after any real sha256: the file's own sha256 is recorded.
@pytest.mark.parametrize("wrong", ["0" * 64, "f" * 64])
def test_a_file_is_ours_by_the_journal_or_the_manifest_when_both_list_it(tmp_path, wrong):
    """A swap killed after moving a case file in but before the manifest: the file's new bytes match the
    journal's sha256, not the old manifest's, and it is still ours (an untouched one is, by the manifest)."""
    root = write_golden(
        [_case("cos_sin-a"), _case("cos_sin-b")], tmp_path / "g", generator="t", source="custom"
    )
    old_b = hashlib.sha256((root / "cos_sin-b.safetensors").read_bytes()).hexdigest()
    moved_in = b"the new run's bytes of case a"
    (root / "cos_sin-a.safetensors").write_bytes(moved_in)
    new_a = hashlib.sha256(moved_in).hexdigest()
    journal = {"cos_sin-a.safetensors": new_a, "cos_sin-b.safetensors": wrong}
    manifest, owned = owned_files(root, journal)
    assert manifest is not None
    assert owned["cos_sin-a.safetensors"] == new_a  # by the journal
    assert owned["cos_sin-b.safetensors"] == old_b  # by the manifest, the journal's claim not matching


def test_a_leftover_staging_directory_is_ours_only_if_it_holds_golden_files(tmp_path):
    staging = tmp_path / "s"
    staging.mkdir()
    (staging / "manifest.json").write_text("{}")
    (staging / "cos_sin-a.safetensors").write_bytes(b"")
    (staging / JOURNAL_NAME).write_text("{}")
    assert is_our_staging(staging)
    (staging / "cos_sin-b.safetensors").mkdir()  # a directory with a golden file's name
    assert not is_our_staging(staging)
    os.rmdir(staging / "cos_sin-b.safetensors")
    (staging / "notes.txt").write_text("mine")
    assert not is_our_staging(staging)
    os.unlink(staging / "notes.txt")
    (staging / "link.npz").symlink_to(staging / "manifest.json")
    assert not is_our_staging(staging)


def test_signals_are_held_during_the_block_and_delivered_after(monkeypatch):
    assert threading.current_thread() is threading.main_thread()
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]  # once, after the block
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def recorded_signals():
    """SIGINT and SIGTERM recorded (in arrival order) instead of acted on, for the test's duration."""
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in sigs}
    yield got
    for s, handler in previous.items():
        signal.signal(s, handler)


def test_each_held_signal_is_delivered_as_itself_in_arrival_order(recorded_signals):
    with signals_deferred():  # SIGTERM (15) first: arrival order is not signal-number order
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        assert recorded_signals == []
    assert recorded_signals == [signal.SIGTERM, signal.SIGINT]


def test_handlers_are_restored_and_held_signals_delivered_when_the_block_raises(recorded_signals):
    mine = signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="inside"):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            raise RuntimeError("inside")
    assert signal.getsignal(signal.SIGINT) is mine
    assert recorded_signals == [signal.SIGINT]
    os.kill(os.getpid(), signal.SIGTERM)  # the handler in place again acts at once
    assert recorded_signals == [signal.SIGINT, signal.SIGTERM]


def test_a_symlinked_target_is_refused_as_a_symlink(tmp_path):
    from rope_ref.conformance.golden_target import GoldenWriteError, prepare_target

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(GoldenWriteError, match="link is a symlink; refusing to follow it"):
        prepare_target(tmp_path / "link")
    prepare_target(tmp_path / "new" / "set")
    assert (tmp_path / "new" / "set").is_dir()
    prepare_target(tmp_path / "two" / "missing" / "parents" / "set")  # every missing parent is created
    assert (tmp_path / "two" / "missing" / "parents" / "set").is_dir()


def test_read_regular_reads_only_a_regular_file_within_its_limit(tmp_path):
    from rope_ref.conformance.golden_target import _read_regular

    (tmp_path / "f").write_bytes(b"12345")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert _read_regular(tmp_path / "f", 5) == b"12345"
    for path, limit in ((tmp_path / "f", 4), (tmp_path / "fifo", 9), (tmp_path / "link", 9), (tmp_path, 9)):
        assert _read_regular(path, limit) is None, path.name
    assert _read_regular(tmp_path / "missing", 9) is None


def test_sha_of_hashes_only_a_regular_file(tmp_path):
    from rope_ref.conformance.golden_target import _sha_of

    data = os.urandom(2**20 + 5)  # two reads of at most 1 MiB
    (tmp_path / "f").write_bytes(data)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert _sha_of(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    for name in ("fifo", "link", "missing"):
        assert _sha_of(tmp_path / name) is None, name
    assert _sha_of(tmp_path) is None


def test_journal_bytes_list_sorted_files_that_read_journal_reads_back(tmp_path):
    from rope_ref.conformance.golden_target import journal_bytes

    files = {"manifest.json": SHA, "b.npz": "cd" * 32, "a.npz": "ef" * 32}
    data = journal_bytes(files)
    assert json.loads(data) == {"journal_version": 1, "files": files}
    assert list(json.loads(data)["files"]) == ["a.npz", "b.npz", "manifest.json"] and data.endswith(b"}\n")
    (tmp_path / JOURNAL_NAME).write_bytes(data)
    assert read_journal(tmp_path) == files
    (tmp_path / JOURNAL_NAME).unlink()
    (tmp_path / "elsewhere").write_bytes(data)
    (tmp_path / JOURNAL_NAME).symlink_to(tmp_path / "elsewhere")  # never followed
    assert read_journal(tmp_path) == {}
    (tmp_path / JOURNAL_NAME).unlink()
    (tmp_path / JOURNAL_NAME).write_text(json.dumps([{"files": files}]))
    assert read_journal(tmp_path) == {}


def test_the_journal_alone_makes_files_ours_when_the_manifest_is_not_valid(tmp_path):
    (tmp_path / "manifest.json").write_text('{"schema_version": 1}')
    (tmp_path / "a.npz").write_bytes(b"a")
    (tmp_path / "b.npz").write_bytes(b"b")
    sha = {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("manifest.json", "a.npz")}
    journal = {"manifest.json": SHA, "a.npz": sha["a.npz"], "b.npz": sha["a.npz"]}
    manifest, owned = owned_files(tmp_path, journal)
    assert manifest is None and owned == {"a.npz": sha["a.npz"]}
    manifest, owned = owned_files(tmp_path, dict(journal, **{"manifest.json": sha["manifest.json"]}))
    assert manifest is None and owned == sha


def _raise_timeout(signum, frame):
    raise TimeoutError("the second lock blocked instead of being refused")


def test_a_second_lock_is_refused_and_the_lock_file_is_removed_after(tmp_path):
    from rope_ref.conformance.golden_target import GoldenWriteError, exclusive_lock

    with exclusive_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).is_file()
        # A blocking lock would wait for ever: an alarm turns that into a failure within 2 s.
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
        signal.alarm(2)
        try:
            with pytest.raises(GoldenWriteError, match=f"{tmp_path}: another 'rope-ref golden generate' is"):
                with exclusive_lock(tmp_path):
                    pass
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        assert (tmp_path / LOCK_NAME).is_file()
    assert not (tmp_path / LOCK_NAME).exists()
    (tmp_path / LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(GoldenWriteError, match=f"{LOCK_NAME} is a symlink; refusing to follow it"):
        with exclusive_lock(tmp_path):
            pass
    assert not (tmp_path / "elsewhere").exists()


def test_signals_are_left_alone_outside_the_main_thread():
    before = signal.getsignal(signal.SIGINT)
    seen, errors = [], []

    def body():
        try:
            with signals_deferred():
                seen.append(signal.getsignal(signal.SIGINT))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert errors == [] and seen == [before] and signal.getsignal(signal.SIGINT) is before


def test_signal_handlers_are_restored_after_the_block():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals_deferred():
        assert all(signal.getsignal(s) is not h for s, h in before.items())
    assert {s: signal.getsignal(s) for s in before} == before


def test_staging_must_be_a_real_directory_and_a_target_not_a_file(tmp_path):
    from rope_ref.conformance.golden_target import GoldenWriteError, prepare_target

    (tmp_path / "s").mkdir()
    (tmp_path / "to_s").symlink_to(tmp_path / "s")
    (tmp_path / "file").write_text("x")
    assert is_our_staging(tmp_path / "s")
    assert not is_our_staging(tmp_path / "to_s") and not is_our_staging(tmp_path / "file")
    with pytest.raises(GoldenWriteError, match="--out .*file exists and is not a directory"):
        prepare_target(tmp_path / "file")
    prepare_target(tmp_path / "s")  # an existing directory is fine
    assert (tmp_path / "file").read_text() == "x"


def test_the_writer_reads_back_a_manifest_or_journal_as_large_as_the_reader_accepts():
    """``docs/golden-format.md``: ``manifest_bytes`` is 64 MiB by default."""
    from rope_ref.conformance.golden_limits import DEFAULT_LIMITS
    from rope_ref.conformance.golden_target import _MAX_READ

    assert _MAX_READ == 64 * 2**20 == DEFAULT_LIMITS.manifest_bytes


@pytest.mark.parametrize("kind", ["fifo", "socket", "dangling symlink"])
def test_a_target_that_is_not_a_directory_is_refused_up_front_and_left_alone(tmp_path, kind):
    import socket
    import stat

    from rope_ref.conformance.golden_target import GoldenWriteError, prepare_target

    out = tmp_path / "out"
    if kind == "fifo":
        os.mkfifo(out)
        message, is_kind = f"--out {out} exists and is not a directory", stat.S_ISFIFO
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(out))
        sock.close()
        message, is_kind = f"--out {out} exists and is not a directory", stat.S_ISSOCK
    else:
        out.symlink_to(tmp_path / "missing")
        message, is_kind = f"--out {out} is a symlink; refusing to follow it", stat.S_ISLNK
    with pytest.raises(GoldenWriteError) as info:
        prepare_target(out)
    assert str(info.value).startswith(message)
    assert is_kind(os.lstat(out).st_mode) and sorted(os.listdir(tmp_path)) == ["out"]


def test_a_target_swapped_for_a_symlink_while_it_is_made_is_refused(tmp_path, monkeypatch):
    from pathlib import Path

    from rope_ref.conformance.golden_target import GoldenWriteError, prepare_target

    out, real_mkdir = tmp_path / "out", Path.mkdir
    (tmp_path / "elsewhere").mkdir()

    def racing_mkdir(self, *args, **kwargs):
        if self == out:  # another process puts a symlink there between the check and the mkdir
            out.symlink_to(tmp_path / "elsewhere")
            raise FileExistsError(out)
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    with pytest.raises(GoldenWriteError, match=f"--out {out} is not a plain directory; refusing to write"):
        prepare_target(out)
    assert os.listdir(tmp_path / "elsewhere") == []


@pytest.mark.parametrize("recreated", [True, False], ids=["replaced", "removed"])
def test_the_lock_is_taken_again_when_its_file_went_away_while_waiting(tmp_path, monkeypatch, recreated):
    """The run that held the lock removes its file on leaving: a lock taken on that unlinked file would
    exclude nobody, so the lock is taken again on the file now at the path."""
    import fcntl

    from rope_ref.conformance.golden_target import exclusive_lock

    path, real_flock, calls = tmp_path / LOCK_NAME, fcntl.flock, []

    def flock_after_the_holder_left(fd, op):
        calls.append(op)
        if len(calls) == 1:
            os.unlink(path)
            if recreated:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_left)
    with exclusive_lock(tmp_path):
        assert len(calls) == 2
        other = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                real_flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    assert not path.exists()


def test_a_lock_that_cannot_be_created_raises_the_os_error(tmp_path):
    from rope_ref.conformance.golden_target import exclusive_lock

    with pytest.raises(FileNotFoundError):
        with exclusive_lock(tmp_path / "missing"):
            pass


def test_fsync_dir_syncs_the_directory_itself_and_ignores_a_missing_one(tmp_path, monkeypatch):
    from rope_ref.conformance.golden_target import fsync_dir

    synced, real_fsync = [], os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd)
    )
    fsync_dir(tmp_path)
    fsync_dir(tmp_path / "missing")  # best effort: nothing to sync, no error
    assert synced == [str(tmp_path)]
    fds = set(os.listdir("/proc/self/fd"))
    fsync_dir(tmp_path)
    assert set(os.listdir("/proc/self/fd")) == fds  # the directory's descriptor is closed again


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_file_that_cannot_be_opened_reads_as_nothing(tmp_path, monkeypatch):
    from rope_ref.conformance.golden_target import _read_regular, _sha_of

    (tmp_path / "f").write_bytes(b"x")

    def refused(*args, **kwargs):
        raise PermissionError(13, "denied")

    monkeypatch.setattr(os, "open", refused)
    assert _read_regular(tmp_path / "f", 9) is None and _sha_of(tmp_path / "f") is None


def test_a_symlink_put_in_after_the_lstat_is_never_followed(tmp_path, monkeypatch):
    """The open itself refuses a symlink (O_NOFOLLOW), and ``_sha_of`` checks the opened descriptor:
    the lstat before is only a first filter (a path swapped between the two is caught)."""
    from rope_ref.conformance.golden_target import _read_regular, _sha_of

    (tmp_path / "f").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "fifo")
    regular = os.lstat(tmp_path / "f")
    monkeypatch.setattr(os, "lstat", lambda path: regular)  # every path looks like the regular file
    assert _read_regular(tmp_path / "link", 9) is None and _sha_of(tmp_path / "link") is None
    assert _sha_of(tmp_path / "fifo") is None  # opened, but fstat shows a FIFO


def test_the_read_back_limit_applies_to_the_journal_and_the_manifest(tmp_path, monkeypatch):
    from rope_ref.conformance import golden_target

    root = write_golden([_case("cos_sin-a")], tmp_path / "g", generator="t", source="custom")
    journal = golden_target.journal_bytes({"cos_sin-a.safetensors": SHA})
    (root / JOURNAL_NAME).write_bytes(journal)
    size = (root / "manifest.json").stat().st_size
    monkeypatch.setattr(golden_target, "_MAX_READ", max(size, len(journal)))
    assert read_journal(root) == {"cos_sin-a.safetensors": SHA}
    assert owned_files(root, {})[0] is not None
    monkeypatch.setattr(golden_target, "_MAX_READ", len(journal) - 1)
    assert read_journal(root) == {}
    monkeypatch.setattr(golden_target, "_MAX_READ", size - 1)
    manifest, owned = owned_files(root, {})
    assert manifest is None and owned == {}


def test_a_manifest_file_outside_the_golden_names_is_never_claimed(tmp_path, monkeypatch):
    """Even were the validation to let ``../x.npz`` through, owned_files never claims a path outside."""
    from rope_ref.conformance import golden_target

    root = write_golden([_case("cos_sin-a")], tmp_path / "g", generator="t", source="custom")
    (tmp_path / "x.npz").write_bytes(b"not ours")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["cases"][0]["file"] = "../x.npz"
    manifest["cases"][0]["sha256"] = hashlib.sha256(b"not ours").hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(golden_target, "validate_manifest", lambda manifest, where: None)
    got, owned = owned_files(root, {})
    assert got is not None and set(owned) == {"manifest.json"}


def test_the_lock_file_is_private_to_writers_and_its_descriptors_are_closed(tmp_path):
    from rope_ref.conformance.golden_target import GoldenWriteError, exclusive_lock

    umask = os.umask(0o022)
    os.umask(umask)
    fds = _open_fds()
    with exclusive_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).stat().st_mode & 0o777 == 0o644 & ~umask
        with pytest.raises(GoldenWriteError):
            with exclusive_lock(tmp_path):
                pass
        assert len(_open_fds() - fds) == 1  # the refused run closed its descriptor
    assert _open_fds() == fds


def test_the_lock_is_released_and_removed_when_the_block_raises(tmp_path, monkeypatch):
    """The file is unlinked while still locked, then closed: never closed first (another run could take
    the lock on the file we are about to remove)."""
    from rope_ref.conformance.golden_target import exclusive_lock

    path, real_close, seen = tmp_path / LOCK_NAME, os.close, []
    fds = _open_fds()
    with pytest.raises(RuntimeError, match="inside"):
        with exclusive_lock(tmp_path):
            monkeypatch.setattr(os, "close", lambda fd: seen.append(path.exists()) or real_close(fd))
            raise RuntimeError("inside")
    monkeypatch.setattr(os, "close", real_close)
    assert seen == [False] and not path.exists() and _open_fds() == fds
    with exclusive_lock(tmp_path):  # free again
        assert path.is_file()


def test_the_lock_retry_closes_the_descriptor_of_the_stale_file(tmp_path, monkeypatch):
    import fcntl

    from rope_ref.conformance.golden_target import exclusive_lock

    path, real_flock, calls = tmp_path / LOCK_NAME, fcntl.flock, []

    def flock_after_the_holder_left(fd, op):
        calls.append(op)
        if len(calls) == 1:
            os.unlink(path)
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_left)
    fds = _open_fds()
    with exclusive_lock(tmp_path):
        assert len(_open_fds() - fds) == 1
        assert calls == [fcntl.LOCK_EX | fcntl.LOCK_NB] * 2
    assert _open_fds() == fds


def test_fsync_dir_syncs_only_a_directory_and_closes_it_when_the_sync_fails(tmp_path, monkeypatch):
    from rope_ref.conformance.golden_target import fsync_dir

    (tmp_path / "f").write_text("x")
    synced = []

    def failing_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    fds = _open_fds()
    fsync_dir(tmp_path / "f")  # not a directory: not opened
    assert synced == []
    fsync_dir(tmp_path)  # the failure is suppressed, and the descriptor closed
    assert synced == [str(tmp_path)] and _open_fds() == fds


def test_a_lock_file_removed_by_someone_else_while_held_is_no_error(tmp_path):
    """The unlink at the end tolerates a lock file already gone, and the descriptor is still closed."""
    from rope_ref.conformance.golden_target import exclusive_lock

    fds = set(os.listdir("/proc/self/fd"))
    with exclusive_lock(tmp_path):
        os.unlink(tmp_path / LOCK_NAME)
    assert not (tmp_path / LOCK_NAME).exists()
    assert set(os.listdir("/proc/self/fd")) == fds
