"""``rope-ref golden generate | verify``: write golden vectors, or check a golden directory.

``generate --out DIR`` writes the built-in catalogue (the shipped set). With ``--preset NAME`` (a 1D,
M-RoPE, vision, MLA or per-layer preset) or ``--hf-config FILE`` it writes golden vectors for that model's
RoPE and the given shapes, in the same format, for testing a port in another language. ``verify [DIR]``
checks schema, checksums and that the data matches a fresh float64 regeneration (default DIR: the shipped
set).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from pathlib import Path

from ..cli.common import read_json_config
from ..config import LAYOUTS
from .protocol import canonical_dtype


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="golden_command", metavar="ACTION", required=True)
    gen = sub.add_parser(
        "generate",
        help="write a golden directory (the catalogue, or your model's settings)",
        description="Write golden vectors. Deterministic: the same command gives identical files.",
    )
    gen.add_argument("--out", required=True, help="output directory (created if missing)")
    gen.add_argument(
        "--force",
        action="store_true",
        help="also write into a non-empty directory that is not a golden set (files that are not "
        "rope-ref's own are still never replaced or removed)",
    )
    gen.add_argument(
        "--replace",
        action="store_true",
        help="replace the whole set in --out (by default a --preset/--hf-config run replaces only the "
        "cases of its --name and keeps every other case; a run that would drop cases it does not own, "
        "such as the catalogue over a custom set or another --format, is refused without this flag)",
    )
    gen.add_argument(
        "--format",
        choices=("safetensors", "npz"),
        default="safetensors",
        help="tensor file format (default safetensors; npz is written without pickle)",
    )
    src = gen.add_mutually_exclusive_group()
    src.add_argument(
        "--preset",
        help=f"a named model preset (1D, M-RoPE, vision, MLA or per-layer): {', '.join(_preset_names())}",
    )
    src.add_argument("--hf-config", help="a Hugging Face config.json to take the RoPE settings from")
    gen.add_argument(
        "--name",
        help="the set's name, used in its case ids ({op}-NAME[-dtype]; default: the preset, else the "
        "config's _name_or_path or model_type). Generating into an existing set replaces the cases of "
        "this name and keeps the others, so sets for different models merge into one directory",
    )
    gen.add_argument(
        "--layout", choices=LAYOUTS, help="channel pairing (with --hf-config, if the config does not fix it)"
    )
    gen.add_argument("--shape", help="activation shape B,S,H,D for apply/apply_vjp (default 1,8,2,head_dim)")
    gen.add_argument(
        "--positions",
        help="S positions, e.g. '0:8' or '0,1,4095,4096' (default: not 0..S-1 but the S most "
        "precision-revealing positions for the model: 257, 2049, 4097 and the neighbours of its original "
        "context, then consecutive positions beyond it)",
    )
    gen.add_argument(
        "--dtype", default="fp32", help="activation dtype: fp64, fp32, fp16 or bf16 (default fp32)"
    )
    gen.add_argument(
        "--ops", help="comma-separated ops (default inv_freq,attention_factor,cos_sin,apply,apply_vjp)"
    )
    ver = sub.add_parser(
        "verify",
        help="check a golden directory (default: the shipped set)",
        description="Check schema, sha256 checksums and data against a fresh regeneration. The set is "
        "untrusted input: its sizes are checked against limits before anything is allocated. Exit status: "
        "0 verified, 1 a case does not match its regeneration, 2 usage error or a set over a --limit, "
        "3 a corrupt, malformed or hostile set.",
    )
    ver.add_argument("directory", nargs="?", default=None, help="golden directory (default: the shipped set)")
    add_limit_argument(ver)


def add_limit_argument(parser: argparse.ArgumentParser) -> None:
    """``--limit NAME=N`` (repeatable): raise a reading limit of :class:`~.golden_limits.ReadLimits`."""
    from .golden_limits import DEFAULT_LIMITS

    defaults = ", ".join(f"{k}={v}" for k, v in vars(DEFAULT_LIMITS).items())
    parser.add_argument(
        "--limit",
        action="append",
        default=None,
        metavar="NAME=N",
        help=f"raise a reading limit of the golden set (repeatable; K/M/G/T suffixes); defaults: {defaults}",
    )


def _preset_names() -> tuple[str, ...]:
    try:
        from ..presets import preset_names
    except ImportError:  # pragma: no cover - only while presets are missing
        return ()
    import importlib

    names = list(preset_names())
    for family, module in _FAMILY_PRESETS.items():
        for name in importlib.import_module(module).preset_names():
            names.append(name if name not in names else f"{family}:{name}")
    return tuple(names)


#: Model families with presets of their own (``rope_ref.hf_config.model_family``) -> the module whose
#: ``preset`` / ``preset_names`` hold them. A 1D preset (``rope_ref.presets``) of the same name comes
#: first; ``--preset FAMILY:NAME`` picks the family's.
_FAMILY_PRESETS = {
    "mrope": "rope_ref.mrope",
    "vision": "rope_ref.vision_rope",
    "mla": "rope_ref.mla",
    "layers": "rope_ref.layers",
}


def _preset_model(name: str):
    """``(family, model)`` of ``--preset NAME``: a 1D preset (family ``rope``), else the M-RoPE, vision,
    MLA or per-layer preset of that name; ``FAMILY:NAME`` names the family."""
    import importlib

    from ..presets import preset_names

    family, sep, bare = name.partition(":")
    if sep and family not in _FAMILY_PRESETS:
        raise ValueError(
            f"--preset {name!r}: unknown family {family!r}; expected one of {sorted(_FAMILY_PRESETS)}"
        )
    if not sep and name in preset_names():
        import rope_ref

        return "rope", rope_ref.preset(name)
    for fam, module in _FAMILY_PRESETS.items():
        if sep and fam != family:
            continue
        table = importlib.import_module(module)
        if (bare if sep else name) in table.preset_names():
            return fam, table.preset(bare if sep else name)
    raise ValueError(f"--preset: unknown preset {name!r}; expected one of {', '.join(_preset_names())}")


#: Exit statuses of ``verify`` and ``conformance run`` (also in ``rope-ref --help``): 0 passed, 1 a case
#: failed, 2 a usage error or a set over a reading limit, 3 a corrupt, malformed or hostile set.
EXIT_FAILED, EXIT_REFUSED, EXIT_CORRUPT = 1, 2, 3

#: Most elements of the activation tensor ``--shape`` may ask for (about 128 MiB in float64).
MAX_SHAPE_ELEMENTS = 2**24


def _generator_command(args: argparse.Namespace) -> str:
    parts = ["rope-ref", "golden", "generate"]
    for flag in ("preset", "hf_config", "name", "layout", "shape", "positions", "ops"):
        value = getattr(args, flag, None)
        if value is not None:
            value = Path(value).name if flag == "hf_config" else value
            parts += [f"--{flag.replace('_', '-')}", str(value)]
    if args.preset or args.hf_config:
        parts += ["--dtype", args.dtype]
    if args.format != "safetensors":
        parts += ["--format", args.format]
    parts += ["--out", "DIR"]
    return shlex.join(parts)


def _model_name(args: argparse.Namespace, config: dict | None) -> str:
    """The case-id prefix of a custom set: ``--name``, else the preset, else the config's model name."""
    raw = args.name or args.preset
    if raw is None and config is not None:
        raw = Path(str(config.get("_name_or_path") or "")).name or config.get("model_type")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(raw or "hf_config")).strip("-.") or "hf_config"
    return name[:64]


