"""Helpers for tests that hand rope-ref golden sets from strangers: edit a real set as a hostile source
would (re-signing checksums), and run the CLI in a child with a 1 GiB address-space cap.

The documented exit statuses (``docs/golden-format.md``) are spelled out here, not imported, so the
tests do not take them from the code under test.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
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


# -- one long-lived capped child for many runs -----------------------------------------------------------

_SERVER = textwrap.dedent(
    """
    import contextlib, io, json, os, sys, time
    from rope_ref.cli import main

    for d in sys.argv[1:]:  # import everything a run may need before the audit hook starts watching
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["golden", "verify", d])
            main(["conformance", "run", "--backend", "numpy", "-q", "--golden", d])
    current = [None]
    outside = []
    MODULE = (".py", ".pyc", ".so", ".pth")

    def hook(event, args):
        if event != "open" or current[0] is None:
            return
        path = args[0]
        if isinstance(path, int):
            return
        path = os.fsdecode(path)
        full = os.path.realpath(os.path.abspath(path))
        if full.startswith(current[0] + os.sep) or full == current[0] or path.endswith(MODULE):
            return
        if "__pycache__" in path:
            return
        outside.append(path)

    sys.addaudithook(hook)
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        current[0] = os.path.realpath(job["dir"]) if job["dir"] else None
        outside.clear()
        out, err = io.StringIO(), io.StringIO()
        start = time.monotonic()
        crash = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(job["argv"])
            except SystemExit as exc:
                code = exc.code
            except BaseException as exc:
                code, crash = None, f"{type(exc).__name__}: {exc}"[:500]
        current[0] = None
        reply = {"code": code, "err": err.getvalue()[-4000:], "crash": crash, "outside": outside[:5],
                 "secs": time.monotonic() - start}
        print(json.dumps(reply), flush=True)
    """
)


@dataclass
class Outcome:
    """One ``rope-ref ARGV`` run by :class:`CappedCli`: ``returncode`` is None when main() raised (``crash``)
    or the child gave no answer in time (it is then restarted)."""

    returncode: int | None
    stderr: str
    crash: str | None = None
    outside: list[str] = field(default_factory=list)
    secs: float = 0.0


class CappedCli:
    """``rope-ref`` in one long-lived child capped at ``MEMORY_CAP`` of address space: each :meth:`run` is a
    call of ``rope_ref.cli.main`` there, without starting an interpreter. ``warm`` sets are verified and run
    once first, so that every module is imported before the audit hook records files opened outside
    ``directory``."""

    def __init__(self, script_dir: Path, warm: list[Path] = (), start_timeout: float = 120):
        self._script = Path(script_dir) / "capped_cli_server.py"
        self._script.write_text(_SERVER)
        self._warm = [str(w) for w in warm]
        self._start_timeout = start_timeout
        self._start()

    def _start(self) -> None:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(self._script), *self._warm],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=_cap,
            env=env,
        )
        assert self._line(self._start_timeout) == "ready"

    def _line(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline().strip() or None

    def run(self, *argv: str, directory: Path | None = None, timeout: float = 120) -> Outcome:
        self.proc.stdin.write(json.dumps({"dir": str(directory) if directory else None, "argv": argv}) + "\n")
        self.proc.stdin.flush()
        line = self._line(timeout)
        if line is None:
            self.close()
            self._start()
            return Outcome(None, f"no answer within {timeout} s (or the child died)")
        reply = json.loads(line)
        err = reply["err"] if reply["crash"] is None else f"Traceback: {reply['crash']}\n{reply['err']}"
        return Outcome(reply["code"], err, reply["crash"], reply["outside"], reply["secs"])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
