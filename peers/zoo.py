"""``rope-ref zoo``: every rotary embedding in the installed transformers, checked against the oracle.

Discovers the architectures (:func:`rope_ref.peers.zoo_probe.discover`), probes every rotary class of
each (:func:`rope_ref.peers.zoo_probe.probe`, with a per-class timeout; a failure is a classified row,
never a crash) and writes ``<out>/transformers-zoo.md`` and ``<out>/transformers-zoo.json``: the
transformers version, date and machine, the counts per class, the architectures grouped by the RoPE they
share, and one table per class. Nothing is downloaded (``HF_HUB_OFFLINE=1`` is set). Run it as
``rope-ref zoo --out docs/results`` or ``python -m rope_ref.peers.zoo --out docs/results``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

from .zoo_probe import VERDICTS, Verdict, discover, probe

__all__ = ["add_arguments", "run", "scan", "architecture_verdict", "justified", "write_page", "PAGE_SCHEMA"]

PAGE_SCHEMA = "rope-ref-transformers-zoo/1"
#: Verdict order for an architecture with several rotary classes: the worst one names it.
_RANK = {v: i for i, v in enumerate(VERDICTS)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="docs/results", metavar="DIR", help="where the page goes")
    parser.add_argument("--only", default=None, metavar="A,B", help="architectures to probe (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S", help="per rotary class")
    parser.add_argument("--date", default=None, help="date to print (default: today, UTC)")
    parser.add_argument("--machine", default=None, help="machine text (default: platform)")
    parser.add_argument("--no-variants", action="store_true", help="default configs only")
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    parser.add_argument("-q", "--quiet", action="store_true")


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout()


def _timed_probe(name: str, cls: str, timeout: float, variant: dict | None = None) -> Verdict:
    use_alarm = hasattr(signal, "SIGALRM") and timeout > 0
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return probe(name, cls, rope_parameters=variant)
    except _Timeout:
        return Verdict(verdict="error", detail=f"timed out after {timeout:g} s", ratio=None, mechanism="")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _is_vision(row: dict) -> bool:
    return str(row.get("mechanism", "")).startswith("vision 2D") or "vision" in row["class"].lower()


def architecture_verdict(rows: list[dict]) -> dict:
    """The architecture's verdict: the worst of its text rotaries (its vision-tower rotaries when it has
    no other), with the worst err/tol among them."""
    text = [r for r in rows if not _is_vision(r)] or rows
    worst = max(text, key=lambda r: _RANK[r["verdict"]])
    ratios = [r["ratio"] for r in text if r.get("ratio") is not None]
    return {
        "verdict": worst["verdict"],
        "ratio": max(ratios) if ratios else None,
        "mechanism": worst.get("mechanism", ""),
        "detail": worst.get("detail", ""),
    }


#: Rope variants probed (through ``rope_parameters``) on every 1D rotary that agrees with its default.
VARIANTS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
}


def _variants(name: str, rows: list[dict], timeout: float) -> list[dict]:
    """Every :data:`VARIANTS` entry on the 1D rotaries of ``rows`` that agree with their default config.
    A config that refuses a variant gives an ``error`` row (not a verdict on the architecture)."""
    out = []
    for row in rows:
        if row["verdict"] != "agrees" or not str(row.get("mechanism", "")).startswith("rope "):
            continue
        if "per-layer" in row["mechanism"] or not row["mechanism"].endswith(", default"):
            continue
        for label, params in VARIANTS.items():
            v = dict(_timed_probe(name, row["class"], timeout, params))
            out.append({"class": row["class"], "variant": label, **v})
    return out


#: One-line justification of a gap the run cannot close itself (shown with the architecture's verdict).
JUSTIFICATIONS = {
    "cosmos3_edge": "its text rotary is Qwen3-VL's interleaved M-RoPE (sections [24, 20, 20], the class is "
    "Qwen3VLTextRotaryEmbedding renamed); rope_ref.mrope.from_hf has no rule for model_type "
    "'cosmos3_edge_text' yet (rope_ref/mrope.py _HF_TYPES)",
}


def justified(row: dict) -> dict:
    """``row`` with its architecture's :data:`JUSTIFICATIONS` entry added to the detail of a gap."""
    why = JUSTIFICATIONS.get(row.get("architecture", ""))
    if why is None or row.get("verdict") not in ("not expressible", "error"):
        return row
    return {**row, "detail": f"{row.get('detail', '')}; justification: {why}"}