def _custom_config(args: argparse.Namespace):
    """``(RopeConfig, case-id prefix)`` of a --preset / --hf-config set."""
    if args.preset:
        import rope_ref

        preset = getattr(rope_ref, "preset", None)
        if preset is None:
            raise ValueError("--preset: this rope_ref has no presets (rope_ref.preset is missing)")
        return preset(args.preset), _model_name(args, None)
    from ..config import RopeConfig

    config = read_json_config(args.hf_config)
    for key in ("rope_scaling", "rope_parameters"):
        block = config.get(key)
        for sub in ("rope_type", "type"):
            if isinstance(block, dict) and sub in block and not isinstance(block[sub], str):
                raise ValueError(
                    f"--hf-config {args.hf_config}: {key}.{sub} must be a string such as 'linear', "
                    f"got {block[sub]!r:.80}"
                )
    try:
        return RopeConfig.from_hf(config, layout=args.layout), _model_name(args, config)
    except ValueError as exc:
        if args.layout is None and "layout" in str(exc):
            raise ValueError(f"--hf-config needs --layout (half or interleaved) here: {exc}") from None
        raise
    except (OverflowError, RecursionError) as exc:
        raise ValueError(f"--hf-config {args.hf_config}: a value is out of range ({exc})") from None


#: model family (rope_ref.hf_config.model_family) -> (module of its from_hf, takes layout=)
_READERS = {
    "mrope": ("rope_ref.mrope", False),
    "vision": ("rope_ref.vision_rope", False),
    "mla": ("rope_ref.mla", True),
    "layers": ("rope_ref.layers", True),
    "chatglm-2d": ("rope_ref.multiaxis", True),
}


