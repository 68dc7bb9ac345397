"""The target directory of ``golden generate``: its lock, what in it is ours, and the swap journal.

A file in the target is *ours* only if a valid rope-ref ``manifest.json`` there lists it with its exact
sha256, or the journal of an interrupted swap (``JOURNAL_NAME``, written before the first rename and
removed after the last) lists it with its exact sha256. So a run killed at any point, even between two
renames, leaves only files that the next run recognises and may replace: re-running repairs the set.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import stat
import threading
from pathlib import Path
from typing import Any

from .golden_manifest import _FILE_RE, _SHA_RE, MANIFEST, GoldenError, parse_json, validate_manifest

__all__ = [
    "GoldenWriteError",
    "LOCK_NAME",
    "JOURNAL_NAME",
    "STAGING_PREFIX",
    "owned_files",
    "read_journal",
    "journal_bytes",
]

#: Lock file, swap journal and staging-directory prefix inside a target directory (none left after a run).
LOCK_NAME = ".rope-ref-golden.lock"
JOURNAL_NAME = ".rope-ref-golden.journal"
STAGING_PREFIX = ".rope-ref-staging-"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: Largest manifest or journal the writer reads back from a target (as the reader's default limit).
_MAX_READ = 64 * 2**20


class GoldenWriteError(ValueError):
    """``write_golden`` refused to write (target not ours, locked, unsafe); nothing was changed."""


def _read_regular(path: Path, limit: int) -> bytes | None:
    """Bytes of ``path`` if it is a regular file (not a symlink, FIFO or device) of at most ``limit``
    bytes, else ``None``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1)


def _sha_of(path: Path) -> str | None:
    """sha256 of a regular file (never through a symlink, never blocking on a FIFO), streamed."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_journal(root: Path) -> dict[str, str]:
    """``{file name: sha256}`` of the journal a killed swap left in ``root`` (``{}`` if none or invalid)."""
    data = _read_regular(root / JOURNAL_NAME, _MAX_READ)
    if data is None:
        return {}
    try:
        journal = parse_json(data, str(root / JOURNAL_NAME))
    except GoldenError:
        return {}
    files = journal.get("files") if isinstance(journal, dict) else None
    if not isinstance(files, dict):
        return {}
    return {
        name: sha
        for name, sha in files.items()
        if (name == MANIFEST or _FILE_RE.match(name)) and isinstance(sha, str) and _SHA_RE.match(sha)
    }


def journal_bytes(files: dict[str, str]) -> bytes:
    """The journal listing ``{file name: sha256}``: every file a swap may leave in the target."""
    import json

    return (
        json.dumps({"journal_version": 1, "files": dict(sorted(files.items()))}, indent=1) + "\n"
    ).encode()


def owned_files(root: Path, journal: dict[str, str]) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The existing manifest if it is verifiably ours, and ``{name: sha256}`` of the files we may
    replace or remove.

    Ours means: ``manifest.json`` is a regular file holding a valid rope-ref manifest (or matching the
    journal's sha256); a file is ours only if it is a regular file whose sha256 is the one the manifest
    or the journal records for it.
    """
    manifest = None
    data = _read_regular(root / MANIFEST, _MAX_READ)
    if data is not None:
        try:
            manifest = parse_json(data, str(root / MANIFEST))
            validate_manifest(manifest, str(root / MANIFEST))
        except GoldenError:
            manifest = None
    claims: dict[str, set[str]] = {}
    for name, sha in journal.items():
        claims.setdefault(name, set()).add(sha)
    if manifest is not None:
        claims.setdefault(MANIFEST, set()).add(hashlib.sha256(data).hexdigest())
        for case in manifest["cases"]:
            if _FILE_RE.match(case["file"]):
                claims.setdefault(case["file"], set()).add(case["sha256"])
    owned = {}
    for name, shas in claims.items():
        sha = _sha_of(root / name)
        if sha is not None and sha in shas:
            owned[name] = sha
    return manifest, owned


@contextlib.contextmanager
def exclusive_lock(root: Path):
    """Hold ``root/LOCK_NAME`` with a non-blocking ``flock``; refuse at once if another run holds it."""
    import fcntl

    path = root / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise GoldenWriteError(f"{path} is a symlink; refusing to follow it") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise GoldenWriteError(
                f"{root}: another 'rope-ref golden generate' is writing there (lock {LOCK_NAME} is held); "
                f"nothing was changed"
            ) from None
        # The lock file may have been removed (and re-created) by the run that held it: retry then.
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # still holding the lock, so no other run can be using this file
        os.close(fd)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM (main thread only) until the block ends, then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    sigs = [s for s in (signal.SIGINT, signal.SIGTERM) if s is not None]
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            os.kill(os.getpid(), s)


def is_our_staging(path: Path) -> bool:
    """A leftover staging directory: a real directory holding only regular files with golden names."""
    if path.is_symlink() or not path.is_dir():
        return False
    with os.scandir(path) as entries:
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                return False
            if entry.name not in (MANIFEST, JOURNAL_NAME) and not _FILE_RE.match(entry.name):
                return False
    return True


def prepare_target(out: Path) -> None:
    """Create ``out`` if missing; refuse a symlink or a non-directory (never followed)."""
    if out.is_symlink():
        raise GoldenWriteError(f"--out {out} is a symlink; refusing to follow it (give the real directory)")
    if os.path.lexists(out) and not out.is_dir():
        raise GoldenWriteError(f"--out {out} exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        out.mkdir()
    if out.is_symlink() or not out.is_dir():  # replaced under us between the checks
        raise GoldenWriteError(f"--out {out} is not a plain directory; refusing to write")


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | _DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