def _confirmed(name: str, verdict: dict) -> dict:
    """A candidate finding with a reproducer ``peers/reproducers/hf_<name>_*.py`` that still exits 1 (the
    behaviour is present in the installed transformers) is a finding. A reproducer of an architecture
    whose name extends ``name`` (``hf_glm4_moe_*`` for ``glm4``) is not ``name``'s."""
    import subprocess

    here = Path(__file__).resolve().parent / "reproducers"
    longer = [other for other, _ in discover() if other.startswith(f"{name}_")]  # glm4 vs glm4_moe
    for script in sorted(here.glob(f"hf_{name}_*.py")):
        if any(script.name.startswith(f"hf_{other}_") for other in longer):
            continue
        try:
            rc = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120).returncode
        except subprocess.TimeoutExpired:
            continue
        if rc == 1:
            rel = f"peers/reproducers/{script.name}"
            return {
                **verdict,
                "verdict": "finding",
                "detail": f"{verdict['detail']}; reproducer {rel} (exits 1)",
            }
    return verdict


def scan(
    only: list[str] | None = None, timeout: float = 60.0, log=None, with_variants: bool = True
) -> list[dict]:
    """Every architecture with its rotary classes' rows and its own verdict."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    out = []
    for name, classes in discover():
        if only and name not in only:
            continue
        rows = []
        for cls in classes:
            v = dict(_timed_probe(name, cls, timeout))
            rows.append({"class": cls, **v})
            if log:
                log(f"{name}.{cls}: {v['verdict']} {v.get('detail', '')[:120]}")
        verdict = architecture_verdict(rows)
        if verdict["verdict"] == "candidate finding":
            verdict = _confirmed(name, verdict)
        variants = _variants(name, rows, timeout) if with_variants else []
        if any(v["verdict"] == "candidate finding" for v in variants) and verdict["verdict"] == "agrees":
            verdict["verdict"] = "candidate finding"
            verdict["detail"] = "a rope variant disagrees (see variants)"
        out.append(justified({"architecture": name, **verdict, "classes": rows, "variants": variants}))
    return out


def _fmt(ratio: Any) -> str:
    return "-" if ratio is None else f"{ratio:.3g}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(page: dict) -> str:
    archs = page["architectures"]
    counts = page["counts"]
    lines = [
        "# transformers zoo: every rotary embedding checked against the oracle",
        "",
        f"transformers {page['transformers']}, {page['date']}, {page['machine']}. "
        f"Generated by `rope-ref zoo --out docs/results` (`python -m rope_ref.peers.zoo`); do not edit.",
        "",
        "Each architecture's rotary class is built from its configuration class defaults, called at "
        "positions 0..63, 8000..8063 and the last 64 before `max_position_embeddings` (batch of 3 rows), "
        "and the module's own `apply_*rotary*` function rotates random q (float64 where the module moves to "
        "it); the oracle is configured from the same config (`rope_ref.hf_config.model_family`) and the "
        "output is judged by the tolerance model (docs/tolerance.md; angles float32 as transformers). "
        "Layout: from the config where it decides it, else the layout the run finds (both are tried). "
        'Vision-tower rotaries (`rope_type` "axial") are called on (row, column) patch ids of an 8x8 and '
        "a 4x16 image and an 8x8 one moved to 500, applied by the module's vision apply function and "
        "compared with `rope_ref.vision_rope.from_hf`; an architecture's verdict is its text rotaries' "
        "(its vision rotaries' when it has no other). A *finding* is a candidate (a rotary that disagrees, "
        "or a default config that cannot build or run its own rotary or gives it an odd width) whose "
        "reproducer `peers/reproducers/hf_<arch>_*.py` still exits 1 on the installed transformers "
        "(GLM-4V's default M-RoPE sections are recognised by their error); a rotary whose `forward` takes "
        "no position ids (positions from the input's shape or timestamps) is *not expressible* by the "
        "run's own rule; a config flag that switches the rotary off (Zamba2's `use_mem_rope`) is switched "
        "on, and the row says so; a gap the run cannot close carries a one-line justification.",
        "",
        f"**{len(archs)} architectures**, {sum(len(a['classes']) for a in archs)} rotary classes. "
        "Architecture verdicts:",
        "",
        "| verdict | architectures |",
        "|---|---:|",
    ]
    lines += [f"| {v} | {counts.get(v, 0)} |" for v in VERDICTS if counts.get(v)]
    share = page["goal"]
    lines += [
        "",
        f"Agreeing (or finding/divergence with evidence): {share['ok']} of {len(archs)} "
        f"({100 * share['ok'] / max(1, len(archs)):.1f}%; goal 95%).",
        "",
        "## Architectures grouped by the RoPE they share",
        "",
        "| RoPE (family, layout, rope types) | n | architectures |",
        "|---|---:|---|",
    ]
    groups: dict[str, list[str]] = {}
    for a in archs:
        if a["verdict"] == "agrees":
            groups.setdefault(a["mechanism"] or "?", []).append(a["architecture"])
    for mech, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {_cell(mech)} | {len(names)} | {', '.join(names)} |")
    for verdict in VERDICTS:
        rows = [a for a in archs if a["verdict"] == verdict]
        if not rows:
            continue
        lines += ["", f"## {verdict} ({len(rows)})", "", "| architecture | worst err/tol | RoPE | detail |"]
        lines.append("|---|---:|---|---|")
        for a in rows:
            lines.append(
                f"| {a['architecture']} | {_fmt(a['ratio'])} | {_cell(a['mechanism'])} | "
                f"{_cell(a['detail'])} |"
            )
    lines += ["", "## Rope variants (rope_parameters) on the 1D rotaries that agree by default", ""]
    lines += ["| variant | agrees | disagrees | refused by the config or failed |", "|---|---:|---:|---:|"]
    for label in VARIANTS:
        vs = [v for a in archs for v in a.get("variants", []) if v["variant"] == label]
        n_ok = sum(v["verdict"] == "agrees" for v in vs)
        n_bad = sum(v["verdict"] == "candidate finding" for v in vs)
        lines.append(f"| {label} | {n_ok} | {n_bad} | {len(vs) - n_ok - n_bad} |")
    bad = [
        (a["architecture"], v)
        for a in archs
        for v in a.get("variants", [])
        if v["verdict"] == "candidate finding"
    ]
    for arch, v in bad:
        lines.append(
            f"\n- {arch} {v['class']} {v['variant']}: err/tol {_fmt(v.get('ratio'))}; {_cell(v['detail'])}"
        )
    lines += ["", "## Every rotary class", "", "| architecture | class | verdict | worst err/tol | detail |"]
    lines.append("|---|---|---|---:|---|")
    for a in archs:
        for r in a["classes"]:
            lines.append(
                f"| {a['architecture']} | {r['class']} | {r['verdict']} | {_fmt(r.get('ratio'))} | "
                f"{_cell(r.get('detail', ''))} |"
            )
    return "\n".join(lines) + "\n"


def write_page(
    archs: list[dict], out: str | Path, *, date: str | None = None, machine: str | None = None
) -> dict:
    """Write ``transformers-zoo.md`` and ``.json`` under ``out``; return the page object."""
    import transformers

    counts: dict[str, int] = {}
    for a in archs:
        counts[a["verdict"]] = counts.get(a["verdict"], 0) + 1
    ok = sum(counts.get(v, 0) for v in ("agrees", "finding", "divergence"))
    page = {
        "schema": PAGE_SCHEMA,
        "transformers": transformers.__version__,
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": machine or f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "counts": counts,
        "goal": {"ok": ok, "total": len(archs), "share": ok / max(1, len(archs))},
        "architectures": archs,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transformers-zoo.json").write_text(json.dumps(page, indent=1, sort_keys=True, default=str) + "\n")
    (out / "transformers-zoo.md").write_text(_markdown(page))
    return page


def run(args: argparse.Namespace) -> int:
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    archs = scan(only, args.timeout, log, with_variants=not args.no_variants)
    counts: dict[str, int] = {}
    for a in archs:
        counts[a["verdict"]] = counts.get(a["verdict"], 0) + 1
    print(f"{len(archs)} architectures: " + ", ".join(f"{v} {counts[v]}" for v in VERDICTS if v in counts))
    if not args.no_write:
        write_page(archs, args.out, date=args.date, machine=args.machine)
        print(f"wrote {Path(args.out) / 'transformers-zoo.md'} and .json")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rope_ref.peers.zoo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