def _custom_model(args: argparse.Namespace):
    """``(family, model, case-id prefix)``: a 1D --preset or --hf-config is a RopeConfig (family ``rope``);
    a multi-axis, MLA or per-layer --preset is that family's preset (:func:`_preset_model`), and any other
    --hf-config is read by its family's ``from_hf`` (layout from the model type)."""
    if args.preset:
        if args.layout is not None:
            raise ValueError("--layout cannot be combined with --preset (the preset fixes the layout)")
        family, model = _preset_model(args.preset)
        if family != "rope":
            return family, model, _model_name(args, None)
    if args.hf_config:
        import importlib

        from ..hf_config import model_family

        config = read_json_config(args.hf_config)
        try:
            family = model_family(config)
        except (ValueError, TypeError, KeyError):
            family = "rope"  # the 1D reader gives the precise message
        if family in _READERS:
            module, takes_layout = _READERS[family]
            reader = importlib.import_module(module).from_hf
            try:
                model = reader(config, layout=args.layout) if takes_layout else reader(config)
            except (OverflowError, RecursionError) as exc:
                raise ValueError(f"--hf-config {args.hf_config}: a value is out of range ({exc})") from None
            return family, model, _model_name(args, config)
    cfg, name = _custom_config(args)
    return "rope", cfg, name


def _family_cases(args: argparse.Namespace, family: str, model, name: str) -> list:
    """Cases of a multi-axis, MLA or per-layer model (``cases.custom.family_cases``)."""
    from .cases.custom import CUSTOM_OPS, family_cases

    bad = [f"--{f}" for f in ("shape", "positions") if getattr(args, f) is not None]
    if family != "layers" and args.ops is not None:
        bad.append("--ops")
    if bad:
        raise ValueError(f"{', '.join(bad)} apply only to 1D RoPE configs, not to this {family} config")
    kw = {"ops": _parse_ops(args.ops, CUSTOM_OPS)} if args.ops else {}
    return family_cases(family, model, name=name, io_dtype=canonical_dtype(args.dtype, "--dtype"), **kw)


def _parse_shape(spec: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in spec.split(","))
    except ValueError:
        raise ValueError(f"--shape must be four integers B,S,H,D, got {spec!r}") from None
    if len(shape) != 4:
        raise ValueError(f"--shape must be four integers B,S,H,D, got {spec!r}")
    if min(shape) < 1:
        raise ValueError(f"--shape must be four positive integers B,S,H,D, got {spec!r}")
    n = math.prod(shape)
    if n > MAX_SHAPE_ELEMENTS:
        raise ValueError(
            f"--shape {spec} has {n} elements ({n * 8 / 2**30:.4g} GiB per float64 tensor); the limit is "
            f"{MAX_SHAPE_ELEMENTS} elements ({MAX_SHAPE_ELEMENTS * 8 / 2**20:.0f} MiB)"
        )
    return shape


