"""A `golden generate` killed with SIGKILL at any step of its swap is repaired by running it again.

The writer kills itself (``ROPE_REF_GOLDEN_KILL_AT_RENAME=k``) just before step k of the swap: step 1
moves the journal in, then one step per file, then the manifest, then the clean-up (stale files and the
journal). Every boundary is forced, in a fresh directory, over another model's set (``--replace``) and
while merging into it; re-running the same command, with no manual deletion, must give exactly the set
an uninterrupted run gives, and ``verify`` must pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _hostile_sets import CLI, PRESET

from rope_ref.cli import main

OLD = "llama-2-7b"
KILL = "ROPE_REF_GOLDEN_KILL_AT_RENAME"
N_STEPS = 8  # journal + 5 case files + manifest + clean-up, for a --preset set of 5 cases


def _argv(out: Path, preset: str = PRESET, *extra: str) -> list[str]:
    return ["golden", "generate", "--preset", preset, *extra, "--out", str(out)]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


def _killed_run(argv: list[str], step: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{KILL: str(step)})
    return subprocess.run(
        [sys.executable, "-c", CLI, *argv], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    base = tmp_path_factory.mktemp("repair-refs")
    out = {}
    assert main(_argv(base / "new")) == 0
    out["new"] = _snapshot(base / "new")
    assert main(_argv(base / "old", OLD)) == 0
    out["old"] = _snapshot(base / "old")
    assert main(_argv(base / "merged", OLD)) == 0
    assert main(_argv(base / "merged")) == 0
    out["merged"] = _snapshot(base / "merged")
    return out


def _kill_points():
    """Every (start, step); one of them, a kill between two file renames over another model's set, also
    in the quick run, the rest in ``pytest --full``."""
    for start in ("empty", "replace", "merge"):
        for step in range(1, N_STEPS + 1):
            marks = () if (start, step) == ("replace", 3) else (pytest.mark.slow,)
            yield pytest.param(start, step, marks=marks, id=f"{start}-{step}")


@pytest.mark.parametrize(("start", "step"), list(_kill_points()))
def test_kill_at_every_swap_step_is_repaired_by_rerunning(tmp_path, refs, start, step):
    d = tmp_path / "d"
    extra = ("--replace",) if start == "replace" else ()
    if start != "empty":
        assert main(_argv(d, OLD)) == 0
    proc = _killed_run(_argv(d, PRESET, *extra), step)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    assert main(_argv(d, PRESET, *extra)) == 0  # the same command, nothing deleted by hand
    assert _snapshot(d) == refs["merged" if start == "merge" else "new"]
    assert not [p.name for p in d.iterdir() if p.name.startswith(".")]
    assert main(["golden", "verify", str(d)]) == 0


def test_a_first_write_stopped_after_the_journal_is_repaired_in_process(tmp_path, monkeypatch, capsys):
    """A write into an empty directory that stops after step 3 (the journal and two case files moved in, no
    manifest yet) leaves the journal there: it is ours, not a foreign file, so re-running the same command
    without --force completes the set."""
    from rope_ref.conformance import golden

    real = golden._rename

    def crash_after_three(src: Path, dst: Path, count: list[int]) -> None:
        if count[0] == 3:
            raise OSError("simulated crash in the middle of the swap")
        real(src, dst, count)

    d = tmp_path / "d"
    monkeypatch.setattr(golden, "_rename", crash_after_three)
    assert main(_argv(d)) != 0
    assert "simulated crash" in capsys.readouterr().err
    monkeypatch.setattr(golden, "_rename", real)
    left = {p.name for p in d.iterdir()}
    assert golden.JOURNAL_NAME in left and golden.MANIFEST not in left
    assert len(left - {golden.JOURNAL_NAME, golden.LOCK_NAME}) == 2
    assert main(_argv(d)) == 0  # no --force: the journal does not make the directory foreign
    assert main(_argv(tmp_path / "clean")) == 0
    assert _snapshot(d) == _snapshot(tmp_path / "clean")
    assert main(["golden", "verify", str(d)]) == 0


def test_the_kill_hook_reaches_every_step(tmp_path):
    """Past the last step the hook never fires: the run completes (so N_STEPS covers the whole swap)."""
    d = tmp_path / "d"
    proc = _killed_run(_argv(d), N_STEPS + 1)
    assert proc.returncode == 0, proc.stderr
    proc = _killed_run(_argv(tmp_path / "e"), N_STEPS)
    assert proc.returncode == -signal.SIGKILL
