"""Helpers for tests that hand rope-ref golden sets from strangers: edit a real set as a hostile source
would (re-signing checksums), and run the CLI in a child with a 1 GiB address-space cap.

The documented exit statuses (``docs/golden-format.md``) are spelled out here, not imported, so the
tests do not take them from the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from rope_ref.cli import main

PASSED, CASE_FAILED, REFUSED, CORRUPT = 0, 1, 2, 3
MEMORY_CAP = 2**30
PRESET = "llama-3.1-8b"
CLI = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"


def make_set(root: Path, fmt: str = "safetensors", preset: str = PRESET, *extra: str) -> Path:
    argv = ["golden", "generate", "--preset", preset, "--format", fmt, *extra, "--out", str(root)]
    assert main(argv) == 0
    return root


def copy_set(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def read_manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def write_manifest(root: Path, manifest: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))


def case_index(manifest: dict, op: str) -> int:
    return next(i for i, c in enumerate(manifest["cases"]) if c["op"] == op)


def resign(root: Path, index: int, data: bytes, manifest: dict | None = None) -> dict:
    """Write ``data`` as case ``index``'s file and record its sha256 in the manifest (as a hostile
    source that controls the whole set would)."""
    manifest = manifest if manifest is not None else read_manifest(root)
    case = manifest["cases"][index]
    (root / case["file"]).write_bytes(data)
    case["sha256"] = hashlib.sha256(data).hexdigest()
    write_manifest(root, manifest)
    return manifest


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_capped(*argv: str, timeout: float = 120, code: str = CLI) -> subprocess.CompletedProcess:
    """``rope-ref ARGV`` in a child limited to 1 GiB of address space."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_cap,
        env=env,
    )


def one_line(err: str) -> str:
    """The single line of an error report (no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]
