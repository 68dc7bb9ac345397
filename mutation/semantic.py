"""Run the hand-written semantic mutants of ``mutation/semantic/`` against the test suite.

Each source module has a list, ``mutation/semantic/<module path>.toml`` (``module``, ``tests`` and
``[[mutant]]`` entries with ``id``, ``kind``, ``sample``, ``what``, ``old``, ``new`` and, for a mutant no
test can tell apart, ``equivalent``). A mutant replaces ``old``, which must occur exactly once in the
module, with ``new``: the realistic mistakes of a developer (a wrong key read from a config, swapped
paired arguments, a validation removed from a helper, an aliasing snapshot), not operator flips.

The project is copied to a scratch directory and the copy is imported (``PYTHONPATH``), never the working
tree. Every mutant first runs against its list's ``tests`` (fast, no xdist); a mutant they do not kill
then runs against the tests folder of the module's room (``tests/oracle`` for ``rope_ref/``,
``tests/conformance``, ``tests/backends``, ``tests/peers``, ``tests/cli`` for ``rope_ref/cli/``), and a
mutant that survives that against the rest of the quick suite (``pytest -x``, the README's command). Killing
by a part of the suite implies killing by the suite, so the score is the suite's. A mutant that
survives the quick suite is reported as surviving, although ``pytest --full`` might still kill it:
the score is a lower bound.

Usage (from the repository root)::

    nice -n 19 python mutation/semantic.py [MODULE ...] [--sample PREFIX] [--id ID] [--subset-only]
        [--json FILE] [--workdir DIR] [--keep] [--jobs N]

Exit status: 0 when every scored module kills at least 95% of its non-equivalent mutants, 1 otherwise,
2 on a usage error, a stale mutant (its ``old`` text not found exactly once) or a failing baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "mutation" / "semantic"
COPIED = (
    "rope_ref", "conformance", "backends", "peers", "tests", "docs", "benchmarks", "mutation", ".ci",
    "README.md", "pyproject.toml", "CHANGELOG.md", "LICENSE",
)
SUBPACKAGES = {"conformance": "conformance", "backends": "backends", "peers": "peers"}
KINDS = frozenset({
    "wrong-key", "swapped-pair", "dropped-check", "aliasing", "dtype", "constant", "off-by-one",
    "wrong-branch", "wrong-axis", "stale-state", "wrong-default", "other",
})
GOAL = 95.0
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")
#: The whole-suite stage leaves out the lists' own integrity tests, which any applied mutant fails.
SUITE = ("--ignore=tests/mutation",)
#: The tests folder of each room (longest prefix first), run between a list's tests and the whole suite.
ROOM_TESTS = (
    ("rope_ref/cli/", "tests/cli"), ("rope_ref/", "tests/oracle"), ("conformance/", "tests/conformance"),
    ("backends/", "tests/backends"), ("peers/", "tests/peers"),
)


def room_tests(module: str) -> str | None:
    """The tests folder that mirrors ``module``'s room, or None for a module outside the rooms."""
    return next((folder for prefix, folder in ROOM_TESTS if module.startswith(prefix)), None)


@dataclass
class Mutant:
    module: str
    id: str
    kind: str
    sample: str
    what: str
    old: str
    new: str
    equivalent: str = ""


@dataclass
class Outcome:
    module: str
    id: str
    kind: str
    sample: str
    what: str
    result: str  # killed | survived | equivalent | stale
    stage: str = ""  # subset | room | suite | timeout
    seconds: float = 0.0
    detail: str = ""


@dataclass
class ModuleList:
    module: str
    tests: list[str]
    mutants: list[Mutant] = field(default_factory=list)


