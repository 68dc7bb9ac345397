"""`golden generate` into an existing set keeps every case it does not own; replacing needs --replace.

A --preset / --hf-config run owns the cases of its --name; the catalogue owns a catalogue set. Expected
contents come from runs into fresh directories, never from the merging code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hostile_sets import REFUSED, one_line

from rope_ref.cli import build_parser, main

A, B = "llama-2-7b", "llama-3.1-8b"


def _gen(out: Path, preset: str | None, *extra: str) -> int:
    head = ["golden", "generate"] + (["--preset", preset] if preset else [])
    return main([*head, *extra, "--out", str(out)])


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name != "manifest.json"}


def _ids(root: Path) -> list[str]:
    return [c["id"] for c in json.loads((root / "manifest.json").read_text())["cases"]]


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    base = tmp_path_factory.mktemp("merge-refs")
    for name in (A, B):
        assert _gen(base / name, name) == 0
    return {name: base / name for name in (A, B)}


def test_second_model_keeps_the_first_models_cases(tmp_path, refs):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    assert _gen(d, B) == 0
    assert _files(d) == {**_files(refs[A]), **_files(refs[B])}
    assert _ids(d) == _ids(refs[A]) + _ids(refs[B])
    assert main(["golden", "verify", str(d)]) == 0
    generator = json.loads((d / "manifest.json").read_text())["provenance"]["generator"]
    assert f"--preset {A}" in generator and f"--preset {B}" in generator


def test_regenerating_one_model_replaces_only_its_cases(tmp_path, refs):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    assert _gen(d, B) == 0
    assert _gen(d, A, "--ops", "inv_freq") == 0  # A now has one case; B keeps all of its own
    a_only = [i for i in _ids(refs[A]) if i.startswith("inv_freq-")]
    assert sorted(_ids(d)) == sorted(_ids(refs[B]) + a_only)
    stale = set(_files(refs[A])) - {f"{a_only[0]}.safetensors"}
    assert not stale & set(_files(d))
    assert main(["golden", "verify", str(d)]) == 0


def test_same_name_twice_is_idempotent(tmp_path, refs):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    assert _gen(d, A) == 0
    assert _files(d) == _files(refs[A])
    assert (d / "manifest.json").read_bytes() == (refs[A] / "manifest.json").read_bytes()


def test_replace_flag_replaces_the_whole_set(tmp_path, refs):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    assert _gen(d, B, "--replace") == 0
    assert _files(d) == _files(refs[B])


@pytest.mark.parametrize(
    "second",
    [(None, ()), (B, ("--format", "npz"))],
    ids=["catalogue-over-custom", "other-format"],
)
def test_a_run_that_would_drop_cases_is_refused(tmp_path, capsys, refs, second):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    before = _files(d), (d / "manifest.json").read_bytes()
    capsys.readouterr()
    assert _gen(d, second[0], *second[1]) == REFUSED
    line = one_line(capsys.readouterr().err)
    assert "--replace" in line and str(d) in line
    assert (_files(d), (d / "manifest.json").read_bytes()) == before


def _help(*path: str) -> str:
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if a.dest in ("command", "golden_command"))
        parser = action.choices[name]
    return " ".join(parser.format_help().split())


def test_help_texts_say_what_merging_and_positions_do():
    text = _help("golden", "generate")
    assert "--replace" in text and "keeps the others" in text
    assert "(default 0..S-1)" not in text and "precision-revealing" in text


def test_top_level_help_lists_the_exit_statuses():
    text = _help()
    for phrase in ("Exit status: 0 passed", "1 a case failed", "2 usage error", "3 a corrupt", "--limit"):
        assert phrase in text