def _parse_ops(spec: str, known: tuple[str, ...]) -> list[str]:
    ops = [o.strip() for o in spec.split(",")]
    unknown = [o for o in ops if o not in known]
    if unknown or not ops:
        raise ValueError(f"--ops must be a comma-separated subset of {','.join(known)}, got {spec!r}")
    dup = sorted({o for o in ops if ops.count(o) > 1})
    if dup:
        raise ValueError(f"--ops: {dup[0]!r} is listed more than once in {spec!r}")
    return ops


def _generate(args: argparse.Namespace) -> int:
    from . import catalogue, golden

    custom = args.preset is not None or args.hf_config is not None
    if not custom:
        extra = [f for f in ("name", "layout", "shape", "positions", "ops") if getattr(args, f) is not None]
        if extra or args.dtype != "fp32":
            flags = ", ".join("--" + f for f in extra + (["dtype"] if args.dtype != "fp32" else []))
            raise ValueError(f"{flags} only apply with --preset or --hf-config")
        cases = catalogue.build_catalogue()
        source = "catalogue"
    else:
        from ..cli.common import parse_positions

        shape = _parse_shape(args.shape) if args.shape else None
        family, model, name = _custom_model(args)
        if family != "rope":
            cases = _family_cases(args, family, model, name)
        cfg = model
        positions = parse_positions(args.positions) if args.positions else None
        if shape is None and positions is not None:
            shape = (1, positions.shape[0], 2, cfg.head_dim)
        ops = _parse_ops(args.ops, catalogue.CUSTOM_OPS) if args.ops else list(catalogue.CUSTOM_OPS)
        if family == "rope":
            cases = catalogue.custom_cases(
                cfg,
                shape=shape,
                positions=positions,
                io_dtype=canonical_dtype(args.dtype, "--dtype"),
                ops=ops,
                name=name,
            )
        source = "custom"
    out = golden.write_golden(
        cases,
        args.out,
        generator=_generator_command(args),
        source=source,
        fmt=args.format,
        force=args.force,
        group=name if custom else None,
        replace=args.replace,
    )
    _, manifest = golden.read_manifest(out)
    names = [golden.MANIFEST] + [c["file"] for c in manifest["cases"]]
    size = sum((out / n).stat().st_size for n in names)
    kept = len(manifest["cases"]) - len(cases)
    also = f", keeping {kept} other case(s)" if kept else ""
    print(f"wrote {len(cases)} cases to {out} ({size / 1e6:.2f} MB, {args.format}){also}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from . import golden

    where = args.directory or str(golden.shipped_dir())
    limits = golden.parse_limits(args.limit)
    try:
        report = golden.verify_golden(args.directory, limits)
    except golden.GoldenLimitError as exc:
        print(f"rope-ref golden verify: refused: {_one_line(exc)}", file=sys.stderr)
        return EXIT_REFUSED
    except golden.GoldenError as exc:
        print(f"rope-ref golden verify: FAILED: {_one_line(exc)}", file=sys.stderr)
        return EXIT_CORRUPT
    except MemoryError:
        print(f"rope-ref golden verify: FAILED: {where}: out of memory reading the set", file=sys.stderr)
        return EXIT_CORRUPT
    for note in report.notes:
        print(f"note: {note}")
    for problem in report.problems:
        print(f"FAIL {problem}")
    status = "OK" if report.ok else f"FAILED ({len(report.problems)} problem(s))"
    print(
        f"{where}: {report.n_cases} cases, schema and sha256 checksums valid; regeneration worst "
        f"|diff|/tol = {report.worst_ratio:.3g}: {status}"
    )
    return 0 if report.ok else 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def run(args: argparse.Namespace) -> int:
    if args.golden_command == "generate":
        return _generate(args)
    return _verify(args)
