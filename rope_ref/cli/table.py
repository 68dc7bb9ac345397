"""``rope-ref table``: inverse frequencies and the cos/sin table, for checking a port by hand.

The config comes from ``--head-dim`` (with ``--layout``, ``--rotary-dim``, ``--base`` and optionally
``--scaling SPEC``, the syntax of ``rope-ref decay``), or from ``--preset NAME``, or from ``--hf-config
FILE``. Wide tables are printed in blocks of pairs that fit ``--width`` columns (default: the terminal's).
"""

from __future__ import annotations

import argparse
import shutil

import numpy as np

from ..config import LAYOUTS, RopeConfig
from ..frequencies import attention_factor, cos_sin, inv_freq
from .common import parse_positions, read_json_config

#: Narrowest ``--width`` accepted (one pair column plus the position column fit in it).
MIN_WIDTH = 40
MAX_WIDTH = 100_000


def _preset_names() -> tuple[str, ...]:
    from ..presets import preset_names

    return preset_names()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--head-dim", type=int, default=None, help="head dimension (even)")
    src.add_argument("--preset", default=None, help=f"a named model preset: {', '.join(_preset_names())}")
    src.add_argument("--hf-config", default=None, metavar="FILE", help="a Hugging Face config.json")
    add("--layout", choices=LAYOUTS, default=None, help="channel pairing (default half with --head-dim)")
    add("--rotary-dim", type=int, default=None, help="rotated channels (default: head dim; with --head-dim)")
    add("--base", type=float, default=None, help="RoPE base theta (default 10000; with --head-dim)")
    add(
        "--scaling",
        default=None,
        metavar="SPEC",
        help="context scaling (with --head-dim): linear:F, ntk:A, dynamic:F:O, yarn:F:O, llama3:F:O, "
        "llama3:F:LOW:HIGH:O (see rope-ref decay --help)",
    )
    add("--positions", default="0:4", help="positions, e.g. '0,1,2' or '0:8' (default 0:4)")
    add("--digits", type=int, default=6, help="decimal digits to print (default 6)")
    add("--width", type=int, default=None, help="wrap the cos/sin table at this many columns (default: tty)")


def build_config(args: argparse.Namespace) -> RopeConfig:
    """The config named by the arguments (exactly one of --head-dim, --preset, --hf-config)."""
    manual = {
        "--rotary-dim": args.rotary_dim,
        "--base": args.base,
        "--scaling": args.scaling,
    }
    if args.head_dim is None:
        given = [flag for flag, value in manual.items() if value is not None]
        if given:
            raise ValueError(f"{given[0]} only applies with --head-dim (a preset or HF config fixes it)")
    if args.preset is not None:
        from ..presets import preset

        if args.layout is not None:
            raise ValueError("--layout cannot be combined with --preset (the preset fixes the layout)")
        return preset(args.preset)
    if args.hf_config is not None:
        config = read_json_config(args.hf_config)
        try:
            return RopeConfig.from_hf(config, layout=args.layout)
        except ValueError as exc:
            raise ValueError(f"--hf-config {args.hf_config}: {exc}") from None
        except (OverflowError, RecursionError) as exc:
            raise ValueError(f"--hf-config {args.hf_config}: a value is out of range ({exc})") from None
    if args.head_dim is None:
        raise ValueError("give the config: --head-dim D, --preset NAME or --hf-config FILE")
    scaling, base = None, args.base if args.base is not None else 10000.0
    if args.scaling is not None:
        from .decay import parse_scaling

        scaling, at_base = parse_scaling(args.scaling)
        if at_base is not None:
            if args.base is not None and at_base != args.base:
                raise ValueError(
                    f"--scaling {args.scaling!r} names base {at_base:g} but --base is {args.base:g}"
                )
            base = at_base
    return RopeConfig(
        args.head_dim, layout=args.layout or "half", rotary_dim=args.rotary_dim, base=base, scaling=scaling
    )


def _width(requested: int | None) -> int:
    if requested is None:
        return max(MIN_WIDTH, shutil.get_terminal_size(fallback=(120, 24)).columns)
    if not MIN_WIDTH <= requested <= MAX_WIDTH:
        raise ValueError(f"--width must be between {MIN_WIDTH} and {MAX_WIDTH}, got {requested}")
    return requested


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.digits <= 17:
        raise ValueError(f"--digits must be between 0 and 17, got {args.digits}")
    width = _width(args.width)
    cfg = build_config(args)
    positions = parse_positions(args.positions)
    freqs = inv_freq(cfg)
    cos, sin = cos_sin(positions, cfg)
    d = args.digits
    print(
        f"head_dim={cfg.head_dim} rotary_dim={cfg.rotary_dim} layout={cfg.layout} base={cfg.base:g} "
        f"attention_factor={attention_factor(cfg):g}  (float64)"
    )
    if cfg.scaling is not None:
        print(f"scaling: {cfg.scaling!r}")
    print("inv_freq[i] = base^(-2i/rotary_dim)" + (" (scaled):" if cfg.scaling is not None else ":"))
    for i, f in enumerate(freqs):
        print(f"  i={i:<4d} {f:.{d}f}")
    cell = len(f"({1.0:+.{d}f},{1.0:+.{d}f})")
    per_block = max(1, (width - 10) // (cell + 2))  # a row: 10 + k * (2 + cell)
    n = freqs.size
    print("\n(cos, sin) per pair:")
    for start in range(0, n, per_block):
        stop = min(n, start + per_block)
        if n > per_block:
            print(f"pairs {start}..{stop - 1} of {n}:")
        header = "  ".join(f"{'pair ' + str(i):>{cell}}" for i in range(start, stop))
        print(f"{'position':>10}  {header}")
        for m, c_row, s_row in zip(positions, cos, sin, strict=True):
            cells = "  ".join(
                f"({c:+.{d}f},{s:+.{d}f})" for c, s in zip(c_row[start:stop], s_row[start:stop], strict=True)
            )
            print(f"{m!s:>10}  {cells}")
    return 0 if np.all(np.isfinite(cos)) else 1
