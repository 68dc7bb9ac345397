"""``--backend path/to/file.py:Class`` (issue 29, point 3): a backend in a file anywhere, one-line errors."""

from __future__ import annotations

import pytest
from rope_ref.conformance.registry import BackendNotFound, get_backend

from rope_ref.cli import main

_FILE = """
from rope_ref.conformance.oracle_backend import OracleBackend


class MyRope(OracleBackend):
    name = "my-rope-port"
"""


def test_a_backend_from_a_file_path(tmp_path, monkeypatch, capsys):
    port = tmp_path / "port"
    port.mkdir()
    (port / "my_rope.py").write_text(_FILE)
    monkeypatch.chdir(tmp_path)
    assert get_backend("port/my_rope.py:MyRope").name == "my-rope-port"
    assert get_backend(f"{port / 'my_rope.py'}:MyRope").name == "my-rope-port"
    argv = ["conformance", "run", "--backend", "port/my_rope.py:MyRope", "-q", "-k", "^apply-layout_half"]
    assert main(argv) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("PASSED:")


@pytest.mark.parametrize(
    "spec, words",
    [
        ("nowhere/missing.py:MyRope", "no such file nowhere/missing.py"),
        ("port/my_rope.py:Nope", "defines no 'Nope'"),
    ],
)
def test_a_missing_file_or_class_is_one_line(tmp_path, monkeypatch, capsys, spec, words):
    (tmp_path / "port").mkdir()
    (tmp_path / "port" / "my_rope.py").write_text(_FILE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BackendNotFound, match=words):
        get_backend(spec)
    assert main(["conformance", "run", "--backend", spec, "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
