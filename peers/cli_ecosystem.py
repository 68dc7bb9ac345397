"""``rope-ref ecosystem``: run every installed peer at every precision it supports, write the results page.

Writes ``<out>/ecosystem.md`` (one table per library and precision, one per bug class, the findings)
and ``<out>/ecosystem.json``. Byte-stable: nothing timed or random is written, and when the verdicts
are those already on the page, the page's own date and machine are kept, so regenerating with nothing
changed rewrites the same bytes (``--date`` / ``--machine`` override). Exit status: 0, or 1 with
``--check`` when a peer has an unexplained failure or a stale finding.

Peers that cannot be installed beside the others (keras-hub pulls TensorFlow; each Keras backend needs its
own process) are run in their own environment and merged: ``--update`` keeps the page's rows of the peers
not run now, and ``--merge FILE`` takes the rows of the peers in FILE (an ``ecosystem.json`` written
elsewhere with ``--out``) in place of theirs, refusing a FILE computed on another golden set. For example::

    KERAS_BACKEND=torch rope-ref ecosystem --peers keras-hub:torch --out /tmp/keras-page
    KERAS_BACKEND=jax rope-ref ecosystem --peers keras-hub:jax --out /tmp/keras-page --update
    rope-ref ecosystem --merge /tmp/keras-page/ecosystem.json   # in the main environment: runs nothing else

A peer whose flavours share one library may share one findings file: ``findings/<peer>.toml`` is used when it
exists, else ``findings/<library>.toml`` (``keras-hub.toml`` for ``keras-hub:torch`` and ``keras-hub:jax``).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "add_parser", "run", "run_peer", "collect", "peer_findings", "merge_pages"]

PAGE_SCHEMA = "rope-ref-ecosystem/1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peers", default=None, metavar="A,B", help="peers to run (default: all)")
    parser.add_argument("--precisions", default=None, metavar="P,Q", help="e.g. fp32,bf16 (default: all)")
    parser.add_argument("--golden", default=None, metavar="DIR", help="golden directory (default: shipped)")
    parser.add_argument("--out", default="docs/results", metavar="DIR", help="where the page goes")
    parser.add_argument("--date", default=None, help="date to print (default: kept if verdicts unchanged)")
    parser.add_argument("--machine", default=None, help="machine text (default: kept if verdicts unchanged)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S", help="per-case timeout")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 on unexplained failures or stale findings"
    )
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the existing page's rows of the peers not run now (default: the page has only this run)",
    )
    parser.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="JSON",
        help="an ecosystem.json computed elsewhere (e.g. where keras-hub is installed): its peers' rows "
        "replace theirs on the page (implies --update; without --peers nothing is run); repeatable",
    )
    parser.add_argument(
        "--export-xfails",
        default=None,
        metavar="DIR",
        help="also write each peer's findings as DIR/<peer>-<precision>.json, for "
        "'rope-ref conformance run --backend <peer> --xfails FILE'",
    )
    parser.add_argument("-q", "--quiet", action="store_true")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "ecosystem", help="run the suite against every installed peer library and write the results page"
    )
    add_arguments(p)
    p.set_defaults(_run=run)
    return p


def _pkg():
    return sys.modules[__package__] if __package__ in sys.modules else __import__(__package__)


def peer_findings(name: str) -> tuple[list, str]:
    """``(findings, file name)``: ``findings/<peer>.toml``, else the file the library's flavours share
    (``findings/<library>.toml``, the peer name up to ``:``; :func:`findings_path`)."""
    from ._findings import findings_path, load_findings

    return load_findings(name), findings_path(name).name


def run_peer(name: str, precision: str, cases, *, timeout: float = 60.0) -> dict[str, Any]:
    """Run one peer at one precision; every failure classified against its findings file."""
    from rope_ref.conformance.runner import Runner

    from ._findings import explain

    pkg = _pkg()
    backend = pkg.get_peer(name, precision)
    findings, _ = peer_findings(name)
    runner = Runner(backend, timeout=timeout, spec=name, precision=precision)
    report = runner.run(cases)  # classified below (bug class and min_position too, which --xfails lacks)
    counts = dict.fromkeys(
        ("passed", "passed_oracle_tables", "known_failures", "unexplained", "unsupported", "skipped"), 0
    )
    failures, unexplained, by_class, reasons = [], [], {}, {}
    used: set[str] = set()
    by_id = {c.id: c for c in cases}
    for r in report.results:
        status = r.status
        if status in ("failed", "xfailed"):
            f = explain(findings, r.case_id, r.bug_class, precision, _max_position(by_id.get(r.case_id)))
            if f is None:
                counts["unexplained"] += 1
                unexplained.append({"case": r.case_id, "bug_class": r.bug_class, "kind": r.kind})
                verdict = "unexplained"
            else:
                used.add(f.id)
                counts["known_failures"] += 1
                failures.append({"case": r.case_id, "finding": f.id})
                verdict = "known"
        elif status in ("passed", "xpassed"):
            verdict = "passed_oracle_tables" if getattr(r, "borrowed", False) else "passed"
            counts[verdict] += 1
        elif status == "unsupported":
            counts["unsupported"] += 1
            verdict = "unsupported"
            reason = " ".join(r.message.split(": ", 1)[-1].split())
            why = getattr(r, "unsupported_reason", "")
            reason = f"[{why}] {reason}" if why else reason
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            counts["skipped"] += 1
            continue
        by_class.setdefault(r.bug_class, []).append(verdict)
    stale = sorted(f.id for f in findings if f.applies(precision) and f.id not in used)
    return {
        "peer": name,
        "version": backend.version,
        "precision": precision,
        "policy": {op: vars(backend.precision_by_op[op]) for op in ("inv_freq", "apply")},
        "notes": list(getattr(backend, "notes", ())),
        "counts": counts,
        "known_failures": failures,
        "unexplained": unexplained,
        "stale_findings": stale,
        "by_bug_class": {k: _class_verdict(v) for k, v in sorted(by_class.items())},
        "unsupported_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _max_position(case) -> float | None:
    """Largest |position| among a case's position inputs (``None`` when it has none); for the kernel-shape
    operations, of the ids its ids / offset / cu_seqlens stand for."""
    import numpy as np

    if case is None:
        return None
    from rope_ref.conformance.kernel_shapes import ACTIVATIONS, KERNEL_OPS, placed_positions

    if case.op in KERNEL_OPS:  # positions given as ids, an offset or cu_seqlens: the ids they stand for
        main = case.inputs[ACTIVATIONS[case.op][0]]
        return float(np.abs(placed_positions(case.inputs, case.params, np.shape(main))).max())
    values = [
        np.abs(np.asarray(v, dtype=np.float64)).max() for k, v in case.inputs.items() if "position" in k
    ]
    values = [float(v) for v in values if np.size(v)]
    return max(values) if values else None


def _class_verdict(verdicts: list[str]) -> str:
    for v in ("unexplained", "known", "passed", "passed_oracle_tables", "unsupported"):
        if v in verdicts:
            return {"known": "known failure", "passed_oracle_tables": "passed (oracle tables)"}.get(v, v)
    return "unsupported"


def collect(peers: list[str], precisions: list[str] | None, golden: str | None, timeout: float, log) -> dict:
    from rope_ref.conformance.golden import load_golden

    pkg = _pkg()
    cases = load_golden(golden)
    runs, not_run, findings = [], {}, {}
    for name in peers:
        ok, reason = pkg.peer_status(name)
        loaded, file = peer_findings(name)
        shared = {"file": file} if file != name.replace(":", "_") + ".toml" else {}
        findings[name] = [
            {k: getattr(f, k) for k in ("id", "title", "upstream", "reproducer")}
            | {"affected": list(f.affected)}
            | shared
            for f in loaded
        ]
        if not ok:
            not_run[name] = reason
            log(f"{name}: not run ({reason})")
            continue
        module = pkg._module(name)
        cls_precisions = _precisions_of(module, name)
        for p in cls_precisions:
            if precisions and p not in precisions:
                continue
            result = run_peer(name, p, cases, timeout=timeout)
            c = result["counts"]
            log(
                f"{name} {result['version']} {p}: {c['passed']} passed, {c['passed_oracle_tables']} passed "
                f"(oracle tables), {c['known_failures']} known failures, {c['unexplained']} unexplained, "
                f"{c['unsupported']} unsupported; stale findings: {result['stale_findings'] or 'none'}"
            )
            runs.append(result)
    return {"runs": runs, "not_run": not_run, "findings": findings, "cases": len(cases)}


def _precisions_of(module, name: str) -> tuple[str, ...]:
    backend = _pkg().get_peer(name)
    return tuple(backend.precisions)


def _golden_manifest(golden: str | None) -> str:
    """sha256 (16 hex digits) of the golden set's manifest: merged rows must come from the same set."""
    from rope_ref.conformance.golden import MANIFEST, shipped_dir

    path = (Path(golden) if golden else shipped_dir()) / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def merge_pages(base: dict, new: dict, order: list[str]) -> dict:
    """``base`` with every row of the peers in ``new`` (runs, not-run entries, findings) replaced by new's.

    Rows are kept in registry order (``order``), a peer's runs in the order they were run; a peer with runs
    loses its not-run entry.
    """
    mine = (
        {r["peer"] for r in new.get("runs", [])} | set(new.get("not_run", {})) | set(new.get("findings", {}))
    )
    rank = {name: i for i, name in enumerate(order)}

    def key(name: str) -> int:
        return rank.get(name, len(rank))

    runs = [r for r in base.get("runs", []) if r["peer"] not in mine] + list(new.get("runs", []))
    runs.sort(key=lambda r: key(r["peer"]))  # stable: a peer's precisions keep their order
    with_runs = {r["peer"] for r in runs}
    not_run = {k: v for k, v in base.get("not_run", {}).items() if k not in mine} | new.get("not_run", {})
    not_run = {k: not_run[k] for k in sorted(not_run, key=key) if k not in with_runs}
    findings = {k: v for k, v in base.get("findings", {}).items() if k not in mine} | new.get("findings", {})
    findings = {k: findings[k] for k in sorted(findings, key=key)}
    return {
        "runs": runs,
        "not_run": not_run,
        "findings": findings,
        "cases": new.get("cases", base.get("cases")),
    }


