"""The hand-written semantic mutants (``mutation/semantic/``) stay applicable, and their runner scores right.

A list whose ``old`` text no longer occurs exactly once in its module would silently stop measuring
anything, so every list is loaded and every mutant is located here, in the quick run. The runner's own
checks (unknown keys, unknown kinds, duplicate ids, a no-op mutant) and its score are tested on lists
written in the test.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runner():
    spec = importlib.util.spec_from_file_location("semantic_mutants", ROOT / "mutation" / "semantic.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


semantic = _runner()
LISTS = semantic.load_lists()
MUTANTS = [m for entry in LISTS.values() for m in entry.mutants]


def test_lists_exist_for_the_modules_the_issue_names():
    assert MUTANTS, "no semantic mutant lists under mutation/semantic/"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.module}::{m.id}")
def test_each_mutant_applies_exactly_once(mutant):
    text = (ROOT / mutant.module).read_text(encoding="utf-8")
    found = text.count(mutant.old)
    assert found == 1, f"{mutant.module}::{mutant.id}: old text found {found} times"
    mutated = text.replace(mutant.old, mutant.new)
    compile(mutated, mutant.module, "exec")  # a mutant is a plausible edit, never a syntax error


@pytest.mark.parametrize("entry", list(LISTS.values()), ids=lambda e: e.module)
def test_each_lists_tests_exist(entry):
    missing = [t for t in entry.tests if not t.startswith("-") and not (ROOT / t.split("::")[0]).exists()]
    assert not missing, f"{entry.module}: test paths that do not exist: {missing}"


def _write(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "m.toml").write_text('module = "rope_ref/positions.py"\ntests = []\n' + body, encoding="utf-8")
    return folder


ENTRY = '[[mutant]]\nid = "{id}"\nkind = "{kind}"\nsample = "s"\nwhat = "w"\nold = "{old}"\nnew = "{new}"\n'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (ENTRY.format(id="a", kind="typo-kind", old="x", new="y"), "kind 'typo-kind'"),
        (ENTRY.format(id="a", kind="constant", old="x", new="y") * 2, "appears twice"),
        (ENTRY.format(id="a", kind="constant", old="x", new="x"), "old and new are the same"),
        (ENTRY.format(id="a", kind="constant", old="x", new="y") + 'extra = "1"\n', "unknown keys ['extra']"),
        ('[[mutant]]\nid = "a"\nkind = "constant"\n', "missing keys ['new', 'old', 'sample', 'what']"),
    ],
)
def test_bad_lists_are_refused_naming_the_problem(tmp_path, body, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        semantic.load_lists(_write(tmp_path, body))


def test_a_list_for_a_missing_module_is_refused(tmp_path):
    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "m.toml").write_text('module = "rope_ref/no_such_module.py"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="no_such_module.py"):
        semantic.load_lists(folder)


def test_score_leaves_equivalent_and_stale_mutants_out_of_the_percentage():
    def outcome(module, result):
        return semantic.Outcome(module, "i", "constant", "s", "w", result)

    outcomes = [outcome("a.py", "killed")] * 19 + [outcome("a.py", "survived")]
    outcomes += [outcome("a.py", "equivalent"), outcome("a.py", "stale"), outcome("b.py", "equivalent")]
    table = semantic.score(outcomes)
    assert table["a.py"] == {"killed": 19, "survived": 1, "equivalent": 1, "stale": 1, "percent": 95.0}
    assert table["b.py"]["percent"] is None
    assert "| `a.py` | 19 | 20 | 95.0% | 1 | 1 |" in semantic.markdown(table)


@pytest.mark.parametrize(
    ("module", "folder"),
    [
        ("rope_ref/cli/table.py", "tests/cli"),
        ("rope_ref/rotation.py", "tests/oracle"),
        ("conformance/golden.py", "tests/conformance"),
        ("backends/_torch_core.py", "tests/backends"),
        ("peers/zoo.py", "tests/peers"),
        ("mutation/semantic.py", None),
    ],
)
def test_room_stage_runs_the_tests_folder_of_the_modules_room(module, folder):
    assert semantic.room_tests(module) == folder


def test_an_earlier_runs_decisions_are_read_per_stage():
    output = "\n".join([
        "killed     (subset)  rope_ref/a.py::one  FAILED tests/oracle/test_a.py::t",
        "killed     (room)    rope_ref/a.py::two  FAILED tests/oracle/test_b.py::t",
        "killed     (suite)   rope_ref/b.py::three  FAILED tests/cli/test_c.py::t",
        "survived             rope_ref/b.py::four  ",
        "survived             rope_ref/b.py::six  (not run against the whole suite; last stage: room)",
        "equivalent           rope_ref/b.py::five  a reason",
        "baseline: the quick suite fail on the unmutated code (exit 1)",
        "| `rope_ref/a.py` | 2 | 2 | 100.0% | 0 | 0 |",
    ])
    assert semantic.decided_in(output) == {"rope_ref/a.py::one"}
    later = {"rope_ref/a.py::one", "rope_ref/a.py::two", "rope_ref/b.py::three", "rope_ref/b.py::four"}
    assert semantic.decided_in(output, later_stages=True) == later
