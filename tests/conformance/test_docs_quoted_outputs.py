"""The outputs the docs quote are real: each block marked ``<!-- quoted output of: rope-ref ... -->`` is
checked against the command's output (run from ``docs/examples``), line by line and in order; ``...``
stands for lines left out, and run times (``in 1.35s``) may differ."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from rope_ref.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLES = DOCS / "examples"
_MARK = re.compile(r"<!-- quoted output of: (rope-ref [^\n]*?) -->\n```[a-z]*\n(.*?)\n```", re.S)


def _quoted_blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for m in _MARK.finditer(page.read_text(encoding="utf-8")):
            found.append((page.name, m.group(1), m.group(2)))
    return found


def _normal(line: str) -> str:
    return re.sub(r" in \d+\.\d+s\b", " in <t>s", line.rstrip())


def _in_order(quoted: str, output: str) -> list[str]:
    """The quoted lines not found in ``output`` in order (``...`` skips any number of lines)."""
    lines = [_normal(x) for x in output.splitlines()]
    at, missing = 0, []
    for q in quoted.splitlines():
        if q.strip() == "...":
            continue
        want = _normal(q)
        try:
            at = lines.index(want, at) + 1
        except ValueError:
            missing.append(q)
    return missing


def test_the_guides_mark_their_quoted_outputs():
    assert any(page == "writing-a-backend.md" for page, _, _ in _quoted_blocks())


@pytest.mark.parametrize("page, command, quoted", _quoted_blocks(), ids=lambda v: str(v)[:40])
def test_quoted_output_matches_the_command(page, command, quoted, monkeypatch, capsys):
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLES))])
    sys.modules.pop("minimal_backend", None)
    main(shlex.split(command)[1:])
    out = capsys.readouterr().out
    missing = _in_order(quoted, out)
    assert not missing, f"{page}: quoted lines not in the output of {command!r}:\n" + "\n".join(missing)
    last = [q for q in quoted.splitlines() if q.strip()][-1]
    if last.startswith(("PASSED:", "FAILED:")):  # a quoted verdict is the real last line
        assert _normal(last) == _normal(out.rstrip("\n").splitlines()[-1])