def load_lists(directory: Path = LISTS) -> dict[str, ModuleList]:
    """Every list under ``directory``, checked: known keys and kinds, unique ids, the module exists."""
    lists: dict[str, ModuleList] = {}
    for path in sorted(directory.rglob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        module = data.get("module")
        if not isinstance(module, str) or not (ROOT / module).is_file():
            raise ValueError(f"{path}: module {module!r} is not a file of the project")
        tests = data.get("tests", [])
        if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{path}: tests must be a list of paths, got {tests!r}")
        entry = lists.setdefault(module, ModuleList(module, []))
        entry.tests += [t for t in tests if t not in entry.tests]
        seen = {m.id for m in entry.mutants}
        for raw in data.get("mutant", []):
            unknown = set(raw) - {"id", "kind", "sample", "what", "old", "new", "equivalent"}
            missing = {"id", "kind", "sample", "what", "old", "new"} - set(raw)
            if unknown or missing:
                raise ValueError(f"{path}: mutant {raw.get('id')!r}: unknown keys {sorted(unknown)}, "
                                 f"missing keys {sorted(missing)}")
            if raw["kind"] not in KINDS:
                raise ValueError(
                    f"{path}: mutant {raw['id']!r}: kind {raw['kind']!r} is not one of {sorted(KINDS)}"
                )
            if raw["id"] in seen:
                raise ValueError(f"{path}: mutant id {raw['id']!r} appears twice for {module}")
            if raw["old"] == raw["new"]:
                raise ValueError(f"{path}: mutant {raw['id']!r}: old and new are the same text")
            seen.add(raw["id"])
            entry.mutants.append(Mutant(module=module, **raw))
    return lists


def copy_project(workdir: Path) -> None:
    """The project's files under ``workdir``, laid out as the installed package maps them."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "*.egg-info")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, workdir / name, ignore=ignore, symlinks=True)
        elif src.exists():
            shutil.copy2(src, workdir / name)
    for sub, folder in SUBPACKAGES.items():
        (workdir / "rope_ref" / sub).symlink_to(f"../{folder}")


class Workspace:
    """One scratch copy of the project; mutants are applied to it one at a time."""

    def __init__(self, workdir: Path, timeout: float, room_is_last: bool = False):
        self.root = workdir
        self.timeout = timeout
        self.room_is_last = room_is_last
        copy_project(workdir)
        self.env = dict(os.environ)
        self.env.update({
            "PYTHONPATH": str(workdir),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HYPOTHESIS_STORAGE_DIRECTORY": str(workdir / ".hypothesis"),
        })

    def pytest(self, args: list[str], xdist: bool) -> tuple[int | None, str, float]:
        """Exit status (None on timeout), the output's tail and the seconds it took."""
        cmd = [sys.executable, *PYTEST, *([] if xdist else ["-n", "0"]), *args]
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return None, "", time.monotonic() - start
        return done.returncode, (done.stdout + done.stderr)[-4000:], time.monotonic() - start

    def run(self, mutant: Mutant, tests: list[str], whole: bool, baselines: Baselines) -> Outcome:
        out = Outcome(mutant.module, mutant.id, mutant.kind, mutant.sample, mutant.what, "stale")
        path = self.root / mutant.module
        original = path.read_text(encoding="utf-8")
        count = original.count(mutant.old)
        if count != 1:
            out.detail = f"old text found {count} times in {mutant.module}"
            return out
        if mutant.equivalent:
            out.result, out.detail = "equivalent", mutant.equivalent
            return out
        mutated = original.replace(mutant.old, mutant.new)
        try:
            compile(mutated, mutant.module, "exec")
        except SyntaxError as error:  # a mutant is a plausible edit: one that cannot compile measures nothing
            out.detail = f"the mutated {mutant.module} does not compile: {error.msg} (line {error.lineno})"
            return out
        if tests and not baselines.passes(("list", mutant.module), tests, False, self):
            out.detail = f"{mutant.module}'s tests fail on the unmutated code"
            return out
        path.write_text(mutated, encoding="utf-8")
        try:
            stages = [("subset", tests, False)] if tests else []
            room = room_tests(mutant.module)
            if whole and room is not None:
                stages.append(("room", [room], True))
            if whole and not self.room_is_last:
                skip_room = [f"--ignore={room}"] if room is not None else []  # its folder has just run
                stages.append(("suite", [*SUITE, *skip_room], True))
            out.result = "survived"
            if stages and stages[-1][0] != "suite":
                out.detail = f"(not run against the whole suite; last stage: {stages[-1][0]})"
            for stage, args, xdist in stages:
                if stage != "subset":  # that part's own baseline, once, on the unmutated copy
                    path.write_text(original, encoding="utf-8")
                    ok = baselines.passes((stage, " ".join(args)), args, xdist, self)
                    path.write_text(mutated, encoding="utf-8")
                    if not ok:
                        out.result, out.detail = "stale", f"the unmutated {' '.join(args)} fails"
                        break
                rc, tail, seconds = self.pytest(args, xdist)
                out.seconds += seconds
                if rc is None:
                    out.result, out.stage = "killed", "timeout"
                    break
                if rc == 5:
                    out.result, out.detail = "stale", f"no tests collected by {args}"
                    break
                if rc != 0:
                    out.result, out.stage = "killed", stage
                    out.detail = _first_failure(tail)
                    break
        finally:
            path.write_text(original, encoding="utf-8")
        return out


class Baselines:
    """Whether each list's tests, each room's tests folder and the whole quick suite pass on the unmutated
    code, each run once, the first time a mutant needs it, in the workspace of the worker that asks (unmutated
    then). Keys: ``("list", module)``, ``("room", folder)``, ``("suite", its arguments)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict = {}
        self._done: dict = {}

    def passes(self, key: tuple[str, str], tests: list[str], xdist: bool, space: Workspace) -> bool:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._done:
                rc, tail, _ = space.pytest(tests, xdist)
                self._done[key] = rc == 0
                if rc != 0:
                    kind, name = key
                    what = {"list": f"{name}'s tests", "room": f"the tests in {name}"}.get(kind)
                    what = what or "the quick suite"
                    print(f"baseline: {what} fail on the unmutated code (exit {rc})\n{tail}", flush=True)
            return self._done[key]


def decided_in(output: str, later_stages: bool = False) -> set[str]:
    """``module::id`` of the mutants an earlier run's output reports as killed by their subset (and, with
    ``later_stages``, as killed by a later stage or surviving the whole suite)."""
    decided = set()
    for line in output.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] not in ("killed", "survived"):
            continue
        staged = parts[1].startswith("(")
        if len(parts) < 3 and staged:
            continue
        if parts[0] == "survived" and "not run against the whole suite" in line:
            continue
        if parts[0] == "killed" and parts[1] == "(subset)" or later_stages:
            decided.add(parts[2] if staged else parts[1])
    return decided


def _first_failure(tail: str) -> str:
    for line in tail.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:200]
    return ""


def score(outcomes: list[Outcome]) -> dict[str, dict]:
    """Per module: killed, survived, equivalent, stale and the percentage of non-equivalent killed."""
    table: dict[str, dict] = {}
    for o in outcomes:
        row = table.setdefault(o.module, {"killed": 0, "survived": 0, "equivalent": 0, "stale": 0})
        row[o.result] += 1
    for row in table.values():
        judged = row["killed"] + row["survived"]
        row["percent"] = round(100.0 * row["killed"] / judged, 1) if judged else None
    return table


def markdown(table: dict[str, dict]) -> str:
    lines = [
        "| module | killed | non-equivalent | score | equivalent | stale |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for module, row in sorted(table.items()):
        pct = "-" if row["percent"] is None else f"{row['percent']:.1f}%"
        judged = row["killed"] + row["survived"]
        lines.append(
            f"| `{module}` | {row['killed']} | {judged} | {pct} | {row['equivalent']} | {row['stale']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate, e.g. rope_ref/mrope.py (default: all)")
    parser.add_argument("--sample", default=None, help="only mutants whose sample starts with this text")
    parser.add_argument("--id", action="append", default=[], help="only this mutant id (repeatable)")
    parser.add_argument("--subset-only", action="store_true",
                        help="do not run survivors against the whole suite (quick, while writing tests)")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome to this JSON file")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--jobs", type=int, default=1, help="scratch copies run side by side (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run (default 900)")
    parser.add_argument("--skip-decided", type=Path, default=None,
                        help="an earlier run's output: skip the mutants it reports as killed by their subset "
                        "(with --skip-suite-decided, also those it reports killed or surviving later)")
    parser.add_argument("--room-is-last", action="store_true",
                        help="stop after the room stage (survivors say so; run them again without it)")
    parser.add_argument("--skip-suite-decided", action="store_true",
                        help="with --skip-decided: trust that output's room and suite stages too")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    try:
        lists = load_lists()
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        parser.error(str(exc))
    unknown = [m for m in args.modules if m not in lists]
    if unknown:
        parser.error(f"no list under {LISTS.relative_to(ROOT)} for {unknown}")
    chosen = [lists[m] for m in (args.modules or sorted(lists))]
    work = [
        (entry, m) for entry in chosen for m in entry.mutants
        if (args.sample is None or m.sample.startswith(args.sample)) and (not args.id or m.id in args.id)
    ]
    if args.skip_decided is not None:
        decided = decided_in(args.skip_decided.read_text(encoding="utf-8"), args.skip_suite_decided)
        work = [(entry, m) for entry, m in work if f"{m.module}::{m.id}" not in decided]
    if not work:
        parser.error("no mutant matches the selection")
    base = args.workdir or Path(tempfile.mkdtemp(prefix="rope-ref-semantic-"))
    base.mkdir(parents=True, exist_ok=True)
    if any(base.iterdir()):
        parser.error(f"--workdir {base} must be empty (it receives copies of the project)")
    spaces = []
    for i in range(args.jobs):
        (base / str(i)).mkdir()
        spaces.append(Workspace(base / str(i), args.timeout, args.room_is_last))
    baselines = Baselines()
    outcomes: list[Outcome] = []
    queue = list(work)

    def worker(space: Workspace) -> None:
        while queue:
            entry, mutant = queue.pop(0)
            o = space.run(mutant, entry.tests, not args.subset_only, baselines)
            outcomes.append(o)
            extra = f" ({o.stage})" if o.stage else ""
            print(f"{o.result:10s}{extra:10s} {o.module}::{o.id}  {o.detail}", flush=True)

    try:
        with ThreadPoolExecutor(len(spaces)) as pool:
            list(pool.map(worker, spaces))
    finally:
        if args.keep or args.workdir is not None:
            print(f"scratch copies kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    table = score(outcomes)
    print(markdown(table))
    for o in outcomes:
        if o.result == "survived":
            print(f"survived: {o.module}::{o.id} ({o.kind}): {o.what}")
    if args.json:
        report = {"table": table, "outcomes": [asdict(o) for o in outcomes]}
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if any(o.result == "stale" for o in outcomes):
        return 2
    low = [m for m, row in table.items() if row["percent"] is not None and row["percent"] < GOAL]
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
