"""Golden directories: writing them safely, and the one import path for reading and verifying them.

A golden directory holds ``manifest.json`` and one tensor file per case (safetensors, or pickle-free
``.npz``); the format is specified in ``docs/golden-format.md``. The work is split by responsibility:

* ``golden_manifest``: constants and the schema check (:func:`validate_manifest`);
* ``golden_limits``: the reading limits a user can raise (:class:`ReadLimits`);
* ``golden_reading``: bounded, symlink-free reading (:func:`read_manifest`, :func:`load_golden`, and
  :func:`open_golden` for reading case by case);
* ``golden_verify``: :func:`verify_golden` against a fresh regeneration;
* ``golden_build`` / ``golden_target`` / ``golden_merge``: the set in memory, the target directory (lock,
  ownership, swap journal) and merging into an existing set, used by :func:`write_golden` here.

:func:`write_golden` never loses data: it stages and verifies the whole set before swapping it in under an
exclusive lock, never follows a symlink, replaces or removes only files that are verifiably its own, and
journals the swap so that re-running the same command repairs a set killed at any point.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .case import Case
from .golden_build import build_set, manifest_bytes
from .golden_limits import DEFAULT_LIMITS, GoldenLimitError, ReadLimits, parse_limits
from .golden_manifest import (
    FORMATS,
    IO_DTYPES,
    LAYOUTS,
    LICENSE,
    MANIFEST,
    SCHEMA_VERSION,
    SUITE_VERSION,
    TENSOR_DTYPES,
    TOLERANCES,
    GoldenError,
    validate_manifest,
)
from .golden_merge import merge_sets
from .golden_reading import (
    GoldenCases,
    iter_golden,
    load_golden,
    open_golden,
    plan_golden,
    read_manifest,
    shipped_dir,
)
from .golden_target import (
    _NOFOLLOW,
    JOURNAL_NAME,
    LOCK_NAME,
    STAGING_PREFIX,
    GoldenWriteError,
    exclusive_lock,
    fsync_dir,
    is_our_staging,
    journal_bytes,
    owned_files,
    prepare_target,
    read_journal,
    signals_deferred,
)
from .golden_verify import VerifyReport, regeneration_tolerance, verify_golden

__all__ = [
    "GoldenError",
    "GoldenLimitError",
    "GoldenWriteError",
    "ReadLimits",
    "DEFAULT_LIMITS",
    "parse_limits",
    "SCHEMA_VERSION",
    "SUITE_VERSION",
    "MANIFEST",
    "FORMATS",
    "TOLERANCES",
    "IO_DTYPES",
    "TENSOR_DTYPES",
    "LAYOUTS",
    "LICENSE",
    "LOCK_NAME",
    "JOURNAL_NAME",
    "STAGING_PREFIX",
    "KILL_AT_RENAME_ENV",
    "shipped_dir",
    "write_golden",
    "load_golden",
    "open_golden",
    "GoldenCases",
    "iter_golden",
    "plan_golden",
    "read_manifest",
    "validate_manifest",
    "verify_golden",
    "regeneration_tolerance",
    "VerifyReport",
]

#: Environment variable naming a rename (1-based) before which ``write_golden`` kills its own process
#: with SIGKILL: how the tests prove that a swap killed between any two renames is repaired.
KILL_AT_RENAME_ENV = "ROPE_REF_GOLDEN_KILL_AT_RENAME"


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a hook the tests replace to simulate a full disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (never an existing file, never through a symlink), write and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _step(count: list[int]) -> None:
    """Count a step of the swap; SIGKILL this process at step :data:`KILL_AT_RENAME_ENV` (a test hook:
    step 1 renames the journal in, then one step per file, the manifest, and the final clean-up)."""
    count[0] += 1
    if os.environ.get(KILL_AT_RENAME_ENV) == str(count[0]):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _rename(src: Path, dst: Path, count: list[int]) -> None:
    _step(count)
    os.replace(src, dst)


def _kept_bytes(out: Path, kept: list[dict[str, Any]], owned: dict[str, str]) -> dict[str, bytes]:
    """The files of the cases a merge keeps, read back and checked against their sha256."""
    files = {}
    for entry in kept:
        name = entry["file"]
        data = None
        if owned.get(name) == entry["sha256"]:
            with contextlib.suppress(OSError):
                fd = os.open(out / name, os.O_RDONLY | _NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read()
        if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise GoldenWriteError(
                f"--out {out}: {name!r} of case {entry['id']!r}, which this run would keep, is missing or "
                f"does not match its sha256; restore it, or pass --replace to replace the whole set"
            )
        files[name] = data
    return files


def write_golden(
    cases: Iterable[Case],
    out: str | os.PathLike,
    *,
    generator: str,
    source: str = "catalogue",
    fmt: str = "safetensors",
    bug_classes: dict[str, str] | None = None,
    informational: dict[str, Any] | None = None,
    force: bool = False,
    group: str | None = None,
    replace: bool = False,
) -> Path:
    """Write ``cases`` as a golden directory at ``out``; deterministic (no timestamps, sorted tensors).

    ``generator`` is the command line recorded as provenance; ``source`` is ``"catalogue"`` for the
    built-in case set (``verify`` then also compares case ids with a fresh catalogue) or ``"custom"``.

    Into an existing rope-ref set, a run with ``group`` (a custom set's name) replaces that set's cases
    and keeps every other case; without ``group`` it replaces the whole set, but a catalogue run over a
    custom set, or any run in another format, is refused unless ``replace`` (never a silent loss).

    Safety (see ``docs/golden-format.md``): every file is built and validated in memory first; under an
    exclusive, non-blocking lock the set is written to a fresh staging directory inside ``out``, read back
    and verified; a journal naming every file of the swap (with its sha256) is put in place, then the
    files are moved in one by one (``os.replace``, manifest last, SIGINT/SIGTERM held) and the journal
    removed. An error or interruption before the swap leaves the previous set untouched; a kill during it
    is repaired by re-running the command. Symlinks are never followed. A non-empty ``out`` that is not a
    rope-ref golden set is refused unless ``force``; even then only files that are ours (listed, with a
    matching sha256, by a valid rope-ref manifest or the journal there) are replaced or removed, and any
    other file in the way is an error.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got {fmt!r}")
    if source not in ("catalogue", "custom"):
        raise ValueError(f"source must be 'catalogue' or 'custom', got {source!r}")
    if not isinstance(generator, str):
        raise TypeError(f"generator must be a str, got {type(generator).__name__}")
    files, manifest = build_set(cases, fmt, generator, source, bug_classes, informational)
    out = Path(out)
    prepare_target(out)
    with exclusive_lock(out):
        for entry in os.scandir(out):  # staging directories left by a killed run
            if entry.name.startswith(STAGING_PREFIX) and is_our_staging(Path(entry.path)):
                shutil.rmtree(entry.path, ignore_errors=True)
        journal = read_journal(out)
        old_manifest, owned = owned_files(out, journal)
        present = {e.name for e in os.scandir(out)} - {LOCK_NAME, JOURNAL_NAME}
        foreign = present - set(owned)
        if old_manifest is None and foreign and not force:
            raise GoldenWriteError(
                f"--out {out} is not empty and is not a rope-ref golden set (holds e.g. "
                f"{sorted(foreign)[0]!r}); choose an empty directory, or pass --force to add the set "
                f"there (files that are not ours are never replaced or removed)"
            )
        if old_manifest is not None and not replace:
            kept, manifest = merge_sets(out, old_manifest, manifest, group, command=generator)
            files = {**_kept_bytes(out, kept, owned), **files}
        in_the_way = sorted(n for n in (set(files) | {MANIFEST}) & present if n not in owned)
        if in_the_way:
            raise GoldenWriteError(
                f"--out {out}: {in_the_way[0]!r} exists and is not a file of a rope-ref golden set there "
                f"({len(in_the_way)} such file(s)); refusing to replace it, even with --force: move it away"
            )
        _swap(out, files, manifest_bytes(manifest), owned)
    return out


def _swap(out: Path, files: dict[str, bytes], manifest: bytes, owned: dict[str, str]) -> None:
    """Stage ``files`` and ``manifest``, check them, then journal and move them into ``out``."""
    stale = sorted(set(owned) - set(files) - {MANIFEST})
    claims = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    claims[MANIFEST] = hashlib.sha256(manifest).hexdigest()
    journal = {**{n: owned[n] for n in stale}, **claims}
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    try:
        for name, data in files.items():
            _write_new_file(staging / name, data)
        _write_new_file(staging / MANIFEST, manifest)
        load_golden(staging)  # read back: schema, checksums, structure
        _write_new_file(staging / JOURNAL_NAME, journal_bytes(journal))
        renames = [0]
        with signals_deferred():
            _rename(staging / JOURNAL_NAME, out / JOURNAL_NAME, renames)
            fsync_dir(out)
            for name in files:
                _rename(staging / name, out / name, renames)
            _rename(staging / MANIFEST, out / MANIFEST, renames)
            _step(renames)
            for name in stale:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(out / name)
            fsync_dir(out)
            os.unlink(out / JOURNAL_NAME)
            fsync_dir(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
