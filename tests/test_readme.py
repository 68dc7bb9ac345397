"""The README's Python examples run as pasted (the Quickstart is the first thing a user copies)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

import rope_ref

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def quickstart() -> list[str]:
    """The python blocks of the Quickstart section, in order."""
    text = README.read_text()
    section = text[text.index("## Quickstart") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def _needs_axes() -> None:
    assert "axes" in inspect.signature(rope_ref.apply).parameters  # the Quickstart is written against it


def test_quickstart_runs_as_pasted():
    _needs_axes()
    first, check, bug = quickstart()[:3]
    scope: dict = {}
    exec(first, scope)  # a fresh namespace: the block imports what it uses
    q, ids, cfg = scope["q"], scope["position_ids"], scope["cfg"]
    assert scope["y"].shape == q.shape == (2, 8, 16, 128) and scope["cos"].shape == (2, 16, 64)
    # Independent check of axes="bhsd": rotate each (batch, seq) slice with its scalar position.
    for b, s in [(0, 0), (1, 15), (1, 3)]:
        np.testing.assert_allclose(
            scope["y"][b, :, s], rope_ref.apply(q[b, :, s], float(ids[b, s]), cfg), atol=1e-13
        )
    exec(check, scope)  # the correct HF-style function passes

    with pytest.raises(AssertionError) as info:
        exec(bug, scope)
    shown = next(b for b in blocks("text") if b.startswith("AssertionError"))
    got = "AssertionError: " + str(info.value)
    shown_lines, got_lines = shown.strip().splitlines(), got.strip().splitlines()
    assert got_lines[0] == shown_lines[0]
    assert (
        "most resembles: positions quantised to bfloat16" in got
        and "most resembles: positions quantised to bfloat16" in shown
    )
    assert got_lines[-1] == shown_lines[-1]
    assert re.search(r"\d+ of 32768 elements out of tolerance", got_lines[1])


def test_quickstart_check_is_needed():
    # The README's claim: a fixed atol of 1e-6 fails the correct float32 function at these positions.
    _needs_axes()
    first, check = quickstart()[:2]
    scope: dict = {}
    exec(first + check, scope)
    q32, ids, cfg = scope["q32"], scope["position_ids"], scope["cfg"]
    err = np.abs(scope["apply_rotary_pos_emb"](q32, ids) - rope_ref.apply(q32, ids, cfg, axes="bhsd")).max()
    assert 1e-6 < err < 1e-3


def test_scaling_example_runs(tmp_path, monkeypatch):
    config = {
        "rope_theta": 10000.0,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    block = next(b for b in blocks("python") if "from_hf" in b)
    scope = {"rope_ref": rope_ref, "np": np}  # the block imports json itself
    exec(block, scope)
    assert scope["cfg"] == rope_ref.preset("qwen2.5-7b-yarn")


def test_install_advice_names_the_ci_torch():
    text = README.read_text()
    assert 'pip install -e ".[test,torch]" && rope-ref conformance run --backend torch' in text
    assert "torch==2.13.0" in text and "CPU-only wheel index" in text


def test_every_doc_reference_exists():
    root = README.parent
    for doc in [README, *sorted((root / "docs").glob("*.md"))]:
        for ref in re.findall(r"`(docs/[\w./-]+\.md|LICENSE)`", doc.read_text()):
            assert (root / ref).exists(), f"{doc.name} points at missing {ref}"


@pytest.mark.slow
def test_the_two_commands_run_as_written():
    """The README's main job and test command: the extras it installs exist, and the job it runs passes.

    (The install itself is what ``.ci/run`` does in a fresh virtual environment.)
    """
    import shlex
    import subprocess
    import sys

    import tomllib

    root = README.parent
    bash = blocks("bash")
    main_job = next(b.strip() for b in bash if b.strip().startswith("pip install -e"))
    install, run = (part.strip() for part in main_job.split("&&"))
    extras = re.search(r'"\.\[([^]]+)\]"', install).group(1).split(",")
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) <= set(declared), extras
    assert any(b.strip() == "pytest" for b in bash)
    argv = shlex.split(run)
    assert argv[:3] == ["rope-ref", "conformance", "run"]
    if "torch" in argv:
        pytest.importorskip("torch")
    code = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
