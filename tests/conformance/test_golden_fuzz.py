"""A seeded mutator over real golden sets: whatever a hostile source hands over, reading stays bounded.

Real sets (a ``--preset`` set and one case of every op, in safetensors and npz) are mutated as a hostile
source would (tensor bytes, safetensors and npy headers, zip members, manifest values and text, symlinks,
FIFOs, sparse files, shared files), with checksums re-signed most of the time so the mutation reaches the
parsers. Each input is run by ``golden verify`` or ``conformance run`` in one child process capped at
1 GiB of address space, with a per-input time limit; only documented exit statuses, one-line errors, no
traceback and no file opened outside the set are accepted.

200 inputs run by default; ``ROPE_REF_FUZZ=10000`` (or ``ROPE_REF_HYPOTHESIS_PROFILE=stress``) runs
10^4, and ``ROPE_REF_FUZZ_SEED`` picks another seed (to split a long run across processes).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _hostile_sets import CappedCli, Outcome, make_set
from rope_ref.conformance import golden
from shipped_golden import catalogue_cases

STRESS = os.environ.get("ROPE_REF_HYPOTHESIS_PROFILE") == "stress"
N_INPUTS = int(os.environ.get("ROPE_REF_FUZZ", 10_000 if STRESS else 200))
TIME_LIMIT = 10.0
SEED = int(os.environ.get("ROPE_REF_FUZZ_SEED", 28))
DOCUMENTED = (0, 1, 2, 3)

# -- the sets -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz-bases")
    sets = []
    one_per_op = {}
    for case in catalogue_cases():
        one_per_op.setdefault(case.op, case)
    for fmt in ("safetensors", "npz"):
        sets.append(make_set(base / f"preset-{fmt}", fmt))
        sets.append(
            golden.write_golden(
                list(one_per_op.values()), base / f"ops-{fmt}", generator="fuzz", source="custom", fmt=fmt
            )
        )
    return sets


# -- the mutations ----------------------------------------------------------------------------------------

_INTS = [0, 1, -1, 2, 7, 255, 65536, 2**31, 2**32 + 1, 2**40, 2**62, 2**63, 2**64, 10**30]


def _value(rng: random.Random):
    kind = rng.randrange(9)
    if kind < 3:
        return rng.choice(_INTS)
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e308, 3.0])
    if kind == 4:
        return rng.choice(["", "x", "../etc/passwd", "a" * 300, "float64", "F64", "half"])
    if kind == 5:
        return rng.choice([None, True, False])
    if kind == 6:
        return [rng.choice(_INTS) for _ in range(rng.randrange(4))]
    if kind == 7:
        return {}
    return {"rope_type": rng.choice(["linear", "yarn", "dynamic", "longrope", "llama3"]), "factor": 1e6}


def _walk(obj, rng: random.Random, depth: int = 0):
    """A random (container, key) inside ``obj``."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
    elif isinstance(obj, list) and obj:
        key = rng.randrange(len(obj))
    else:
        return None
    child = obj[key]
    if isinstance(child, (dict, list)) and child and rng.random() < 0.7 and depth < 8:
        deeper = _walk(child, rng, depth + 1)
        if deeper is not None:
            return deeper
    return obj, key


def _mutate_json(obj, rng: random.Random) -> None:
    spot = _walk(obj, rng)
    if spot is None:
        return
    container, key = spot
    roll = rng.random()
    if roll < 0.7:
        container[key] = _value(rng)
    elif roll < 0.85 and isinstance(container, dict):
        del container[key]
    elif isinstance(container, dict):
        container[f"{key}_"] = _value(rng)
    elif isinstance(container, list):
        container.append(container[key])


def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _save(root: Path, m: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(m))


def _resign_all(root: Path) -> None:
    with contextlib.suppress(Exception):
        m = _manifest(root)
        for case in m["cases"]:
            p = root / case["file"]
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 2**26:
                case["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
        _save(root, m)


def _tensor_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.iterdir() if p.name != "manifest.json" and p.is_file() and not p.is_symlink()
    )


