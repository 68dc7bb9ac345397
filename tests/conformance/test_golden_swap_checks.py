"""What ``golden generate`` checks before it moves anything into an existing set: the kept cases' files
against their sha256, and the staged set read back. Either failing leaves the old set as it was."""

from __future__ import annotations

from pathlib import Path

from _hostile_sets import REFUSED, one_line

from rope_ref.cli import main

A, B = "llama-2-7b", "mistral-7b"


def _gen(out: Path, preset: str) -> int:
    return main(["golden", "generate", "--preset", preset, "--out", str(out)])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_a_kept_file_that_changed_is_refused_naming_it(tmp_path, capsys):
    d = tmp_path / "d"
    assert _gen(d, A) == 0
    victim = sorted(p for p in d.iterdir() if p.suffix == ".safetensors")[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01  # same size, one bit of a tensor changed
    victim.write_bytes(bytes(data))
    before = _snapshot(d)
    capsys.readouterr()
    assert _gen(d, B) == REFUSED
    line = one_line(capsys.readouterr().err)
    assert victim.name in line and "sha256" in line and "--replace" in line
    assert _snapshot(d) == before


def test_a_staged_file_that_does_not_read_back_leaves_the_old_set(tmp_path, capsys, monkeypatch):
    from rope_ref.conformance import golden

    d = tmp_path / "d"
    assert _gen(d, A) == 0
    before = _snapshot(d)
    real = golden._write_new_file

    def flaky_disk(path: Path, data: bytes) -> None:  # a tensor file lands with one bit flipped
        if path.suffix == ".safetensors":
            data = data[:-1] + bytes([data[-1] ^ 0x01])
        real(path, data)

    monkeypatch.setattr(golden, "_write_new_file", flaky_disk)
    capsys.readouterr()
    assert _gen(d, B) != 0
    assert "checksum" in one_line(capsys.readouterr().err)
    assert _snapshot(d) == before


def test_a_staging_look_alike_that_is_not_ours_is_kept(tmp_path):
    """Only leftover staging directories of our own (golden files only) are cleaned up before a write."""
    from rope_ref.conformance.golden_target import STAGING_PREFIX

    d = tmp_path / "d"
    assert _gen(d, A) == 0
    theirs = d / f"{STAGING_PREFIX}notes"
    theirs.mkdir()
    (theirs / "todo.txt").write_text("someone's notes\n")
    assert _gen(d, B) == 0
    assert (theirs / "todo.txt").read_text() == "someone's notes\n"
