"""The README's Python examples run as written (the quickstart is the first thing a user copies)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

import rope_ref

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_quickstart_runs_and_agrees_with_itself():
    quickstart = python_blocks()[0]
    assert len(quickstart.strip().splitlines()) <= 10
    scope = {"my_rope": lambda x, p: rope_ref.apply(x, p, rope_ref.RopeConfig(128, layout="half"))}
    exec(quickstart, scope)
    assert scope["y"].shape == (1, 16, 8, 128) and scope["cos"].shape == (16, 1, 64)


def test_scaling_example_runs(tmp_path, monkeypatch):
    config = {"rope_theta": 10000.0, "hidden_size": 4096, "num_attention_heads": 32,
              "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    scope = {"rope_ref": rope_ref, "np": np}  # the block imports json itself
    exec(python_blocks()[1], scope)
    assert scope["cfg"] == rope_ref.preset("qwen2.5-7b-yarn")
