"""Run cosmic-ray on rope-ref's Python modules, one session per module, in a scratch copy of the project.

Usage (from the repository root, with cosmic-ray installed: ``pip install 'cosmic-ray==8.7.0'``)::

    nice -n 19 python mutation/run.py [MODULE ...] [--sample FRACTION] [--workdir DIR] [--keep]

cosmic-ray edits the module under test in place, so the project is first copied to ``--workdir`` (a
temporary directory by default) and the copy is imported (``PYTHONPATH``), never the working tree. Each
module gets its own config (``mutation/cosmic-ray.toml``: the ``[cosmic-ray]`` section with that
module's ``module-path`` and fast test subset) and session. ``--sample`` keeps a deterministic fraction
of the mutants (by a CRC of ``--salt``, module, operator and occurrence) for quick runs. The score counts
killed and survived mutants, leaving out skipped ones and the accepted equivalents listed in the TOML file.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "mutation" / "cosmic-ray.toml"
COPIED = ("rope_ref", "conformance", "backends", "tests", "docs", "README.md", "pyproject.toml")


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _write_config(path: Path, base: dict, module: str, tests: list[str]) -> None:
    """A cosmic-ray config: the shared [cosmic-ray] settings plus this module's path and tests."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
    lines = [
        "[cosmic-ray]",
        f"module-path = {_toml_value(module)}",
        f"test-command = {_toml_value(shlex.join(cmd))}",
    ]
    tables: list[str] = []

    def emit(prefix: str, table: dict) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                tables.append(f"\n[{prefix}.{key}]")
                emit(f"{prefix}.{key}", value)
            else:
                tables.append(f"{key} = {_toml_value(value)}")

    lines += [f"{k} = {_toml_value(v)}" for k, v in base.items() if not isinstance(v, dict)]
    emit("cosmic-ray", {k: v for k, v in base.items() if isinstance(v, dict)})
    path.write_text("\n".join(lines + tables) + "\n", encoding="utf-8")


def _copy_project(workdir: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, workdir / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, workdir / name)
    # The installed layout maps rope_ref.conformance and rope_ref.backends to top-level folders.
    (workdir / "rope_ref" / "conformance").symlink_to("../conformance")
    (workdir / "rope_ref" / "backends").symlink_to("../backends")


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


def _sample(session: Path, module: str, fraction: float, salt: str = "") -> int:
    """Mark every mutant outside the deterministic sample as skipped; returns how many were kept."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    kept = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            spec = item.mutations[0]
            key = f"{salt}{module}:{spec.operator_name}:{spec.occurrence}"
            if zlib.crc32(key.encode()) % 10_000 < fraction * 10_000:
                kept += 1
            else:
                db.set_result(
                    item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled")
                )
    return kept


def _mutated_line(diff: str | None) -> str:
    """The mutated line as the ``+`` line of the diff shows it; for a mutant that only removes a line (a
    decorator), ``"removed: "`` and the removed line, so an equivalent entry names what was removed."""
    lines = (diff or "").splitlines()
    added = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    if added:
        return added[0]
    removed = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    return "removed: " + removed[0] if removed else ""


def _score(session: Path, module: str, equivalents: list[dict]) -> dict:
    """Counts of killed, survived, accepted-equivalent and skipped mutants, and the survivors' diffs."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    mine = [e for e in equivalents if e["module"] == module]
    accepted = {e["mutant"] for e in mine if "mutant" in e}
    patterns = [re.compile(e["pattern"]) for e in mine if "pattern" in e]

    def equivalent(diff: str | None) -> bool:
        line = _mutated_line(diff)
        return line in accepted or any(p.search(line) for p in patterns)

    out: dict = {"killed": 0, "survived": 0, "equivalent": 0, "skipped": 0, "survivors": []}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                out["skipped"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED and equivalent(result.diff):
                out["equivalent"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                out["survived"] += 1
                spec = item.mutations[0]
                out["survivors"].append(f"# {spec.operator_name} line {spec.start_pos[0]}\n{result.diff}")
            else:  # killed, incompetent (the mutant does not even import), abnormal or timed out
                out["killed"] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all in the TOML file)")
    parser.add_argument("--sample", type=float, default=1.0, help="fraction of mutants to run (0, 1]")
    parser.add_argument("--salt", default="", help="any string: draws a different deterministic sample")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory and sessions")
    parser.add_argument("--show-survivors", action="store_true", help="print the diff of each survivor")
    args = parser.parse_args(argv)
    if not 0 < args.sample <= 1:
        parser.error("--sample must be in (0, 1]")
    settings = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    table = settings["rope-ref"]["modules"]
    equivalents = settings["rope-ref"].get("equivalent", [])
    modules = args.modules or list(table)
    unknown = [m for m in modules if m not in table]
    if unknown:
        parser.error(f"no test subset configured for {unknown}; add them to {CONFIG}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rope-ref-mutation-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        parser.error(f"--workdir {workdir} must be empty (it receives a copy of the project)")
    _copy_project(workdir)
    env = {
        "PYTHONPATH": str(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(workdir),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    bindir = Path(sys.executable).parent
    cr = [str(bindir / "cosmic-ray")]
    status = 0
    try:
        for module in modules:
            config, session = workdir / f"{Path(module).stem}.toml", workdir / f"{Path(module).stem}.sqlite"
            _write_config(config, settings["cosmic-ray"], module, table[module])
            steps = [
                [*cr, "init", str(config), str(session)],
                [str(bindir / "cr-filter-operators"), str(session), str(config)],
            ]
            for step in steps:
                done = _run(step, workdir, env)
                if done.returncode:
                    print(f"{module}: {' '.join(step[:2])} failed\n{done.stdout}{done.stderr}")
                    return 2
            kept = _sample(session, module, args.sample, args.salt) if args.sample < 1 else None
            base = _run([*cr, "baseline", str(config)], workdir, env)
            if base.returncode:
                print(
                    f"{module}: the tests fail on the unmutated code; fix that first\n{base.stdout[-3000:]}"
                )
                status = 2
                continue
            _run([*cr, "exec", str(config), str(session)], workdir, env)
            s = _score(session, module, equivalents)
            judged = s["killed"] + s["survived"]
            pct = 100.0 * s["killed"] / judged if judged else float("nan")
            note = f" (sample {args.sample:g}: {kept} kept)" if kept is not None else ""
            print(
                f"{module}: {s['killed']} killed / {judged} non-equivalent = {pct:.1f}%; "
                f"{s['equivalent']} accepted equivalent, {s['skipped']} skipped{note}"
            )
            if args.show_survivors:
                for diff in s["survivors"]:
                    print(diff)
            if judged and pct < 95.0:
                status = 1
    finally:
        if args.keep or args.workdir is not None:
            print(f"scratch copy and sessions kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