def _mut_manifest_value(root, rng, outside):
    m = _manifest(root)
    target = m if rng.random() < 0.3 else rng.choice(m["cases"])
    _mutate_json(target, rng)
    _save(root, m)


def _mut_manifest_focused(root, rng, outside):
    m = _manifest(root)
    case = rng.choice(m["cases"])
    roll = rng.randrange(6)
    if roll == 0 and case.get("config"):
        case["config"]["head_dim"] = case["config"]["rotary_dim"] = rng.choice([2, 4096, 65536, 2**40])
    elif roll == 1:
        for spec in case["inputs"].values():
            spec["shape"] = [rng.choice(_INTS[:8]) for _ in spec["shape"]] or [rng.choice(_INTS)]
    elif roll == 2:
        case["params"][rng.choice(["n_new", "seq_len", "cache_position", "spatial_merge_size"])] = rng.choice(
            _INTS
        )
    elif roll == 3:
        other = rng.choice(m["cases"])
        case["file"], case["sha256"] = other["file"], other["sha256"]
    elif roll == 4:
        m["provenance"]["source"] = "catalogue"
    else:
        case["op"] = rng.choice(["cos_sin", "apply", "vision_ids", "mrope_decode_ids", "decay_upper_bound"])
    _save(root, m)


def _mut_manifest_text(root, rng, outside):
    text = (root / "manifest.json").read_bytes()
    roll = rng.randrange(4)
    if roll == 0:
        text = text[: rng.randrange(len(text))]
    elif roll == 1:
        i = rng.randrange(len(text))
        text = text[:i] + bytes([rng.randrange(256)]) + text[i + 1 :]
    elif roll == 2:
        text = text.rstrip()[:-1] + b',"cases":[]}'
    else:
        text = b"[" * 5000 + b"]" * 5000
    (root / "manifest.json").write_bytes(text)


def _mut_bytes(root, rng, outside):
    p = rng.choice(_tensor_files(root))
    data = bytearray(p.read_bytes())
    for _ in range(rng.randrange(1, 6)):
        i = rng.randrange(len(data))
        data[i] = rng.randrange(256)
    if rng.random() < 0.3:
        data = data[: rng.randrange(len(data))]
    p.write_bytes(bytes(data))


def _mut_safetensors_header(root, rng, outside):
    p = rng.choice(_tensor_files(root))
    blob = p.read_bytes()
    if p.suffix != ".safetensors":
        return _mut_npz(root, rng, outside)
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    _mutate_json(header, rng)
    text = json.dumps(header).encode()
    if rng.random() < 0.2:
        name = next(iter(header), "x")
        text = text[:-1] + b',"' + name.encode() + b'":{}}'
    text += b" " * (-len(text) % 8)
    p.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n :])


