"""The target directory of ``golden generate`` (``conformance/golden_target.py``), at the helpers: what
is ours (listed with its exact sha256 by a valid manifest or the journal), the journal's contents, leftover
staging directories, and signals held during the swap.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading

import pytest
from rope_ref.conformance.golden import write_golden
from rope_ref.conformance.golden_target import (
    JOURNAL_NAME,
    LOCK_NAME,
    is_our_staging,
    owned_files,
    read_journal,
    signals_deferred,
)
from test_golden_build import _case

SHA = "ab" * 32


def test_read_journal_keeps_only_golden_names_with_a_sha256(tmp_path):
    files = {
        "manifest.json": SHA,
        "cos_sin-a.safetensors": SHA,
        "apply-b.npz": "cd" * 32,
        "../escape.safetensors": SHA,
        LOCK_NAME: SHA,
        "notes.txt": SHA,
        "short-sha.safetensors": "ab" * 31,
        "upper-sha.safetensors": SHA.upper(),
        "number-sha.safetensors": 7,
    }
    (tmp_path / JOURNAL_NAME).write_text(json.dumps({"journal_version": 1, "files": files}))
    assert read_journal(tmp_path) == {
        "manifest.json": SHA,
        "cos_sin-a.safetensors": SHA,
        "apply-b.npz": "cd" * 32,
    }


@pytest.mark.parametrize("text", ["not json", '{"files": []}', '{"files": {"a.npz": 1}, "files": {}}'])
def test_a_broken_journal_claims_nothing(tmp_path, text):
    (tmp_path / JOURNAL_NAME).write_text(text)
    assert read_journal(tmp_path) == {}


def test_owned_files_are_the_listed_ones_with_their_exact_sha256(tmp_path):
    root = write_golden(
        [_case("cos_sin-a"), _case("cos_sin-b")], tmp_path / "g", generator="t", source="custom"
    )
    manifest_sha = hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    (root / "cos_sin-b.safetensors").write_bytes(b"edited by the user")
    (root / "stray.safetensors").write_bytes(b"x")
    manifest, owned = owned_files(root, {"stray.safetensors": SHA})
    assert [c["id"] for c in manifest["cases"]] == ["cos_sin-a", "cos_sin-b"]
    assert set(owned) == {"manifest.json", "cos_sin-a.safetensors"}  # b edited, stray's sha is not SHA
    assert owned["manifest.json"] == manifest_sha


def test_a_leftover_staging_directory_is_ours_only_if_it_holds_golden_files(tmp_path):
    staging = tmp_path / "s"
    staging.mkdir()
    (staging / "manifest.json").write_text("{}")
    (staging / "cos_sin-a.safetensors").write_bytes(b"")
    (staging / JOURNAL_NAME).write_text("{}")
    assert is_our_staging(staging)
    (staging / "cos_sin-b.safetensors").mkdir()  # a directory with a golden file's name
    assert not is_our_staging(staging)
    os.rmdir(staging / "cos_sin-b.safetensors")
    (staging / "notes.txt").write_text("mine")
    assert not is_our_staging(staging)
    os.unlink(staging / "notes.txt")
    (staging / "link.npz").symlink_to(staging / "manifest.json")
    assert not is_our_staging(staging)


def test_signals_are_held_during_the_block_and_delivered_after(monkeypatch):
    assert threading.current_thread() is threading.main_thread()
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]  # once, after the block
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_symlinked_target_is_refused_as_a_symlink(tmp_path):
    from rope_ref.conformance.golden_target import GoldenWriteError, prepare_target

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(GoldenWriteError, match="link is a symlink; refusing to follow it"):
        prepare_target(tmp_path / "link")
    prepare_target(tmp_path / "new" / "set")
    assert (tmp_path / "new" / "set").is_dir()
