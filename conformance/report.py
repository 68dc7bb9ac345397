"""The report of a conformance run: one :class:`CaseResult` per case, and the :class:`SuiteReport` that
counts, tabulates, serialises and prints them, ending with the verdict line (as pytest does).

Used by ``rope-ref conformance run``, ``rope-ref conformance judge`` and the pytest plugin, so the three
print the same coverage table and the same verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .protocol import UNSUPPORTED_REASONS
from .tolerance import Comparison

__all__ = ["STATUSES", "CaseResult", "SuiteReport", "REASON_LABELS", "reason_label"]

#: Outcome of one case. Only ``failed`` (and ``xpassed`` in strict mode) makes a run fail.
STATUSES = ("passed", "failed", "unsupported", "skipped", "xfailed", "xpassed")

#: What the report prints for each ``CaseResult.unsupported_reason`` (the protocol's keys, plus
#: ``inplace``: the backend has the operation but does not list it in ``inplace_ops``).
REASON_LABELS = {**UNSUPPORTED_REASONS, "inplace": "not declared in inplace_ops"}


def reason_label(key: str) -> str:
    return REASON_LABELS.get(key, "not implemented")


#: The optional fields of a case's JSON record.
_OPTIONAL_FIELDS = (
    "kind", "message", "xfail_reason", "unsupported_reason", "borrowed", "diagnosis", "detail", "reproducer"
)


@dataclass
class CaseResult:
    """What happened to one case."""

    case_id: str
    op: str
    bug_class: str
    status: str
    duration: float = 0.0
    kind: str = ""  # failure kind: mismatch, exception, timeout, shape, dtype, non-finite, mutation
    message: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    reproducer: str = ""
    xfail_reason: str = ""
    #: for unsupported cases: a key of protocol.UNSUPPORTED_REASONS (operation, config, dtype)
    unsupported_reason: str = ""
    #: passed, but on values the backend takes from the oracle (``Backend.oracle_tables``)
    borrowed: bool = False
    #: for failed cases: the common bug the output most resembles (:mod:`rope_ref.diagnoses`), if any
    diagnosis: str = ""
    #: for failed cases: a readable worst-element line where the plain one would mislead (an exact element)
    detail: str = ""

    @property
    def worst(self) -> Comparison | None:
        """The failing comparison with the largest error/tolerance ratio, if any."""
        bad = [c for c in self.comparisons if not c.passed]
        return max(bad, key=lambda c: c.ratio) if bad else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.case_id,
            "op": self.op,
            "bug_class": self.bug_class,
            "status": self.status,
            "duration_s": round(self.duration, 6),
        }
        for key in _OPTIONAL_FIELDS:  # written only when set, in this order
            value = getattr(self, key)
            if value:
                out[key] = True if key == "borrowed" else value
        worst = self.worst
        if worst is not None:
            out["worst"] = {
                "output": worst.output,
                "index": list(worst.index or ()),
                "expected": _json_float(worst.expected),
                "got": _json_float(worst.got),
                "tolerance": _json_float(worst.tol),
                "ratio": _json_float(worst.ratio),
                "n_bad": worst.n_bad,
                "n_total": worst.n_total,
            }
        return out


def _json_float(value: float) -> float | str:
    return value if np.isfinite(value) else str(value)


@dataclass
class SuiteReport:
    """All results of one run, plus what is needed to print, serialise or reproduce them."""

    backend: dict[str, str]
    results: list[CaseResult]
    warnings: list[str]
    duration: float
    golden: str = "shipped"

    def counts(self, results: Iterable[CaseResult] | None = None) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for r in self.results if results is None else results:
            counts[r.status] += 1
        return counts

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def ok(self) -> bool:
        """True when no case failed (unsupported, skipped and xfailed cases do not fail a run)."""
        return not self.failures

    def summary_table(self) -> str:
        """Counts per operation and per bug class, one table each."""
        lines = []
        for title, key in (("operation", lambda r: r.op), ("bug class", lambda r: r.bug_class)):
            groups: dict[str, list[CaseResult]] = {}
            for r in self.results:
                groups.setdefault(key(r), []).append(r)
            width = max([len(title)] + [len(g) for g in groups])
            cols = ("passed", "failed", "unsupported", "skipped", "xfailed", "xpassed")
            head = f"{title:<{width}}  " + "  ".join(f"{c:>11}" for c in cols) + f"  {'total':>6}"
            lines += [head, "-" * len(head)]
            for name in sorted(groups):
                c = self.counts(groups[name])
                lines.append(
                    f"{name:<{width}}  "
                    + "  ".join(f"{c[s]:>11}" for s in cols)
                    + f"  {len(groups[name]):>6}"
                )
            c = self.counts()
            lines.append(
                f"{'all':<{width}}  " + "  ".join(f"{c[s]:>11}" for s in cols) + f"  {len(self.results):>6}"
            )
            lines.append("")
        return "\n".join(lines)

    def failure_details(self) -> str:
        """One block per failed case: id, what failed, the worst element, and a reproducer."""
        blocks = []
        for r in self.failures:
            block = [f"FAILED {r.case_id}  [{r.op}, bug class: {r.bug_class}, {r.kind}]"]
            worst = r.worst
            if worst is not None and r.detail:
                block.append(f"  {r.detail}")
            elif worst is not None:
                block.append(
                    f"  worst element {worst.output}[{', '.join(map(str, worst.index or ()))}]: "
                    f"expected {worst.expected:.9g}, got {worst.got:.9g}, tolerance {worst.tol:.3g}, "
                    f"error/tolerance {worst.ratio:.3g} ({worst.n_bad} of {worst.n_total} elements out)"
                )
                if worst.note:
                    block.append(f"  note: {worst.note}")
            if r.diagnosis:
                block.append(f"  most resembles: {r.diagnosis}")
            if r.message and (worst is None or r.kind != "mismatch"):
                block.extend("  " + line for line in r.message.splitlines()[-6:])
            block.append(f"  reproduce: {r.reproducer}")
            blocks.append("\n".join(block))
        return "\n\n".join(blocks)

    @property
    def applicable(self) -> list[CaseResult]:
        """Results of cases written for this backend's I/O dtype (every status but ``skipped``)."""
        return [r for r in self.results if r.status != "skipped"]

    @property
    def complete(self) -> bool:
        """True when no applicable case was unsupported (``--require-all``)."""
        return not any(r.status == "unsupported" for r in self.results)

    def coverage_table(self) -> str:
        """Per bug class: applicable cases, how many ran, passed (own / borrowed), failed, unsupported and
        why; a class whose every case is unsupported is marked ``NOT COVERED``."""
        groups: dict[str, list[CaseResult]] = {}
        for r in self.applicable:
            groups.setdefault(r.bug_class, []).append(r)
        if not groups:
            return ""
        width = max(len("bug class"), *(len(g) for g in groups))
        cols = ("cases", "ran", "passed", "borrowed", "failed", "unsupp.")
        head = f"{'bug class':<{width}}  " + "  ".join(f"{c:>8}" for c in cols) + "  unsupported because"
        lines = ["coverage (applicable cases per bug class):", head, "-" * len(head)]
        for name in sorted(groups):
            rs = groups[name]
            unsupported = [r for r in rs if r.status == "unsupported"]
            ran = len(rs) - len(unsupported)
            borrowed = sum(r.borrowed for r in rs)
            passed = sum(r.status in ("passed", "xpassed") and not r.borrowed for r in rs)
            failed = sum(r.status in ("failed", "xfailed") for r in rs)
            why: dict[str, int] = {}
            for r in unsupported:
                label = reason_label(r.unsupported_reason)
                why[label] = why.get(label, 0) + 1
            reasons = ", ".join(f"{n} {label}" for label, n in sorted(why.items()))
            if unsupported and not ran:
                reasons = "NOT COVERED: " + reasons
            row = (len(rs), ran, passed, borrowed, failed, len(unsupported))
            lines.append(f"{name:<{width}}  " + "  ".join(f"{v:>8}" for v in row) + f"  {reasons}".rstrip())
        return "\n".join(lines)

    def headline(self) -> str:
        c = self.counts()
        parts = [f"{c[s]} {s}" for s in STATUSES if c[s]]
        return f"{', '.join(parts) or 'no cases'} in {self.duration:.2f}s"

    def reason_lines(self) -> list[str]:
        """One line per distinct reason cases were skipped or unsupported, largest group first; every
        reason is listed (nothing is cut)."""
        groups: dict[tuple[str, str], int] = {}
        for r in self.results:
            if r.status in ("skipped", "unsupported"):
                key = (r.status, " ".join((r.message or "no reason given").split()))
                groups[key] = groups.get(key, 0) + 1
        ordered = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))
        return [f"{n} {status}: {reason}" for (status, reason), n in ordered]

    def unsupported_reasons(self) -> list[tuple[str, int]]:
        """``(label, count)`` of the unsupported cases, largest first."""
        why: dict[str, int] = {}
        for r in self.results:
            if r.status == "unsupported":
                label = reason_label(r.unsupported_reason)
                why[label] = why.get(label, 0) + 1
        return sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))

    def ok_under(self, require_all: bool = False) -> bool:
        """The run's verdict: no failure, and (``--require-all``) no unsupported case."""
        return self.ok and (self.complete or not require_all)

    def verdict_line(self, require_all: bool = False, top: int = 3) -> str:
        """The last line of every report: PASSED/FAILED with passed, failed, unsupported (with its ``top``
        reasons, the rest counted), skipped (generated for another I/O dtype), xfailed and xpassed."""
        c = self.counts()
        parts = [f"{c['passed']} passed", f"{c['failed']} failed"]
        if c["unsupported"]:
            reasons = self.unsupported_reasons()
            keep = top if len(reasons) > top + 1 else len(reasons)  # never "1 for 1 other reason"
            shown = [f"{n} {label}" for label, n in reasons[:keep]]
            rest = reasons[keep:]
            if rest:
                shown.append(f"{sum(n for _, n in rest)} for {len(rest)} other reason(s)")
            parts.append(f"{c['unsupported']} unsupported ({', '.join(shown)})")
        if c["skipped"]:
            parts.append(f"{c['skipped']} skipped (generated for another I/O dtype)")
        parts += [f"{c[s]} {s}" for s in ("xfailed", "xpassed") if c[s]]
        applicable = len(self.applicable)
        note = f"; {applicable - c['unsupported']} of {applicable} applicable cases ran"
        if c["unsupported"]:
            note += " (unsupported cases are not counted as passed"
            note += "; --require-all: they fail the run)" if require_all else ")"
        borrowed = sum(r.borrowed for r in self.results)
        if borrowed:
            note += f"; {borrowed} passed on tables taken from the oracle (not counted as the backend's own)"
        verdict = "PASSED" if self.ok_under(require_all) else "FAILED"
        return f"{verdict}: {', '.join(parts)} in {self.duration:.2f}s{note}"

    def text(self, require_all: bool = False) -> str:
        """The whole report as the CLI prints it: the tables, each failure, every skip/unsupported reason,
        the coverage table, and last the verdict line."""
        chunks = [self.summary_table()]
        details = self.failure_details()
        if details:
            chunks.append(details + "\n")
        reasons = self.reason_lines()
        if reasons:
            chunks.append("\n".join(reasons) + "\n")
        coverage = self.coverage_table()
        if coverage:
            chunks.append(coverage + "\n")
        chunks.append(self.verdict_line(require_all))
        return "\n".join(chunks)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "rope-ref-conformance-report/1",
            "backend": self.backend,
            "golden": self.golden,
            "duration_s": round(self.duration, 3),
            "counts": self.counts(),
            "applicable": len(self.applicable),
            "ok": self.ok,
            "complete": self.complete,
            "warnings": list(self.warnings),
            "cases": [r.to_dict() for r in self.results],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def write_junit_xml(self, path: str | Path) -> None:
        """JUnit XML (one ``testcase`` per case, ``classname`` = operation) for CI dashboards."""
        import xml.etree.ElementTree as ET

        c = self.counts()
        suite = ET.Element(
            "testsuite",
            name=f"rope-ref conformance ({self.backend.get('name', '?')})",
            tests=str(len(self.results)),
            failures=str(c["failed"]),
            errors="0",
            skipped=str(c["unsupported"] + c["skipped"] + c["xfailed"]),
            time=f"{self.duration:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in self.backend.items():
            ET.SubElement(props, "property", name=f"backend.{key}", value=str(value))
        for r in self.results:
            tc = ET.SubElement(
                suite,
                "testcase",
                classname=f"rope_ref.conformance.{r.op}",
                name=r.case_id,
                time=f"{r.duration:.6f}",
            )
            if r.status == "failed":
                worst = r.worst
                summary = worst.describe() if worst is not None else r.message.splitlines()[-1:] or [r.kind]
                el = ET.SubElement(
                    tc, "failure", type=r.kind, message=summary if isinstance(summary, str) else summary[0]
                )
                el.text = (r.message + "\n" if r.message else "") + f"reproduce: {r.reproducer}"
            elif r.status in ("unsupported", "skipped", "xfailed"):
                why = REASON_LABELS.get(r.unsupported_reason, "")
                status = f"{r.status} ({why})" if why else r.status
                ET.SubElement(tc, "skipped", message=f"{status}: {r.xfail_reason or r.message}")
            elif r.status == "xpassed":
                ET.SubElement(tc, "system-out").text = f"stale xfail (passed): {r.xfail_reason}"
        ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
