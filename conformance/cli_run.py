"""``rope-ref conformance run``: check a backend against the golden vectors, report, set the exit code.

Exit status: 0 when no case failed, 1 when at least one failed, 2 for usage errors (unknown backend,
bad golden directory, ``-k`` matching nothing, unreadable xfail file).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


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
        "or a name registered in the 'rope_ref.backends' entry-point group",
    )
    p.add_argument(
        "--precision",
        default=None,
        choices=("fp64", "fp32", "fp16", "bf16"),
        help="precision policy to ask the backend for (default: the backend's own)",
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
    p.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="per-case timeout in seconds (default 60)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument("--list", action="store_true", help="list the selected case ids and exit")
    p.set_defaults(_conformance=_run)


def run(args: argparse.Namespace) -> int:
    return int(args._conformance(args) or 0)


def _load_cases(golden: str | None):
    try:
        from .golden import load_golden
    except ImportError as exc:  # pragma: no cover - only while the golden module is missing
        raise ValueError(f"the golden-vector loader is not available: {exc}") from None
    return load_golden(golden)


def _run(args: argparse.Namespace) -> int:
    from .registry import BackendUnavailable, get_backend
    from .runner import DEFAULT_TIMEOUT, Runner, load_xfails, progress_printer, select_cases

    out, err = sys.stdout, sys.stderr
    cases = _load_cases(args.golden)  # verifies schema and checksums before anything runs
    xfails = load_xfails(args.xfails) if args.xfails else None
    if args.list:
        for c in select_cases(cases, args.select):
            needs = f", runs after {', '.join(c.requires)}" if c.requires else ""
            print(f"{c.id}  [{c.op}, {c.bug_class}{needs}]", file=out)
        return 0
    try:
        backend = get_backend(args.backend, args.precision)
    except BackendUnavailable as exc:
        print(f"rope-ref conformance: backend {args.backend!r} is unavailable here: {exc}", file=err)
        return 2
    runner = Runner(
        backend,
        timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT,
        spec=args.backend,
        precision=args.precision,
        golden=args.golden,
    )
    print(f"backend: {backend!r}", file=out)
    print(f"golden:  {args.golden or 'shipped set'} ({len(cases)} cases)", file=out)
    report = runner.run(
        cases, select=args.select, xfails=xfails, progress=None if args.quiet else progress_printer(err)
    )
    if not report.results:
        print(f"rope-ref conformance: no case id matches -k {args.select!r}", file=err)
        return 2
    print("", file=out)
    print(report.summary_table(), file=out)
    details = report.failure_details()
    if details:
        print(details + "\n", file=out)
    for warning in report.warnings:
        print(f"warning: {warning}", file=err)
    if args.json_report:
        report.write_json(args.json_report)
    if args.junit_xml:
        report.write_junit_xml(args.junit_xml)
    c = report.counts()
    verdict = "FAILED" if not report.ok else "PASSED"
    note = f" ({c['unsupported']} unsupported: not passes)" if c["unsupported"] else ""
    print(f"{verdict}: {report.headline()}{note}", file=out)
    return 0 if report.ok else 1
