"""``rope-ref golden generate | verify``: write golden vectors, or check a golden directory.

``generate --out DIR`` writes the built-in catalogue (the shipped set). With ``--preset NAME`` or
``--hf-config FILE --layout L`` it writes golden vectors for that model's RoPE and the given shapes, in
the same format, for testing a port in another language. ``verify [DIR]`` checks schema, checksums and
that the data matches a fresh float64 regeneration (default DIR: the shipped set).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

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
        "--format",
        choices=("safetensors", "npz"),
        default="safetensors",
        help="tensor file format (default safetensors; npz is written without pickle)",
    )
    src = gen.add_mutually_exclusive_group()
    src.add_argument("--preset", help="a named model preset (see rope_ref.presets)")
    src.add_argument("--hf-config", help="a Hugging Face config.json to take the RoPE settings from")
    gen.add_argument("--layout", choices=LAYOUTS, help="channel pairing (required with --hf-config)")
    gen.add_argument("--shape", help="activation shape B,S,H,D for apply/apply_vjp (default 1,8,2,head_dim)")
    gen.add_argument("--positions", help="S positions, e.g. '0:8' or '0,1,4095,4096' (default 0..S-1)")
    gen.add_argument(
        "--dtype", default="fp32", help="activation dtype: fp64, fp32, fp16 or bf16 (default fp32)"
    )
    gen.add_argument(
        "--ops", help="comma-separated ops (default inv_freq,attention_factor,cos_sin,apply,apply_vjp)"
    )
    ver = sub.add_parser(
        "verify",
        help="check a golden directory (default: the shipped set)",
        description="Check schema, sha256 checksums and data against a fresh regeneration.",
    )
    ver.add_argument("directory", nargs="?", default=None, help="golden directory (default: the shipped set)")


def _generator_command(args: argparse.Namespace) -> str:
    parts = ["rope-ref", "golden", "generate"]
    for flag in ("preset", "hf_config", "layout", "shape", "positions", "ops"):
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


def _custom_config(args: argparse.Namespace):
    if args.preset:
        import rope_ref

        preset = getattr(rope_ref, "preset", None)
        if preset is None:
            raise ValueError("--preset: this rope_ref has no presets (rope_ref.preset is missing)")
        if args.layout is not None:
            raise ValueError("--layout cannot be combined with --preset (the preset fixes the layout)")
        return preset(args.preset)
    if args.layout is None:
        raise ValueError("--hf-config needs --layout (half or interleaved): HF configs do not say which")
    from ..config import RopeConfig

    path = Path(args.hf_config)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"--hf-config: cannot read {path} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--hf-config: {path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--hf-config: {path} must hold a JSON object")
    return RopeConfig.from_hf(config, layout=args.layout)


def _parse_shape(spec: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in spec.split(","))
    except ValueError:
        raise ValueError(f"--shape must be four integers B,S,H,D, got {spec!r}") from None
    if len(shape) != 4:
        raise ValueError(f"--shape must be four integers B,S,H,D, got {spec!r}")
    return shape


def _generate(args: argparse.Namespace) -> int:
    from . import catalogue, golden

    custom = args.preset is not None or args.hf_config is not None
    if not custom:
        extra = [f for f in ("layout", "shape", "positions", "ops") if getattr(args, f) is not None]
        if extra or args.dtype != "fp32":
            flags = ", ".join("--" + f for f in extra + (["dtype"] if args.dtype != "fp32" else []))
            raise ValueError(f"{flags} only apply with --preset or --hf-config")
        cases = catalogue.build_catalogue()
        source = "catalogue"
    else:
        from ..cli.common import parse_positions

        cfg = _custom_config(args)
        shape = _parse_shape(args.shape) if args.shape else None
        positions = parse_positions(args.positions) if args.positions else None
        if shape is None and positions is not None:
            shape = (1, positions.shape[0], 2, cfg.head_dim)
        ops = [o.strip() for o in args.ops.split(",")] if args.ops else list(catalogue.CUSTOM_OPS)
        cases = catalogue.custom_cases(
            cfg,
            shape=shape,
            positions=positions,
            io_dtype=canonical_dtype(args.dtype, "--dtype"),
            ops=ops,
            name=args.preset or "hf_config",
        )
        source = "custom"
    out = golden.write_golden(
        cases, args.out, generator=_generator_command(args), source=source, fmt=args.format
    )
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"wrote {len(cases)} cases to {out} ({size / 1e6:.2f} MB, {args.format})")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from . import golden

    where = args.directory or str(golden.shipped_dir())
    try:
        report = golden.verify_golden(args.directory)
    except golden.GoldenError as exc:
        print(f"rope-ref golden verify: FAILED before any check ran: {exc}", file=sys.stderr)
        return 1
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


def run(args: argparse.Namespace) -> int:
    if args.golden_command == "generate":
        return _generate(args)
    return _verify(args)
