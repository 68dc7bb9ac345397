"""Golden directories: writing, loading (with integrity checks) and verifying them.

A golden directory holds ``manifest.json`` and one tensor file per case (safetensors, or pickle-free
``.npz``). The format is specified in ``docs/golden-format.md`` and its JSON Schema in
``docs/golden-manifest.schema.json``; :func:`validate_manifest` enforces the same rules without the
``jsonschema`` package (a test keeps the two in agreement).

:func:`load_golden` checks everything *before* returning any case: the manifest's structure, that every
file name stays inside the directory, every file's sha256, and that each file holds exactly the
tensors the manifest lists. Any violation raises :class:`GoldenError` naming the offending file.

:func:`write_golden` never loses data: it stages and verifies the whole set before swapping it in under
an exclusive lock, never follows a symlink, and replaces or removes only files that are verifiably its
own (see its docstring and ``docs/golden-format.md``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .case import OPS, Case
from .safetensors_io import (
    SafetensorsError,
    loads_bounded,
    read_npz,
    read_safetensors,
    safetensors_bytes,
    write_npz,
)

__all__ = [
    "GoldenError",
    "GoldenWriteError",
    "SCHEMA_VERSION",
    "SUITE_VERSION",
    "MANIFEST",
    "TOLERANCES",
    "shipped_dir",
    "write_golden",
    "load_golden",
    "read_manifest",
    "validate_manifest",
    "verify_golden",
    "VerifyReport",
]

SCHEMA_VERSION = 1
#: Version of the shipped case set, independent of the package version; bump when cases change.
SUITE_VERSION = "2.1.0"
#: The licence of the golden vectors (the project's; the text is LICENSE at the repository root).
LICENSE = "Apache-2.0"
MANIFEST = "manifest.json"
FORMATS = {"safetensors": ".safetensors", "npz": ".npz"}
TOLERANCES = ("exact", "table", "trig", "rotation", "emulation", "decay", "scale")
IO_DTYPES = ("float64", "float32", "float16", "bfloat16")
TENSOR_DTYPES = ("float64", "float32", "float16", "int64", "int32")
LAYOUTS = ("half", "interleaved")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\.(safetensors|npz)$")
_TENSOR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_ROLES = ("inputs", "expected", "aux")  # "aux" is optional in a manifest entry


class GoldenError(ValueError):
    """A golden directory is corrupt, tampered with or malformed; the message names the file."""


def shipped_dir() -> Path:
    """The golden set shipped inside the package (``rope_ref/conformance/golden``)."""
    return Path(__file__).resolve().parent / "golden"


# -- manifest validation (mirrors docs/golden-manifest.schema.json) ---------------------------------


def _fail(where: str, pointer: str, msg: str) -> GoldenError:
    return GoldenError(f"{where}: schema violation at {pointer or '/'}: {msg}")


def _check_keys(
    obj: Any, where: str, ptr: str, required: Sequence[str], optional: Sequence[str] = ()
) -> dict:
    if not isinstance(obj, dict):
        raise _fail(where, ptr, f"expected an object, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise _fail(where, ptr, f"missing required key(s) {missing}")
    extra = sorted(set(obj) - set(required) - set(optional))
    if extra:
        raise _fail(where, ptr, f"unexpected key(s) {extra}")
    return obj


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check_str(v: Any, where: str, ptr: str, pattern: re.Pattern | None = None, choices=None) -> None:
    if not isinstance(v, str):
        raise _fail(where, ptr, f"expected a string, got {v!r:.80}")
    if pattern is not None and not pattern.match(v):
        raise _fail(where, ptr, f"{v!r:.80} does not match {pattern.pattern}")
    if choices is not None and v not in choices:
        raise _fail(where, ptr, f"{v!r:.80} is not one of {list(choices)}")


def _check_config(cfg: Any, where: str, ptr: str) -> None:
    if cfg is None:
        return
    _check_keys(cfg, where, ptr, ("head_dim", "layout", "rotary_dim", "base", "scaling"))
    for key in ("head_dim", "rotary_dim"):
        if not _is_int(cfg[key]) or cfg[key] < 2 or cfg[key] % 2:
            raise _fail(where, f"{ptr}/{key}", f"expected an even integer >= 2, got {cfg[key]!r}")
    _check_str(cfg["layout"], where, f"{ptr}/layout", choices=LAYOUTS)
    if not _is_num(cfg["base"]) or cfg["base"] <= 1:
        raise _fail(where, f"{ptr}/base", f"expected a number > 1, got {cfg['base']!r}")
    scaling = cfg["scaling"]
    if scaling is not None and (
        not isinstance(scaling, dict) or not isinstance(scaling.get("rope_type"), str)
    ):
        raise _fail(where, f"{ptr}/scaling", "expected null or an HF-style dict with a string 'rope_type'")


def _check_tensor_specs(specs: Any, where: str, ptr: str) -> None:
    if not isinstance(specs, dict):
        raise _fail(where, ptr, f"expected an object of tensor specs, got {type(specs).__name__}")
    if not specs and ptr.endswith("/expected"):
        raise _fail(where, ptr, "a case needs at least one expected tensor")
    for name, spec in specs.items():
        p = f"{ptr}/{name}"
        if not _TENSOR_RE.match(name):
            raise _fail(
                where,
                p,
                f"tensor name {name!r} is not allowed (it could escape the directory or "
                f"collide); use letters, digits and '_'",
            )
        _check_keys(spec, where, p, ("dtype", "shape"))
        _check_str(spec["dtype"], where, f"{p}/dtype", choices=TENSOR_DTYPES)
        shape = spec["shape"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise _fail(where, f"{p}/shape", f"expected a list of non-negative integers, got {shape!r:.80}")


def validate_manifest(manifest: Any, where: str = MANIFEST) -> None:
    """Raise :class:`GoldenError` (naming ``where`` and a JSON pointer) if ``manifest`` breaks the schema."""
    _check_keys(
        manifest,
        where,
        "",
        ("schema_version", "suite_version", "format", "provenance", "bug_classes", "cases"),
    )
    if manifest["schema_version"] != SCHEMA_VERSION or not _is_int(manifest["schema_version"]):
        raise _fail(
            where,
            "/schema_version",
            f"this reader supports {SCHEMA_VERSION}, got {manifest['schema_version']!r}",
        )
    _check_str(manifest["suite_version"], where, "/suite_version")
    _check_str(manifest["format"], where, "/format", choices=tuple(FORMATS))
    prov = _check_keys(
        manifest["provenance"],
        where,
        "/provenance",
        ("rope_ref_version", "generator", "source"),
        ("informational", "numpy_version", "license"),
    )
    for key in ("rope_ref_version", "generator", "numpy_version", "license"):
        if key in prov:
            _check_str(prov[key], where, f"/provenance/{key}")
    _check_str(prov["source"], where, "/provenance/source", choices=("catalogue", "custom"))
    if "informational" in prov and not isinstance(prov["informational"], dict):
        raise _fail(where, "/provenance/informational", "expected an object")
    bug_classes = manifest["bug_classes"]
    if not isinstance(bug_classes, dict) or not all(isinstance(v, str) for v in bug_classes.values()):
        raise _fail(where, "/bug_classes", "expected an object mapping names to descriptions")
    cases = manifest["cases"]
    if not isinstance(cases, list):
        raise _fail(where, "/cases", "expected an array")
    seen: set[str] = set()
    for i, case in enumerate(cases):
        ptr = f"/cases/{i}"
        _check_keys(
            case,
            where,
            ptr,
            (
                "id",
                "op",
                "description",
                "bug_class",
                "tolerance",
                "io_dtype",
                "config",
                "params",
                "file",
                "sha256",
                "inputs",
                "expected",
            ),
            ("aux", "requires"),
        )
        _check_str(case["id"], where, f"{ptr}/id", _ID_RE)
        if case["id"] in seen:
            raise _fail(where, f"{ptr}/id", f"duplicate case id {case['id']!r}")
        seen.add(case["id"])
        _check_str(case["op"], where, f"{ptr}/op", choices=OPS)
        _check_str(case["description"], where, f"{ptr}/description")
        _check_str(case["bug_class"], where, f"{ptr}/bug_class", choices=tuple(bug_classes))
        _check_str(case["tolerance"], where, f"{ptr}/tolerance", choices=TOLERANCES)
        if case["io_dtype"] is not None:
            _check_str(case["io_dtype"], where, f"{ptr}/io_dtype", choices=IO_DTYPES)
        _check_config(case["config"], where, f"{ptr}/config")
        if not isinstance(case["params"], dict):
            raise _fail(where, f"{ptr}/params", "expected an object")
        file = case["file"]
        if isinstance(file, str) and ("/" in file or "\\" in file or file.startswith("..")):
            raise _fail(where, f"{ptr}/file", f"file name {file!r} escapes the golden directory")
        _check_str(file, where, f"{ptr}/file", _FILE_RE)
        _check_str(case["sha256"], where, f"{ptr}/sha256", _SHA_RE)
        _check_tensor_specs(case["inputs"], where, f"{ptr}/inputs")
        _check_tensor_specs(case["expected"], where, f"{ptr}/expected")
        if "aux" in case:
            _check_tensor_specs(case["aux"], where, f"{ptr}/aux")
        requires = case.get("requires", [])
        if not isinstance(requires, list) or len(set(map(str, requires))) != len(requires):
            raise _fail(where, f"{ptr}/requires", "expected an array of distinct case ids")
        for j, req in enumerate(requires):
            _check_str(req, where, f"{ptr}/requires/{j}", _ID_RE)
            if req not in seen or req == case["id"]:
                raise _fail(
                    where,
                    f"{ptr}/requires/{j}",
                    f"{req!r} is not the id of an earlier case (prerequisites run first, in manifest order)",
                )


# -- writing -------------------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite number {obj} cannot go into a golden manifest")
    return obj


def _stored(arr: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype.name not in TENSOR_DTYPES:
        raise TypeError(f"{what}: dtype {arr.dtype} cannot be stored (allowed: {TENSOR_DTYPES})")
    return arr


def _tensor_file_bytes(case: Case, fmt: str) -> bytes:
    tensors = {}
    for role, group in (("inputs", case.inputs), ("expected", case.expected), ("aux", case.aux)):
        for name, arr in group.items():
            if not _TENSOR_RE.match(name):
                raise ValueError(f"case {case.id!r}: tensor name {name!r} is not allowed")
            tensors[f"{role}.{name}"] = _stored(arr, f"case {case.id!r} {role}.{name}")
    if fmt == "safetensors":
        return safetensors_bytes(tensors, {"case_id": case.id, "schema_version": str(SCHEMA_VERSION)})
    buf = io.BytesIO()
    write_npz(buf, tensors)
    return buf.getvalue()


def _specs(group: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {
        name: {"dtype": np.asarray(a).dtype.name, "shape": list(np.shape(a))} for name, a in group.items()
    }


# -- writing safely: stage, verify, swap in under a lock -------------------------------------------------

#: Lock file and staging-directory prefix inside a target directory (both removed after a run).
LOCK_NAME = ".rope-ref-golden.lock"
STAGING_PREFIX = ".rope-ref-staging-"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class GoldenWriteError(ValueError):
    """``write_golden`` refused to write (target not ours, locked, unsafe); nothing was changed."""


def _build_set(
    cases: Iterable[Case], fmt: str, generator: str, source: str, bug_classes, informational
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of the new set in memory, and its manifest (validated). Nothing touches the disk."""
    import rope_ref

    from .catalogue import BUG_CLASSES

    files: dict[str, bytes] = {}
    entries = []
    for case in cases:
        if not isinstance(case.id, str) or not _ID_RE.match(case.id):
            raise ValueError(f"case id {case.id!r} is not allowed (letters, digits, '_', '.', '-')")
        file = case.id + FORMATS[fmt]
        if file in files:
            raise ValueError(f"case id {case.id!r} occurs twice (each case needs its own file)")
        data = _tensor_file_bytes(case, fmt)
        files[file] = data
        entry: dict[str, Any] = {
            "id": case.id,
            "op": case.op,
            "description": case.description,
            "bug_class": case.bug_class,
            "tolerance": case.tolerance,
            "io_dtype": case.io_dtype,
            "config": _jsonable(case.config),
            "params": _jsonable(case.params),
            "file": file,
            "sha256": hashlib.sha256(data).hexdigest(),
            "inputs": _specs(case.inputs),
            "expected": _specs(case.expected),
        }
        if case.aux:
            entry["aux"] = _specs(case.aux)
        if case.requires:
            entry["requires"] = list(case.requires)
        entries.append(entry)
    used = {e["bug_class"] for e in entries}
    classes = bug_classes if bug_classes is not None else BUG_CLASSES
    provenance: dict[str, Any] = {
        "rope_ref_version": rope_ref.__version__,
        # No numpy_version since suite 2.0.0: the oracle's bits no longer depend on NumPy.
        "license": LICENSE,
        "generator": generator,
        "source": source,
    }
    if informational:
        provenance["informational"] = _jsonable(informational)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "suite_version": SUITE_VERSION,
        "format": fmt,
        "provenance": provenance,
        "bug_classes": {k: v for k, v in classes.items() if k in used},
        "cases": entries,
    }
    validate_manifest(manifest, "the new manifest")
    return files, manifest


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


