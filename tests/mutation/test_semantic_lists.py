"""The hand-written semantic mutants (``mutation/semantic/``) stay applicable, and their runner scores right.

A list whose ``old`` text no longer occurs exactly once in its module would silently stop measuring
anything, so every list is loaded and every mutant is located here, in the quick run. The runner's own
checks (unknown keys, unknown kinds, duplicate ids, a no-op mutant) and its score are tested on lists
written in the test.
"""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def _module_text_and_statements(module: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A module's text and the character span of each top-level statement (decorators included)."""
    text = (ROOT / module).read_text(encoding="utf-8")
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    spans = []
    for node in ast.parse(text).body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        spans.append((line_starts[first - 1], line_starts[node.end_lineno]))
    return text, tuple(spans)


def _mutated_statements(module: str, old: str, new: str) -> str:
    """The whole top-level statements that ``old`` touches, with ``new`` in its place.

    Compiling them alone is as strict as compiling the whole mutated module (a bracket or a quote that
    ``new`` leaves open fails here too) and many times cheaper than compiling the module once per mutant.
    """
    text, spans = _module_text_and_statements(module)
    start = text.index(old)
    end = start + len(old)
    touched = [span for span in spans if span[0] < end and start < span[1]]
    lo = text.rfind("\n", 0, min([start] + [s for s, _ in touched])) + 1
    hi = max([end] + [e for _, e in touched])
    return text[lo:start] + new + text[end:hi]


@pytest.mark.parametrize("opening", ["(", "'''", "[1,"])
def test_the_statement_check_fails_what_a_whole_module_compile_fails(opening):
    module = "rope_ref/positions.py"
    text, spans = _module_text_and_statements(module)
    statement = text[spans[-1][0]:spans[-1][1]]
    line = next(ln for ln in statement.splitlines() if ln.startswith("    ") and ln.strip()[:1].isalpha())
    assert text.count(line) == 1
    with pytest.raises(SyntaxError):
        compile(text.replace(line, line + " " + opening), module, "exec")
    with pytest.raises(SyntaxError):
        compile(_mutated_statements(module, line, line + " " + opening), module, "exec")
    compile(_mutated_statements(module, line, line + "  # " + opening), module, "exec")


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.module}::{m.id}")
def test_each_mutant_applies_exactly_once(mutant):
    text, _ = _module_text_and_statements(mutant.module)
    found = text.count(mutant.old)
    assert found == 1, f"{mutant.module}::{mutant.id}: old text found {found} times"
    # a mutant is a plausible edit, never a syntax error
    compile(_mutated_statements(mutant.module, mutant.old, mutant.new), mutant.module, "exec")


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


class _RecordingSpace(semantic.Workspace):
    """A workspace over a one-module tree whose pytest runs are recorded, not run: each answers the exit
    status ``failing`` gives for (stage's first argument, whether the module is mutated), else 0."""

    def __init__(self, root: Path, failing: dict, room_is_last: bool = False):
        self.root, self.timeout, self.room_is_last = root, 1.0, room_is_last
        self.failing, self.calls, self.args = failing, [], []

    def pytest(self, args, xdist):
        mutated = "MUTATED" in (self.root / "rope_ref" / "m.py").read_text(encoding="utf-8")
        self.calls.append((args[0], xdist, mutated))
        self.args.append(list(args))
        return self.failing.get((args[0], mutated), 0), "FAILED tests/oracle/test_m.py::t\n", 0.5


def _one_module_tree(tmp_path: Path) -> Path:
    (tmp_path / "rope_ref").mkdir()
    (tmp_path / "rope_ref" / "m.py").write_text("LIMIT = 4\n", encoding="utf-8")
    return tmp_path


def _mutant(new: str, mid: str = "limit") -> object:
    return semantic.Mutant("rope_ref/m.py", mid, "constant", "s", "w", "LIMIT = 4", new)


def test_stages_run_subset_room_then_suite_each_after_its_own_baseline(tmp_path):
    space = _RecordingSpace(_one_module_tree(tmp_path), {("tests/oracle", True): 1})
    out = space.run(_mutant("LIMIT = 5  # MUTATED"), ["tests/oracle/test_m.py"], True, semantic.Baselines())
    assert (out.result, out.stage) == ("killed", "room")
    assert out.detail == "FAILED tests/oracle/test_m.py::t"
    assert space.calls == [
        ("tests/oracle/test_m.py", False, False),  # the list's baseline, unmutated, no xdist
        ("tests/oracle/test_m.py", False, True),
        ("tests/oracle", True, False),  # the room's baseline, unmutated, with xdist like the room's run
        ("tests/oracle", True, True),
    ]
    assert (tmp_path / "rope_ref" / "m.py").read_text(encoding="utf-8") == "LIMIT = 4\n"


def test_each_baseline_runs_once_per_list_room_and_suite(tmp_path):
    space = _RecordingSpace(_one_module_tree(tmp_path), {})
    baselines = semantic.Baselines()
    for mid in ("one", "two"):
        out = space.run(_mutant("LIMIT = 3  # MUTATED", mid), ["tests/oracle/test_m.py"], True, baselines)
        assert out.result == "survived" and out.detail == ""
    unmutated = [call for call in space.calls if not call[2]]
    assert unmutated == [("tests/oracle/test_m.py", False, False), ("tests/oracle", True, False),
                         (semantic.SUITE[0], True, False)]
    # the suite stage runs the rest of the quick suite: not the mutation lists, not the room just run
    assert space.args[-1] == [*semantic.SUITE, "--ignore=tests/oracle"]


def test_a_failing_room_baseline_makes_the_mutant_stale_naming_the_folder(tmp_path, capsys):
    space = _RecordingSpace(_one_module_tree(tmp_path), {("tests/oracle", False): 2})
    out = space.run(_mutant("LIMIT = 6  # MUTATED"), ["tests/oracle/test_m.py"], True, semantic.Baselines())
    assert out.result == "stale" and out.detail == "the unmutated tests/oracle fails"
    printed = capsys.readouterr().out
    assert "baseline: the tests in tests/oracle fail on the unmutated code (exit 2)" in printed


def test_room_is_last_stops_before_the_suite_and_says_so(tmp_path):
    space = _RecordingSpace(_one_module_tree(tmp_path), {}, room_is_last=True)
    out = space.run(_mutant("LIMIT = 7  # MUTATED"), ["tests/oracle/test_m.py"], True, semantic.Baselines())
    assert out.result == "survived"
    assert out.detail == "(not run against the whole suite; last stage: room)"
    assert [call[0] for call in space.calls][-1] == "tests/oracle"


def test_a_mutant_that_does_not_compile_is_stale_and_runs_nothing(tmp_path):
    space = _RecordingSpace(_one_module_tree(tmp_path), {})
    out = space.run(_mutant("LIMIT = (4  # MUTATED"), ["tests/oracle/test_m.py"], True, semantic.Baselines())
    assert out.result == "stale" and out.detail.startswith("the mutated rope_ref/m.py does not compile: ")
    assert space.calls == []
