"""Findings files: each peer's known failures, each explained, used as per-peer expected failures.

``findings/<peer>.toml`` (``:`` in the peer name written ``_``) holds ``[[finding]]`` tables:

* ``id``, ``title``, ``root_cause``, ``reproducer`` (a script under ``reproducers/``), ``affected``
  (real models or configs), ``upstream`` (issue or PR, or "not reported");
* ``cases``: case-id glob patterns (``fnmatch``); ``bug_classes``: the bug classes those cases must carry
  (empty: any); ``precisions``: where the failure shows (empty: every precision the peer runs);
  ``min_position``: optional ``{precision: p}``, the finding explains a case only if one of its positions
  is at least ``p`` in magnitude (precision bugs that start at a known position).

A failed case is *explained* when a finding's pattern and bug class match it at that precision; a
finding that explains no failed case at a precision it lists is *stale*. The patterns go to the runner
as ``--xfails`` entries, so ``rope-ref conformance run --backend hf:llama --xfails <file>`` agrees.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Finding", "load_findings", "findings_path", "explain", "xfails_for"]

FINDINGS_DIR = Path(__file__).with_name("findings")


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    root_cause: str
    reproducer: str
    cases: tuple[str, ...]
    bug_classes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    affected: tuple[str, ...] = ()
    upstream: str = "not reported"
    min_position: dict = field(default_factory=dict, compare=False)

    def applies(self, precision: str) -> bool:
        return not self.precisions or precision in self.precisions

    def matches(
        self, case_id: str, bug_class: str, precision: str, max_position: float | None = None
    ) -> bool:
        threshold = self.min_position.get(precision)
        return (
            self.applies(precision)
            and any(fnmatch.fnmatchcase(case_id, p) for p in self.cases)
            and (not self.bug_classes or bug_class in self.bug_classes)
            and (threshold is None or (max_position is not None and max_position >= threshold))
        )


def findings_path(peer: str) -> Path:
    """``findings/<peer>.toml`` (``:`` as ``_``); else, when only the library's shared file exists, the
    file of the peer name up to ``:`` (``keras-hub:torch`` and ``keras-hub:jax`` share ``keras-hub.toml``)."""
    own = FINDINGS_DIR / (peer.replace(":", "_") + ".toml")
    if not own.is_file() and ":" in peer:
        shared = FINDINGS_DIR / (peer.split(":", 1)[0] + ".toml")
        if shared.is_file():
            return shared
    return own


def _toml(text: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


def load_findings(peer: str) -> list[Finding]:
    """The findings of ``peer`` (an empty list when it has no file)."""
    path = findings_path(peer)
    if not path.is_file():
        return []
    data = _toml(path.read_text(encoding="utf-8"))
    out = []
    for entry in data.get("finding", []):
        known = {k: entry[k] for k in ("id", "title", "root_cause", "reproducer") if k in entry}
        missing = {"id", "title", "root_cause", "reproducer"} - set(known)
        if missing or not entry.get("cases"):
            raise ValueError(f"{path}: finding {entry.get('id', '?')!r} lacks {sorted(missing) or ['cases']}")
        out.append(
            Finding(
                **known,
                cases=tuple(entry["cases"]),
                bug_classes=tuple(entry.get("bug_classes", ())),
                precisions=tuple(entry.get("precisions", ())),
                affected=tuple(entry.get("affected", ())),
                upstream=entry.get("upstream", "not reported"),
                min_position=dict(entry.get("min_position", {})),
            )
        )
    return out


def explain(
    findings: list[Finding], case_id: str, bug_class: str, precision: str, max_position: float | None = None
) -> Finding | None:
    """The first finding that explains this failure, or ``None`` (an unexplained failure)."""
    for f in findings:
        if f.matches(case_id, bug_class, precision, max_position):
            return f
    return None


def xfails_for(findings: list[Finding], precision: str) -> dict[str, str]:
    """``{case-id pattern: reason}`` for the runner's ``xfails`` at ``precision``."""
    out: dict[str, str] = {}
    for f in findings:
        if f.applies(precision):
            for pattern in f.cases:
                out.setdefault(pattern, f"finding {f.id}: {f.title}")
    return out


def write_xfails_json(findings: list[Finding], precision: str, path: str | Path) -> None:
    Path(path).write_text(json.dumps(xfails_for(findings, precision), indent=2) + "\n", encoding="utf-8")
