"""``rope-ref conformance run``: check a backend against the golden vectors, report, set the exit code;
``rope-ref conformance judge``: the same for outputs another program wrote (:mod:`.judge`).

Exit status: 0 when no case failed, 1 when at least one failed, 2 for usage errors (unknown backend,
``-k`` matching nothing, unreadable xfail file) and a golden set over a ``--limit``, 3 for a corrupt,
malformed or hostile golden set (``docs/golden-format.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import threading

__all__ = ["add_arguments", "run", "MAX_TIMEOUT"]

#: Longest per-case timeout accepted (one day; ``threading`` cannot wait much longer than ~292 years).
MAX_TIMEOUT = 86400.0

# Every spelling of a precision -> the short name backends take.
_SHORT = {
    "fp64": "fp64",
    "fp32": "fp32",
    "fp16": "fp16",
    "bf16": "bf16",
    "float64": "fp64",
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
}


def _check_timeout(value: float | None) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0 or value > min(MAX_TIMEOUT, threading.TIMEOUT_MAX):
        raise ValueError(f"--timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {value!r}")
    return value


def _check_report_path(path: str, flag: str) -> None:
    """Refuse, before the run, a report path that cannot be written (so the verdict is never lost)."""
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path}: is a directory")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError(f"{flag} {path}: exists and is not a regular file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {path}: directory {parent} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path}: not writable")
    try:  # a real write probe: os.access says yes to root even on a read-only file system
        fd, probe = tempfile.mkstemp(prefix=".rope-ref-probe-", dir=parent)
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write in {parent} ({exc.strerror})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="conformance_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "run",
        help="run the conformance suite against a backend",
        description="Run the golden-vector conformance suite against a backend and report per case.",
    )
    p.add_argument(
        "--backend",
        required=True,
        help="built-in name (numpy, torch, torch:cuda, cupy, array-api:<module>), module:attr, "
        "path/to/file.py:Class, or a name registered in the 'rope_ref.backends' entry-point group",
    )
    _common_arguments(p)
    p.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="per-case timeout in seconds (default 60)"
    )
    p.set_defaults(_conformance=_run)
    j = sub.add_parser(
        "judge",
        help="judge outputs written by another program (a C/C++/Rust port) against a golden set",
        description="Judge the outputs a program wrote (one <case id>.safetensors or .npz per case, "
        "docs/golden-format.md) with the tolerance model, report and exit statuses of 'run'.",
    )
    j.add_argument("--outputs", required=True, metavar="DIR", help="directory of the program's outputs")
    _common_arguments(j)
    for flag in ("--angle-dtype", "--compute-dtype"):
        j.add_argument(
            flag,
            default=None,
            choices=("float64", "float32", "float16", "bfloat16"),
            help=f"{flag[2:].replace('-', ' ')} the port used (default: float64 for fp64, else float32)",
        )
    j.set_defaults(_conformance=_run)


def _common_arguments(p: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``judge`` share."""
    from .cli_golden import add_limit_argument

    p.add_argument(
        "--precision",
        default=None,
        choices=tuple(_SHORT),
        metavar="{fp64,fp32,fp16,bf16}",
        help="precision policy to ask the backend for (default: the backend's own); float64, float32, "
        "float16 and bfloat16 are accepted too",
    )
    p.add_argument(
        "--golden", default=None, metavar="DIR", help="golden directory (default: the shipped set)"
    )
    p.add_argument(
        "-k", dest="select", default=None, metavar="REGEX", help="run only case ids matching REGEX"
    )
    p.add_argument(
        "--xfails", default=None, metavar="FILE", help="expected failures: 'CASE_ID reason' per line"
    )
    p.add_argument("--json-report", default=None, metavar="F", help="write a JSON report to F")
    p.add_argument("--junit-xml", default=None, metavar="F", help="write a JUnit XML report to F")
    add_limit_argument(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument("--list", action="store_true", help="list the selected case ids and exit")
    p.add_argument(
        "--require-all",
        action="store_true",
        help="fail the run (exit 1) when any applicable case is unsupported by the backend",
    )


def run(args: argparse.Namespace) -> int:
    return int(args._conformance(args) or 0)


def _load_xfails(loader, path: str) -> dict[str, str]:
    """``loader(path)`` for a regular file only (a FIFO would block), absurd JSON nesting refused."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"--xfails {path}: not a regular file")
    try:
        return loader(path)
    except RecursionError:
        raise ValueError(f"--xfails {path}: JSON nested too deeply") from None


def _load_cases(golden: str | None, limits=None):
    """The cases' headers; their tensors are read case by case while they run (bounded memory)."""
    try:
        from .golden import DEFAULT_LIMITS, open_golden
    except ImportError as exc:  # pragma: no cover - only while the golden module is missing
        raise ValueError(f"the golden-vector loader is not available: {exc}") from None
    return open_golden(golden, limits or DEFAULT_LIMITS)


def _golden_refused(exc: BaseException, golden: str | None, err) -> int:
    """Report a golden set refused while planned or read (one line) and return its exit status."""
    from .cli_golden import EXIT_CORRUPT, EXIT_REFUSED
    from .golden import GoldenLimitError

    if isinstance(exc, MemoryError):
        print(f"rope-ref conformance: error: {golden}: out of memory reading the golden set", file=err)
        return EXIT_CORRUPT
    print(f"rope-ref conformance: error: {' '.join(str(exc).split())}", file=err)
    return EXIT_REFUSED if isinstance(exc, GoldenLimitError) else EXIT_CORRUPT


def _run(args: argparse.Namespace) -> int:
    from .registry import BackendNotFound, BackendUnavailable, get_backend
    from .runner import DEFAULT_TIMEOUT, Runner, load_xfails, progress_printer, select_cases

    out, err = sys.stdout, sys.stderr
    timeout = _check_timeout(getattr(args, "timeout", None))
    precision = _SHORT[args.precision] if args.precision is not None else None
    if not args.list:
        for path, flag in ((args.json_report, "--json-report"), (args.junit_xml, "--junit-xml")):
            if path is not None:
                _check_report_path(path, flag)
    from .golden import GoldenError, parse_limits

    limits = parse_limits(getattr(args, "limit", None))
    try:
        cases = _load_cases(args.golden, limits)  # schema, sizes and files checked before anything runs
    except (GoldenError, MemoryError) as exc:
        return _golden_refused(exc, args.golden, err)
    xfails = _load_xfails(load_xfails, args.xfails) if args.xfails else None
    if args.list:
        for c in select_cases(cases, args.select):
            needs = f", runs after {', '.join(c.requires)}" if c.requires else ""
            print(f"{c.id}  [{c.op}, {c.bug_class}{needs}]", file=out)
        return 0
    timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
    if getattr(args, "conformance_command", "run") == "judge":
        if not os.path.isdir(args.outputs):
            print(f"rope-ref conformance: error: --outputs {args.outputs}: not a directory", file=err)
            return 2
        from .judge import OutputsJudge, RecordedOutputs

        backend = RecordedOutputs(args.outputs, _judge_policy(precision or "fp32", args))
        runner = OutputsJudge(backend, timeout=timeout, spec="judge", precision=precision, golden=args.golden)
    else:
        try:
            backend = get_backend(args.backend, precision)
        except BackendNotFound as exc:
            print(f"rope-ref conformance: error: {exc}", file=err)
            return 2
        except BackendUnavailable as exc:
            print(f"rope-ref conformance: backend {args.backend!r} is unavailable here: {exc}", file=err)
            return 2
        runner = Runner(backend, timeout=timeout, spec=args.backend, precision=precision, golden=args.golden)
    print(f"backend: {backend!r}", file=out)
    print(f"golden:  {args.golden or 'shipped set'} ({len(cases)} cases)", file=out)
    if select_cases(cases, args.select):
        print(applicability_line(cases, runner, args.select), file=out)
    try:
        report = runner.run(
            cases, select=args.select, xfails=xfails, progress=None if args.quiet else progress_printer(err)
        )
    except (GoldenError, MemoryError) as exc:  # a file is read when its case runs: corrupt, or over a limit
        if not args.quiet:
            print(file=err)  # end the progress line
        return _golden_refused(exc, args.golden, err)
    if not report.results:
        print(f"rope-ref conformance: no case id matches -k {args.select!r}", file=err)
        return 2
    for warning in report.warnings:
        print(f"warning: {warning}", file=err)
    if args.json_report:
        report.write_json(args.json_report)
    if args.junit_xml:
        report.write_junit_xml(args.junit_xml)
    require_all = bool(getattr(args, "require_all", False))
    print("\n" + report.text(require_all), file=out)
    return 0 if report.ok_under(require_all) else 1


def _judge_policy(short: str, args: argparse.Namespace):
    """The precision the judged port declares: I/O dtype from --precision, angle and compute dtypes from
    --angle-dtype / --compute-dtype (default float64 for fp64, float32 otherwise)."""
    from rope_ref.precision import PrecisionPolicy

    io = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[short]
    inner = "float64" if short == "fp64" else "float32"
    return PrecisionPolicy(io, args.angle_dtype or inner, args.compute_dtype or inner)


def applicability_line(cases, runner, select: str | None = None) -> str:
    """Said before the run: how many selected cases apply to the backend's I/O dtype, how many are
    skipped because their inputs were generated for another one."""
    from .runner import select_cases

    chosen = select_cases(cases, select)
    n = sum(runner.applies(c) for c in chosen)
    io = runner.backend.precision.io_dtype
    line = f"cases:   {n} of {len(chosen)} apply to I/O dtype {io}"
    if n < len(chosen):
        line += f"; {len(chosen) - n} will be skipped (generated for another I/O dtype)"
    return line