def _machine() -> str:
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, CPU only"


def render_md(page: dict) -> str:
    meta = page["meta"]
    lines = [
        "# RoPE ecosystem conformance",
        "",
        f"Generated by `rope-ref ecosystem` (rope-ref {meta['rope_ref']}, golden set {meta['golden']}, "
        f"{meta['cases']} cases) on {meta['date']}, {meta['machine']}. Versions pinned in "
        "`peers/constraints.txt`; every known failure links to its finding (root cause, reproducer, "
        "upstream report) in `peers/findings/`.",
        "",
        "Cells: passed / known failures (explained by a finding) / **unexplained failures** / unsupported. "
        "*Oracle tables*: passes of operations whose cos/sin the library takes as inputs (ONNX, flash-attn, "
        "Liger), filled from rope-ref; they check the library's rotation, not its tables.",
        "",
        "| library | version | precision | passed | oracle tables | known failures | unexplained "
        "| unsupported | stale findings |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in page["runs"]:
        c = r["counts"]
        stale = ", ".join(r["stale_findings"]) or ""
        lines.append(
            f"| {r['peer']} | {r['version']} | {r['precision']} | {c['passed']} "
            f"| {c['passed_oracle_tables']} "
            f"| {c['known_failures']} | {'**' + str(c['unexplained']) + '**' if c['unexplained'] else 0} "
            f"| {c['unsupported']} | {stale} |"
        )
    for name, reason in page["not_run"].items():
        lines.append(f"| {name} | - | - | not run: {reason} | | | | | |")
    classes = sorted({k for r in page["runs"] for k in r["by_bug_class"]})
    cols = [(r["peer"], r["precision"]) for r in page["runs"]]
    peers = list(dict.fromkeys(p for p, _ in cols))
    lines += ["", "## Per bug class", "", "Worst verdict over the precisions run.", ""]
    lines.append("| bug class | " + " | ".join(peers) + " |")
    lines.append("|---|" + "---|" * len(peers))
    order = ["unexplained", "known failure", "passed", "passed (oracle tables)", "unsupported"]
    short = {"unexplained": "**UNEXPLAINED**", "known failure": "known", "passed": "pass",
             "passed (oracle tables)": "pass*", "unsupported": "-"}  # fmt: skip
    for bc in classes:
        row = []
        for peer in peers:
            vs = [r["by_bug_class"].get(bc) for r in page["runs"] if r["peer"] == peer]
            vs = [v for v in vs if v]
            row.append(short[min(vs, key=order.index)] if vs else "")
        lines.append(f"| {bc} | " + " | ".join(row) + " |")
    lines += ["", "`pass*`: passed with tables from the oracle.", "", "## Findings", ""]
    for peer, fs in page["findings"].items():
        for f in fs:
            file = f.get("file") or peer.replace(":", "_") + ".toml"
            lines.append(
                f"- **{peer}** [`{f['id']}`](../../peers/findings/{file}): "
                f"{f['title']} "
                f"(reproducer `peers/reproducers/{f['reproducer']}`; upstream: {f['upstream']})"
            )
    lines += ["", "## What each adapter runs, and what it cannot express", ""]
    seen: set[str] = set()
    for r in page["runs"]:
        if r["peer"] in seen:
            continue
        seen.add(r["peer"])
        pol = r["policy"]["apply"]
        lines.append(
            f"- **{r['peer']}** (apply policy at {r['precision']}: io {pol['io_dtype']}, angles "
            f"{pol['angle_dtype']}, rotation {pol['compute_dtype']}). "
            + " ".join(n + "." for n in r["notes"])
        )
        for reason, n in r["unsupported_reasons"].items():
            lines.append(f"  - {n} unsupported: {reason}")
    unexplained = [(r["peer"], r["precision"], u["case"]) for r in page["runs"] for u in r["unexplained"]]
    if unexplained:
        lines += ["", "## Unexplained failures", ""]
        lines += [f"- {p} {pr}: `{c}`" for p, pr, c in unexplained]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    pkg = _pkg()
    names = args.peers.split(",") if args.peers else ([] if args.merge else pkg.peer_names())
    unknown = [n for n in names if n not in pkg.PEERS]
    if unknown:
        print(f"rope-ref ecosystem: unknown peer(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    precisions = args.precisions.split(",") if args.precisions else None

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    import rope_ref

    merged = []
    for file in args.merge:
        try:
            merged.append(json.loads(Path(file).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"rope-ref ecosystem: cannot read --merge {file}: {exc}", file=sys.stderr)
            return 2
    body = collect(names, precisions, args.golden, args.timeout, log)
    manifest = _golden_manifest(args.golden)
    for file, page in zip(args.merge, merged, strict=True):
        theirs = page.get("meta", {}).get("golden_manifest")
        if page.get("cases") != body["cases"] or (theirs and theirs != manifest):
            print(
                f"rope-ref ecosystem: {file} was computed on another golden set ({page.get('cases')} cases, "
                f"manifest {theirs}; here {body['cases']} cases, manifest {manifest}); re-run its peers",
                file=sys.stderr,
            )
            return 2
    out = Path(args.out)
    json_path, md_path = out / "ecosystem.json", out / "ecosystem.md"
    old: dict[str, Any] = {}
    if json_path.is_file():
        try:
            old = json.loads(json_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, OSError):
            old = {}
    if args.update or args.merge:
        base = old if old.get("cases") == body["cases"] else {}
        if old and not base:
            log(f"{json_path} was computed on another golden set: its other rows are dropped")
        body = merge_pages(base, body, pkg.peer_names())
        for page in merged:
            body = merge_pages(body, page, pkg.peer_names())
            for name in {r["peer"] for r in page.get("runs", [])}:
                log(f"{name}: rows merged from another environment")
    old_meta: dict[str, Any] = {}
    if old and {k: old.get(k) for k in body} == json.loads(json.dumps(body)):
        old_meta = old.get("meta", {})
    meta = {
        "schema": PAGE_SCHEMA,
        "rope_ref": rope_ref.__version__,
        "golden": args.golden or "shipped",
        "cases": body["cases"],
        "date": args.date or old_meta.get("date") or datetime.date.today().isoformat(),
        "machine": args.machine or old_meta.get("machine") or _machine(),
        "golden_manifest": manifest,
    }
    page = {"meta": meta, **body}
    bad = [r for r in body["runs"] if r["unexplained"] or r["stale_findings"]]
    if args.export_xfails:
        from ._findings import write_xfails_json

        xdir = Path(args.export_xfails)
        xdir.mkdir(parents=True, exist_ok=True)
        for r in body["runs"]:
            target = xdir / f"{r['peer'].replace(':', '_')}-{r['precision']}.json"
            write_xfails_json(peer_findings(r["peer"])[0], r["precision"], target)
    if not args.no_write:
        out.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(page, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        md_path.write_text(render_md(page), encoding="utf-8")
        log(f"wrote {md_path} and {json_path}")
    for r in bad:
        log(f"{r['peer']} {r['precision']}: unexplained {[u['case'] for u in r['unexplained']]}, "
            f"stale {r['stale_findings']}")  # fmt: skip
    return 1 if (args.check and bad) else 0