def _read_regular(path: Path, limit: int = 256 * 1024 * 1024) -> bytes | None:
    """Bytes of ``path`` if it is a regular file (not a symlink, FIFO or device), else ``None``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1)


def _owned_files(root: Path) -> tuple[dict[str, Any] | None, set[str]]:
    """The existing manifest if it is verifiably ours, and the files we may replace or remove.

    Ours means: ``manifest.json`` is a regular file holding a valid rope-ref manifest; a file it lists is
    ours only if it is a regular file whose sha256 is the one the manifest records.
    """
    data = _read_regular(root / MANIFEST)
    if data is None:
        return None, set()
    try:
        manifest = _loads(data.decode("utf-8"), str(root / MANIFEST))
        validate_manifest(manifest, str(root / MANIFEST))
    except (GoldenError, UnicodeDecodeError):
        return None, set()
    owned = {MANIFEST}
    for case in manifest["cases"]:
        name = case["file"]
        if not _FILE_RE.match(name):
            continue
        blob = _read_regular(root / name)
        if blob is not None and hashlib.sha256(blob).hexdigest() == case["sha256"]:
            owned.add(name)
    return manifest, owned


@contextlib.contextmanager
def _exclusive_lock(root: Path):
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
def _signals_deferred():
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


def _is_our_staging(path: Path) -> bool:
    """A leftover staging directory: a real directory holding only regular files with golden names."""
    if path.is_symlink() or not path.is_dir():
        return False
    for entry in os.scandir(path):
        if not entry.is_file(follow_symlinks=False):
            return False
        if entry.name != MANIFEST and not _FILE_RE.match(entry.name):
            return False
    return True


def _prepare_target(out: Path) -> None:
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
) -> Path:
    """Write ``cases`` as a golden directory at ``out``; deterministic (no timestamps, sorted tensors).

    ``generator`` is the command line recorded as provenance; ``source`` is ``"catalogue"`` for the
    built-in case set (``verify`` then also compares case ids with a fresh catalogue) or ``"custom"``.

    Safety (see ``docs/golden-format.md``): every file is built and validated in memory first; under an
    exclusive, non-blocking lock the set is written to a fresh staging directory inside ``out``, read back
    and verified, then moved in file by file (``os.replace``, manifest last, with SIGINT/SIGTERM held
    for those few renames). An error or interruption before that leaves the previous set untouched.
    Symlinks are never followed. A non-empty ``out`` that is not a rope-ref golden set is refused unless
    ``force``; even then only files that are ours (listed, with a matching sha256, by a valid rope-ref
    manifest there) are replaced or removed, and any other file in the way is an error.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got {fmt!r}")
    if source not in ("catalogue", "custom"):
        raise ValueError(f"source must be 'catalogue' or 'custom', got {source!r}")
    if not isinstance(generator, str):
        raise TypeError(f"generator must be a str, got {type(generator).__name__}")
    files, manifest = _build_set(cases, fmt, generator, source, bug_classes, informational)
    manifest_bytes = (json.dumps(manifest, indent=1, ensure_ascii=True) + "\n").encode("ascii")
    out = Path(out)
    _prepare_target(out)
    with _exclusive_lock(out):
        for entry in os.scandir(out):  # staging directories left by a killed run
            if entry.name.startswith(STAGING_PREFIX) and _is_our_staging(Path(entry.path)):
                shutil.rmtree(entry.path, ignore_errors=True)
        old_manifest, owned = _owned_files(out)
        present = {e.name for e in os.scandir(out)} - {LOCK_NAME}
        if old_manifest is None and present and not force:
            raise GoldenWriteError(
                f"--out {out} is not empty and is not a rope-ref golden set (holds e.g. "
                f"{sorted(present)[0]!r}); choose an empty directory, or pass --force to add the set "
                f"there (files that are not ours are never replaced or removed)"
            )
        in_the_way = sorted(n for n in (set(files) | {MANIFEST}) & present if n not in owned)
        if in_the_way:
            raise GoldenWriteError(
                f"--out {out}: {in_the_way[0]!r} exists and is not a file of a rope-ref golden set there "
                f"({len(in_the_way)} such file(s)); refusing to replace it, even with --force: move it away"
            )
        stale = sorted(owned - set(files) - {MANIFEST})
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
        try:
            for name, data in files.items():
                _write_new_file(staging / name, data)
            _write_new_file(staging / MANIFEST, manifest_bytes)
            load_golden(staging)  # read back: schema, checksums, structure
            with _signals_deferred():
                for name in files:
                    os.replace(staging / name, out / name)
                os.replace(staging / MANIFEST, out / MANIFEST)
                for name in stale:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(out / name)
                _fsync_dir(out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | _DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- loading -------------------------------------------------------------------------------------------


def read_manifest(path: str | os.PathLike | None = None) -> tuple[Path, dict[str, Any]]:
    """``(directory, manifest)`` after JSON parsing and schema validation (no tensor files read)."""
    root = Path(path) if path is not None else shipped_dir()
    if not root.is_dir():
        raise GoldenError(f"{root}: not a golden directory (no such directory)")
    mpath = root / MANIFEST
    _check_regular(mpath, f"a golden directory needs a {MANIFEST}")
    manifest = _loads(mpath.read_bytes(), str(mpath))
    validate_manifest(manifest, str(mpath))
    return root, manifest


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check_regular(path: Path, why: str) -> None:
    """Refuse a missing file or one that is not a regular file (a FIFO would block the reader)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise GoldenError(f"{path}: a dangling symlink ({why})") from None
        raise GoldenError(f"{path}: missing ({why})") from None
    except OSError as exc:
        raise GoldenError(f"{path}: cannot be read ({exc.strerror}; {why})") from None
    if not stat.S_ISREG(mode):
        raise GoldenError(f"{path}: is {_kind(mode)}, not a regular file ({why})")


def _loads(data: bytes | str, where: str) -> Any:
    """Parse a manifest's JSON; bad UTF-8, bad JSON and absurd nesting raise :class:`GoldenError`."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return loads_bounded(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise GoldenError(f"{where}: not valid UTF-8 JSON ({exc})") from None


def _safe_file(root: Path, name: str, mpath: Path) -> Path:
    """Resolve a case's file name, refusing anything that leaves ``root`` (``..``, '/', symlinks)."""
    if not _FILE_RE.match(name) or name in (".", "..") or "/" in name or "\\" in name:
        raise GoldenError(f"{mpath}: file name {name!r} escapes the golden directory or is not allowed")
    path = root / name
    resolved = path.resolve()
    if resolved.parent != root.resolve():
        raise GoldenError(f"{path}: escapes the golden directory (resolves to {resolved})")
    return path


def _read_tensors(path: Path, data: bytes, fmt: str) -> dict[str, np.ndarray]:
    try:
        if fmt == "safetensors":
            return read_safetensors(path, data)[0]
        return read_npz(path)
    except SafetensorsError as exc:
        raise GoldenError(str(exc)) from None


def _check_tensors(path: Path, case: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, dict]:
    wanted = {
        f"{role}.{name}": (role, name, spec) for role in _ROLES for name, spec in case.get(role, {}).items()
    }
    if set(tensors) != set(wanted):
        raise GoldenError(f"{path}: holds tensors {sorted(tensors)}, the manifest lists {sorted(wanted)}")
    groups: dict[str, dict[str, np.ndarray]] = {role: {} for role in _ROLES}
    for key, (role, name, spec) in wanted.items():
        arr = tensors[key]
        if arr.dtype.name != spec["dtype"] or list(arr.shape) != spec["shape"]:
            raise GoldenError(
                f"{path}: tensor {key} is {arr.dtype.name}{list(arr.shape)}, the manifest says "
                f"{spec['dtype']}{spec['shape']}"
            )
        groups[role][name] = arr
    return groups


def load_golden(path: str | os.PathLike | None = None) -> list[Case]:
    """All cases of a golden directory (default: the shipped set), in manifest order.

    Checks, before returning anything: schema, file names confined to the directory, sha256 of every
    file, file structure and that tensors match the manifest's names, dtypes and shapes. Raises
    :class:`GoldenError` naming the first offending file.
    """
    root, manifest = read_manifest(path)
    mpath = root / MANIFEST
    fmt = manifest["format"]
    blobs = []
    for case in manifest["cases"]:
        fpath = _safe_file(root, case["file"], mpath)
        if not fpath.suffix == FORMATS[fmt]:
            raise GoldenError(f"{fpath}: the manifest's format is {fmt!r} but the file is {fpath.suffix}")
        _check_regular(fpath, f"listed by case {case['id']!r}")
        data = fpath.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != case["sha256"]:
            raise GoldenError(
                f"{fpath}: checksum mismatch (sha256 {digest}, manifest says {case['sha256']}); "
                f"the file is corrupt, truncated or was modified"
            )
        blobs.append((fpath, data))
    cases = []
    for case, (fpath, data) in zip(manifest["cases"], blobs, strict=True):
        groups = _check_tensors(fpath, case, _read_tensors(fpath, data, fmt))
        cases.append(
            Case(
                id=case["id"],
                op=case["op"],
                config=case["config"],
                inputs=groups["inputs"],
                expected=groups["expected"],
                bug_class=case["bug_class"],
                tolerance=case["tolerance"],
                params=dict(case["params"]),
                io_dtype=case["io_dtype"],
                description=case["description"],
                requires=list(case.get("requires", [])),
                aux=groups["aux"],
            )
        )
    return cases


# -- verification ------------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    """Outcome of :func:`verify_golden`: ``problems`` empty means the directory verified."""

    directory: Path
    n_cases: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    worst_ratio: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


_EPS64 = float(np.finfo(np.float64).eps)


def _position_scale(case: Case) -> float:
    """Largest |position| / |distance| of a case (the float64 phase error grows with it)."""
    scale = 0.0
    for name in ("positions", "position_ids", "block_position_ids", "distances"):
        if name in case.inputs and case.inputs[name].size:
            scale = max(scale, float(np.max(np.abs(case.inputs[name]))))
    if case.op == "inv_freq" or case.op == "attention_factor":
        scale = max(scale, 1.0)
    return scale


def regeneration_tolerance(case: Case, expected: np.ndarray) -> np.ndarray:
    """Per-element bound on |stored - recomputed| for ``verify``: float64 rounding, not bit equality.

    ``64 eps (1 + P) max(1, |e|)``: a few ulps of every operation plus the phase error of float64 angles
    up to position ``P`` (libm's cos/sin and pow may differ by an ulp between platforms). The fp16
    emulation may flip one float16 rounding when float64 libm results differ, so it allows 1 fp16 ulp.
    """
    e = np.abs(np.asarray(expected, dtype=np.float64))
    if case.tolerance == "exact":
        return np.zeros_like(e)
    if case.tolerance == "emulation":
        return np.maximum(e * 2.0**-10, 2.0**-24)
    return 64 * _EPS64 * (1.0 + _position_scale(case)) * np.maximum(1.0, e)


def verify_golden(path: str | os.PathLike | None = None) -> VerifyReport:
    """Check a golden directory: schema, checksums, and data against a fresh float64 regeneration.

    Integrity failures raise :class:`GoldenError`. Each case's expected tensors are recomputed from its
    *stored* inputs with the oracle and compared within :func:`regeneration_tolerance`. For the
    built-in catalogue (``provenance.source == "catalogue"``) the case ids, ops and configs must also
    match a fresh :func:`~rope_ref.conformance.catalogue.build_catalogue`, and stored inputs are compared
    with this NumPy's regeneration (a difference is only a note: RNG streams may change between versions).
    """
    from .catalogue import auxiliary, build_catalogue, evaluate

    root, manifest = read_manifest(path)
    cases = load_golden(root)
    report = VerifyReport(directory=root, n_cases=len(cases))
    for case in cases:
        try:
            fresh = evaluate(case.op, case.config, case.inputs, case.params)
            fresh_aux = auxiliary(case.op, case.config, case.inputs, case.params)
        except (ValueError, TypeError, ArithmeticError, RecursionError) as exc:
            report.problems.append(f"{case.id}: the oracle cannot evaluate this case ({exc})")
            continue
        if set(case.aux) != set(fresh_aux):
            report.problems.append(
                f"{case.id}: aux tensors {sorted(case.aux)}, a {case.op} case holds {sorted(fresh_aux)}"
            )
            continue
        checks = [("expected", n, v, fresh[n]) for n, v in case.expected.items()]
        checks += [("aux", n, v, fresh_aux[n]) for n, v in case.aux.items()]
        for role, name, stored, got in checks:
            got = np.asarray(got)
            if got.shape != stored.shape:
                report.problems.append(
                    f"{case.id}: {role}.{name} shape {stored.shape}, regeneration {got.shape}"
                )
                continue
            diff = np.abs(stored.astype(np.float64) - got.astype(np.float64))
            tol = regeneration_tolerance(case, got)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(tol > 0, diff / tol, np.where(diff > 0, np.inf, 0.0))
            worst = float(np.max(ratio)) if ratio.size else 0.0
            report.worst_ratio = max(report.worst_ratio, worst)
            if not np.all(np.isfinite(stored)) or worst > 1.0:
                idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
                report.problems.append(
                    f"{case.id}: {role}.{name}{list(idx)} stored {float(stored[idx])!r} but "
                    f"regeneration gives {float(got[idx])!r} (|diff|/tol = {worst:.3g})"
                )
    if manifest["provenance"]["source"] == "catalogue":
        _compare_catalogue(cases, build_catalogue(), report)
    return report


def _compare_catalogue(stored: list[Case], fresh: list[Case], report: VerifyReport) -> None:
    by_id = {c.id: c for c in fresh}
    stored_ids = [c.id for c in stored]
    missing = [c.id for c in fresh if c.id not in set(stored_ids)]
    extra = [i for i in stored_ids if i not in by_id]
    if missing:
        report.problems.append(
            f"stale golden set: {len(missing)} catalogue case(s) missing, e.g. {missing[:3]}"
        )
    if extra:
        report.problems.append(
            f"stale golden set: {len(extra)} case(s) not in the catalogue, e.g. {extra[:3]}"
        )
    rng_differs = 0
    for case in stored:
        new = by_id.get(case.id)
        if new is None:
            continue
        fields = ("op", "config", "params", "io_dtype", "tolerance", "bug_class", "requires")
        if any(getattr(case, f) != getattr(new, f) for f in fields):
            report.problems.append(
                f"{case.id}: op/config/params/tolerance/requires differ from the current catalogue"
            )
            continue
        for name, arr in case.inputs.items():
            other = new.inputs.get(name)
            if other is None or other.shape != arr.shape or other.dtype != arr.dtype:
                report.problems.append(f"{case.id}: input {name} differs in shape/dtype from the catalogue")
            elif not np.array_equal(other, arr):
                rng_differs += 1
    if rng_differs:
        report.notes.append(
            f"{rng_differs} stored input(s) differ from this NumPy's regeneration; expected if "
            f"NumPy's RNG stream changed (the stored inputs are authoritative)"
        )
