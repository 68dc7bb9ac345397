"""``rope-ref table``: inverse frequencies and the cos/sin table, for checking a port by hand."""

from __future__ import annotations

import argparse

import numpy as np

from ..frequencies import attention_factor, cos_sin, inv_freq
from .common import add_config_arguments, config_from_args, parse_positions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, layout_required=False)
    parser.add_argument("--positions", default="0:4", help="positions, e.g. '0,1,2' or '0:8' (default 0:4)")
    parser.add_argument("--digits", type=int, default=6, help="decimal digits to print (default 6)")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.digits <= 17:
        raise ValueError(f"--digits must be between 0 and 17, got {args.digits}")
    cfg = config_from_args(args)
    positions = parse_positions(args.positions)
    freqs = inv_freq(cfg)
    cos, sin = cos_sin(positions, cfg)
    d = args.digits
    print(
        f"head_dim={cfg.head_dim} rotary_dim={cfg.rotary_dim} base={cfg.base:g} "
        f"attention_factor={attention_factor(cfg):g}  (float64)"
    )
    print("inv_freq[i] = base^(-2i/rotary_dim):")
    for i, f in enumerate(freqs):
        print(f"  i={i:<4d} {f:.{d}f}")
    header = "  ".join(f"{'pair ' + str(i):>{2 * d + 8}}" for i in range(freqs.size))
    print(f"\n(cos, sin) per pair:\n{'position':>10}  {header}")
    for m, c_row, s_row in zip(positions, cos, sin, strict=True):
        cells = "  ".join(f"({c:+.{d}f},{s:+.{d}f})" for c, s in zip(c_row, s_row, strict=True))
        print(f"{m!s:>10}  {cells}")
    return 0 if np.all(np.isfinite(cos)) else 1
