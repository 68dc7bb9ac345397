"""Reading a golden directory as untrusted input: bounded, nothing followed, every check before use.

:func:`read_manifest` reads ``manifest.json`` only if it is a regular file inside the directory (never a
symlink, FIFO or device) within ``limits.manifest_bytes``, refusing duplicate keys, and validates it.
:func:`plan_golden` then checks every case's declared sizes against :class:`ReadLimits` and every file's
name, kind and size on disk, before any tensor file is read. :func:`iter_golden` (and
:meth:`GoldenCases.stream`, what ``conformance run`` reads through) then reads the set case by case: a
file is read (checksum streamed while reading, parse bounded by its header) when its case is reached,
once for a run of consecutive cases that list it, and released before the next file is read, so at most
one file's tensors are held at once; :func:`load_golden` returns all cases, checked, in manifest order.
"""

from __future__ import annotations

import copy
import hashlib
import os
import stat
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from .case import Case
from .golden_limits import DEFAULT_LIMITS, GoldenLimitError, ReadLimits, check_declared
from .golden_manifest import _FILE_RE, _ROLES, FORMATS, MANIFEST, GoldenError, parse_json, validate_manifest
from .safetensors_io import SafetensorsError, SizeLimitError, read_npz, read_safetensors

__all__ = [
    "shipped_dir",
    "read_manifest",
    "plan_golden",
    "iter_golden",
    "load_golden",
    "open_golden",
    "GoldenPlan",
    "GoldenCases",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CHUNK = 1 << 20
#: Bytes a safetensors file may hold beyond its tensors' data (8-byte length + header), or an npz
#: beyond its members' data (zip and npy headers), on top of ``limits.header_bytes``.
_NPZ_OVERHEAD = 4096


def shipped_dir() -> Path:
    """The golden set shipped inside the package (``rope_ref/conformance/golden``)."""
    return Path(__file__).resolve().parent / "golden"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symlink (never followed)"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check_regular(path: Path, why: str) -> os.stat_result:
    """``lstat`` of a regular file; refuse a missing file, a symlink, a FIFO or a device."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise GoldenError(f"{path}: missing ({why})") from None
    except OSError as exc:
        raise GoldenError(f"{path}: cannot be read ({exc.strerror}; {why})") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.stat(path)
        except OSError:
            raise GoldenError(f"{path}: a dangling symlink ({why})") from None
        if stat.S_ISREG(target.st_mode):
            raise GoldenError(f"{path}: is a symlink; a golden set's files must be regular files ({why})")
        raise GoldenError(f"{path}: is {_kind(target.st_mode)}, not a regular file ({why})")
    if not stat.S_ISREG(st.st_mode):
        raise GoldenError(f"{path}: is {_kind(st.st_mode)}, not a regular file ({why})")
    return st


def read_bounded(path: Path, size: int, sha256: str | None = None) -> bytearray:
    """The ``size`` bytes of a regular file (opened without following symlinks), hashed while read.

    Raises :class:`GoldenError` if it changed kind or size since ``lstat`` or if its sha256 differs from
    ``sha256``; at most ``size + 1`` bytes are ever held.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError as exc:
        raise GoldenError(f"{path}: cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise GoldenError(f"{path}: changed while being read (not the regular file checked before)")
        buf = bytearray(size)
        view = memoryview(buf)
        digest = hashlib.sha256()
        got = 0
        while got < size:
            n = fh.readinto(view[got : min(size, got + _CHUNK)])
            if not n:
                break
            digest.update(view[got : got + n])
            got += n
        if got != size or fh.read(1):
            raise GoldenError(f"{path}: changed size while being read")
    if sha256 is not None and digest.hexdigest() != sha256:
        raise GoldenError(
            f"{path}: checksum mismatch (sha256 {digest.hexdigest()}, manifest says {sha256}); "
            f"the file is corrupt, truncated or was modified"
        )
    return buf


def read_manifest(
    path: str | os.PathLike | None = None, limits: ReadLimits = DEFAULT_LIMITS
) -> tuple[Path, dict[str, Any]]:
    """``(directory, manifest)`` after bounded reading, JSON parsing and schema validation."""
    root = Path(path) if path is not None else shipped_dir()
    if not root.is_dir():
        raise GoldenError(f"{root}: not a golden directory (no such directory)")
    mpath = root / MANIFEST
    st = _check_regular(mpath, f"a golden directory needs a {MANIFEST}")
    if st.st_size > limits.manifest_bytes:
        raise limits.refuse(str(mpath), "file size", st.st_size, "manifest_bytes", " bytes")
    manifest = parse_json(bytes(read_bounded(mpath, st.st_size)), str(mpath))
    validate_manifest(manifest, str(mpath))
    return root, manifest


@dataclass
class GoldenPlan:
    """A validated manifest whose every case passed the size checks, and its files' sizes on disk."""

    root: Path
    manifest: dict[str, Any]
    paths: list[Path]
    sizes: dict[Path, int]
    limits: ReadLimits


def _safe_file(root: Path, name: str, mpath: Path) -> Path:
    """A case's file, refusing anything that leaves ``root`` (``..``, '/', symlinks)."""
    if not _FILE_RE.match(name) or name in (".", "..") or "/" in name or "\\" in name:
        raise GoldenError(f"{mpath}: file name {name!r} escapes the golden directory or is not allowed")
    path = root / name
    if os.path.islink(path):
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            resolved = None
        if resolved is not None and resolved.parent != root.resolve():
            raise GoldenError(f"{path}: escapes the golden directory (resolves to {resolved})")
    return path


def _max_file_size(case: dict[str, Any], fmt: str, limits: ReadLimits) -> int:
    data = sum(
        np.dtype(spec["dtype"]).itemsize * int(np.prod(spec["shape"], dtype=object))
        for role in _ROLES
        for spec in case.get(role, {}).values()
    )
    n = sum(len(case.get(role, {})) for role in _ROLES)
    if fmt == "safetensors":
        return 8 + limits.header_bytes + data
    return data + n * (_NPZ_OVERHEAD + 2 * len(case["file"])) + _NPZ_OVERHEAD


def plan_golden(path: str | os.PathLike | None = None, limits: ReadLimits = DEFAULT_LIMITS) -> GoldenPlan:
    """Every check that needs no tensor file's content: schema, at least one case, sizes declared
    against ``limits``, file names inside the directory, regular files of plausible size."""
    root, manifest = read_manifest(path, limits)
    mpath = root / MANIFEST
    fmt = manifest["format"]
    if not manifest["cases"]:
        raise GoldenError(f"{mpath}: lists no cases (an empty set verifies nothing)")
    paths, sizes, shas = [], {}, {}
    for case in manifest["cases"]:
        check_declared(str(root), case, limits)
        fpath = _safe_file(root, case["file"], mpath)
        if fpath.suffix != FORMATS[fmt]:
            raise GoldenError(f"{fpath}: the manifest's format is {fmt!r} but the file is {fpath.suffix}")
        if fpath not in sizes:
            size = _check_regular(fpath, f"listed by case {case['id']!r}").st_size
            most = _max_file_size(case, fmt, limits)
            if size > most:
                raise GoldenError(
                    f"{fpath}: file size {size} bytes, but the tensors case {case['id']!r} lists and a "
                    f"header of at most header_bytes = {limits.header_bytes} allow {most} "
                    f"(corrupt or hostile)"
                )
            sizes[fpath] = size
            shas[fpath] = case["sha256"]
        elif shas[fpath] != case["sha256"]:
            raise GoldenError(f"{fpath}: cases list it with different sha256 values (case {case['id']!r})")
        paths.append(fpath)
    # bytes a run reads: each file once per run of consecutive cases that list it (once, in a set we wrote)
    total = sum(sizes[p] for i, p in enumerate(paths) if i == 0 or paths[i - 1] != p)
    if total > limits.run_bytes:
        raise limits.refuse(f"{root}", "bytes of tensor files a run reads", total, "run_bytes", " bytes")
    return GoldenPlan(root, manifest, paths, sizes, limits)


def _read_tensors(path: Path, data: bytes, fmt: str, limits: ReadLimits) -> dict[str, np.ndarray]:
    try:
        if fmt == "safetensors":
            return read_safetensors(path, data, max_header=limits.header_bytes)[0]
        return read_npz(
            path, data, max_member=limits.tensor_bytes + _NPZ_OVERHEAD, max_ratio=limits.npz_ratio
        )
    except SizeLimitError as exc:
        raise GoldenLimitError(
            f"{exc} (limit {exc.limit} = {getattr(limits, exc.limit)}; raise it with --limit {exc.limit}=N "
            f"if you trust this set)"
        ) from None
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


def _case(entry: dict[str, Any], groups: dict[str, dict]) -> Case:
    return Case(
        id=entry["id"],
        op=entry["op"],
        config=copy.deepcopy(entry["config"]),  # nested (a scaling dict): the case's own, like params
        inputs=groups["inputs"],
        expected=groups["expected"],
        bug_class=entry["bug_class"],
        tolerance=entry["tolerance"],
        params=dict(entry["params"]),
        io_dtype=entry["io_dtype"],
        description=entry["description"],
        requires=list(entry.get("requires", [])),
        aux=groups["aux"],
    )


def _read_cases(plan: GoldenPlan, ids: Collection[str] | None = None) -> Iterator[Case]:
    """The cases of ``plan`` (only those whose id is in ``ids``, when given) in manifest order, with their
    tensors. A file is read (checksum streamed, parse bounded) when the first of a run of consecutive such
    cases that list it is reached, and dropped before another file is read; a file that fails its checksum
    or structure raises :class:`GoldenError` naming it when reached."""
    fmt = plan.manifest["format"]
    current: Path | None = None
    tensors: dict[str, np.ndarray] = {}
    for entry, fpath in zip(plan.manifest["cases"], plan.paths, strict=True):
        if ids is not None and entry["id"] not in ids:
            continue
        if fpath != current:
            current, tensors = None, {}  # drop the previous file before reading the next
            data = read_bounded(fpath, plan.sizes[fpath], entry["sha256"])
            tensors = _read_tensors(fpath, data, fmt, plan.limits)
            del data
            current = fpath
        yield _case(entry, _check_tensors(fpath, entry, tensors))


def iter_golden(plan: GoldenPlan, ids: Collection[str] | None = None) -> Iterator[Case]:
    """The cases of ``plan`` (those whose id is in ``ids``, when given) in manifest order, read case by case:
    a file is read when its case (or a run of consecutive cases that list it) is reached, and each case's
    tensors are released (its ``inputs``, ``expected`` and ``aux`` emptied) when the next case is asked
    for, so at most one file's tensors are held at once. Use a case before asking for the next one
    (:func:`load_golden` keeps every case)."""
    for case in _read_cases(plan, ids):
        yield case
        for group in (case.inputs, case.expected, case.aux):
            group.clear()


class GoldenCases(Sequence[Case]):
    """The cases of a planned golden set as headers: every field of each :class:`Case` but its tensors
    (``inputs``, ``expected`` and ``aux`` are empty), enough to select, list and judge applicability.

    :meth:`stream` reads the tensors of the cases to run, case by case (:func:`iter_golden`): what
    ``conformance run`` holds, so that its memory is bounded by one case's file, not by the set.
    """

    def __init__(self, plan: GoldenPlan) -> None:
        self.plan = plan
        self._headers = [_case(entry, {role: {} for role in _ROLES}) for entry in plan.manifest["cases"]]

    def __len__(self) -> int:
        return len(self._headers)

    @overload
    def __getitem__(self, index: int) -> Case: ...
    @overload
    def __getitem__(self, index: slice) -> list[Case]: ...
    def __getitem__(self, index):
        return self._headers[index]

    def stream(self, chosen: Iterable[Case]) -> Iterator[Case]:
        """The cases of ``chosen`` (headers of this set) with their tensors, in manifest order, each
        released when the next is asked for (:func:`iter_golden`)."""
        ids = {case.id for case in chosen}
        unknown = ids - {case.id for case in self._headers}
        if unknown:
            raise ValueError(f"case {sorted(unknown)[0]!r} is not a case of the golden set {self.plan.root}")
        return iter_golden(self.plan, ids)


def open_golden(path: str | os.PathLike | None = None, limits: ReadLimits = DEFAULT_LIMITS) -> GoldenCases:
    """The cases of a golden directory (default: the shipped set) as :class:`GoldenCases`, after every
    check that needs no tensor file's content (:func:`plan_golden`); tensors are read when streamed."""
    return GoldenCases(plan_golden(path, limits))


def load_golden(path: str | os.PathLike | None = None, limits: ReadLimits = DEFAULT_LIMITS) -> list[Case]:
    """All cases of a golden directory (default: the shipped set), in manifest order.

    Checks, before returning anything: schema, sizes against ``limits``, file names confined to the
    directory, sha256 of every file, file structure and that tensors match the manifest's names, dtypes
    and shapes. Raises :class:`GoldenError` naming the first offending file (:class:`GoldenLimitError`
    when a limit, not corruption, stopped it). A file listed by consecutive cases is read once.
    """
    return list(_read_cases(plan_golden(path, limits)))
