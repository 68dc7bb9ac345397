"""Generating into an existing golden set: which cases a run replaces, which it keeps.

A ``--preset`` / ``--hf-config`` run owns the cases of its name (``{op}-{name}`` and
``{op}-{name}-{fp64,fp32,fp16,bf16}``): it replaces those and keeps every other case of the set, with a
manifest listing both. The catalogue owns the whole of a catalogue set. A run that would drop cases it
does not own (a catalogue set over a custom one, another format) is refused unless ``replace``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .golden_manifest import GoldenError, validate_manifest
from .golden_target import GoldenWriteError

__all__ = ["in_group", "merge_sets"]

_DTYPE_SUFFIXES = ("fp64", "fp32", "fp16", "bf16")


def in_group(entry: dict[str, Any], name: str) -> bool:
    """Whether the manifest entry ``entry`` is a case of the custom set called ``name``."""
    stem = f"{entry['op']}-{name}"
    case_id = entry["id"]
    return case_id == stem or (case_id.startswith(stem + "-") and case_id[len(stem) + 1 :] in _DTYPE_SUFFIXES)


def _group_of(entry: dict[str, Any]) -> str:
    """The set name a custom case id carries (``{op}-{name}[-{dtype}]``)."""
    rest = entry["id"][len(entry["op"]) + 1 :] if entry["id"].startswith(entry["op"] + "-") else entry["id"]
    head, _, tail = rest.rpartition("-")
    return head if head and tail in _DTYPE_SUFFIXES else rest


def _generators(manifest: dict[str, Any]) -> dict[str, str]:
    """``{set name: command}`` of the runs that wrote ``manifest`` (recorded since merging exists)."""
    info = manifest["provenance"].get("informational", {})
    recorded = info.get("generators") if isinstance(info, dict) else None
    if isinstance(recorded, dict) and all(isinstance(v, str) for v in recorded.values()):
        return dict(recorded)
    names = {_group_of(e) for e in manifest["cases"]}
    key = names.pop() if len(names) == 1 else ""
    return {key: manifest["provenance"]["generator"]}


def _refuse(out: Path, what: str) -> GoldenWriteError:
    return GoldenWriteError(
        f"--out {out}: {what}; generating there would drop cases this run does not own. Pass --replace to "
        f"replace the whole set, or choose another --out (sets merge only by --name, in one format)"
    )


def merge_sets(
    out: Path,
    old: dict[str, Any],
    new: dict[str, Any],
    group: str | None,
    *,
    command: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(kept entries, merged manifest)`` for writing ``new`` (a run for set ``group``) over ``old``.

    ``group is None`` is a run that owns the whole set (the catalogue, or the Python API without a
    group). Raises :class:`GoldenWriteError` when the run would drop cases it does not own.
    """
    old_source, new_source = old["provenance"]["source"], new["provenance"]["source"]
    if old["format"] != new["format"] and old["cases"]:
        raise _refuse(out, f"it holds a {old['format']} set and this run writes {new['format']}")
    if group is None:
        if new_source == "catalogue" and old_source != "catalogue" and old["cases"]:
            raise _refuse(out, f"it holds a custom set of {len(old['cases'])} case(s), not the catalogue")
        return [], new
    if old_source == "catalogue" and old["cases"]:
        raise _refuse(
            out, f"it holds the catalogue ({len(old['cases'])} cases), not a --preset/--hf-config set"
        )
    kept = [e for e in old["cases"] if not in_group(e, group)]
    if not kept:
        return [], new
    new_ids = {e["id"] for e in new["cases"]}
    clash = next((e["id"] for e in kept if e["id"] in new_ids), None)
    if clash is not None:
        raise _refuse(out, f"its case {clash!r} has the id of a case this run writes")
    generators = {k: v for k, v in _generators(old).items() if k != group}
    generators[group] = command
    used = {e["bug_class"] for e in kept} | {e["bug_class"] for e in new["cases"]}
    classes = {**old["bug_classes"], **new["bug_classes"]}
    provenance = dict(new["provenance"])
    provenance["generator"] = " && ".join(generators.values())
    provenance["informational"] = {**provenance.get("informational", {}), "generators": generators}
    merged = {
        **new,
        "provenance": provenance,
        "bug_classes": {k: v for k, v in sorted(classes.items()) if k in used},
        "cases": kept + new["cases"],
    }
    try:
        validate_manifest(merged, "the merged manifest")
    except GoldenError as exc:
        raise _refuse(out, f"its other cases cannot be kept ({exc})") from None
    return kept, merged