def _npy_header(shape, descr="<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _mut_npz(root, rng, outside):
    p = rng.choice(_tensor_files(root))
    if p.suffix != ".npz":
        return _mut_safetensors_header(root, rng, outside)
    out = io.BytesIO()
    with zipfile.ZipFile(p) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    victim = rng.randrange(len(members))
    roll = rng.randrange(4)
    with zipfile.ZipFile(out, "w") as dst:
        for k, (name, data) in enumerate(members):
            if k == victim and roll == 0:
                shape = tuple(rng.choice(_INTS[:12]) for _ in range(rng.randrange(1, 3)))
                data = (
                    _npy_header(tuple(abs(s) for s in shape), rng.choice(["<f8", "<i8", "|O", ">f4"]))
                    + data[128:]
                )
            elif k == victim and roll == 1:
                info = zipfile.ZipInfo(name)
                info.compress_type = zipfile.ZIP_DEFLATED
                dst.writestr(info, _npy_header((2**20,)) + bytes(2**23))
                continue
            elif k == victim and roll == 2:
                dst.writestr(name, data)
            dst.writestr(name, data)
    p.write_bytes(out.getvalue())


def _mut_filesystem(root, rng, outside):
    files = _tensor_files(root)
    p = rng.choice(files + [root / "manifest.json"])
    roll = rng.randrange(5)
    p.unlink()
    if roll == 0:
        p.symlink_to(outside)
    elif roll == 1:
        p.symlink_to(rng.choice(files).name if files else "x")
    elif roll == 2:
        os.mkfifo(p)
    elif roll == 3:
        p.mkdir()
    else:
        p.symlink_to("/dev/zero")


def _mut_sparse(root, rng, outside):
    p = rng.choice(_tensor_files(root) + [root / "manifest.json"])
    os.truncate(p, rng.choice([2**31, 2**33, 10**10]))


def _mut_share_file(root, rng, outside):
    m = _manifest(root)
    first = m["cases"][0]
    for case in m["cases"]:
        case["file"], case["sha256"] = first["file"], first["sha256"]
    _save(root, m)


MUTATIONS = [
    (_mut_manifest_value, 6),
    (_mut_manifest_focused, 5),
    (_mut_manifest_text, 2),
    (_mut_bytes, 4),
    (_mut_safetensors_header, 5),
    (_mut_npz, 4),
    (_mut_filesystem, 1),
    (_mut_sparse, 1),
    (_mut_share_file, 1),
]


#: Mutations that leave files the mutator itself must not read again (FIFOs, symlinks, sparse files):
#: applied after every content mutation and after re-signing.
LAST = (_mut_filesystem, _mut_sparse)


def _mutate(root: Path, rng: random.Random, outside: Path) -> list[str]:
    names, weights = zip(*MUTATIONS, strict=True)
    chosen = [rng.choices(names, weights)[0] for _ in range(rng.choice([1, 1, 2, 3]))]
    chosen.sort(key=lambda fn: fn in LAST)
    resign = rng.random() < 0.85
    done = []
    for fn in chosen:
        if fn in LAST and resign:
            _resign_all(root)
            resign = False
        with contextlib.suppress(Exception), warnings.catch_warnings():  # a mutation may not apply
            warnings.simplefilter("ignore")
            fn(root, rng, outside)
            done.append(fn.__name__)
    if resign:
        _resign_all(root)
    return done


# -- the run ----------------------------------------------------------------------------------------------


def _problem(reply: Outcome) -> str | None:
    if reply.crash:
        return f"uncaught exception {reply.crash}"
    if reply.returncode is None:
        return reply.stderr
    if reply.returncode not in DOCUMENTED:
        return f"exit status {reply.returncode!r} is not documented"
    if "Traceback" in reply.stderr:
        return "a traceback"
    if reply.returncode in (2, 3):
        lines = [ln for ln in reply.stderr.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("rope-ref"):
            return f"not one error line: {reply.stderr[:500]!r}"
    if reply.outside:
        return f"opened files outside the set: {reply.outside}"
    if reply.secs > TIME_LIMIT:
        return f"took {reply.secs:.1f} s"
    return None


@pytest.mark.slow
def test_mutated_sets_give_documented_outcomes_only(tmp_path, bases):
    outside = tmp_path / "outside.json"
    outside.write_text('{"secret": 1}')
    rng = random.Random(SEED)
    child = CappedCli(tmp_path, bases)
    seen: dict[int, int] = {}
    try:
        for i in range(N_INPUTS):
            work = tmp_path / "work" / f"in{i % 2}"
            if work.exists():
                shutil.rmtree(work)
            base = rng.choice(bases)
            shutil.copytree(base, work)
            done = _mutate(work, rng, outside)
            argv = ["golden", "verify", str(work)]
            if rng.random() < 0.2:
                argv = ["conformance", "run", "--backend", "numpy", "-q", "--golden", str(work)]
            reply = child.run(*argv, directory=work, timeout=TIME_LIMIT)
            problem = _problem(reply)
            if problem is not None:
                kept = tmp_path / "failing-input"
                shutil.copytree(work, kept, symlinks=True)
                pytest.fail(f"input {i} ({base.name}, {done}, {argv[:2]}): {problem}; the set is in {kept}")
            seen[reply.returncode] = seen.get(reply.returncode, 0) + 1
            if child.proc.poll() is not None:
                pytest.fail(f"input {i}: the child exited")
    finally:
        child.close()
    assert seen.get(3, 0) > N_INPUTS // 10, seen  # the mutator does reach the checks
