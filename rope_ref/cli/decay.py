"""``rope-ref decay``: plot RoFormer's long-term-decay bound (§3.4.3) for one or more configs.

Curves: one per ``--base`` (no scaling), plus one per ``--scaling SPEC`` applied to the first base, or to
the base named after ``@`` (``--scaling yarn:8:4096@500000``). SPEC syntax (see ``docs/decay.md``):

    linear:FACTOR               position interpolation, Linear(FACTOR)
    ntk:ALPHA                   NTK-aware base change, NTKAware(ALPHA)
    dynamic:FACTOR:ORIG         dynamic NTK, DynamicNTK(FACTOR, ORIG)
    yarn:FACTOR:ORIG            YaRN, YaRN(FACTOR, ORIG)
    llama3:FACTOR:ORIG          Llama 3.1, Llama3(FACTOR, 1, 4, ORIG) (Meta's low/high frequency factors)
    llama3:FACTOR:LOW:HIGH:ORIG Llama3(FACTOR, LOW, HIGH, ORIG)
"""

from __future__ import annotations

import argparse
import csv
import sys

import numpy as np

from ..config import LAYOUTS, RopeConfig
from ..decay import config_label, decay_distances, plot_decay, relative_upper_bound

# Distances printed in the summary table (those <= --max-distance).
_TABLE_DISTANCES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _whole(value: float, name: str) -> int:
    if value != int(value):
        raise ValueError(f"--scaling: {name} must be a whole number, got {value:g}")
    return int(value)


def _scaling_factories() -> dict:
    """name -> {number of numeric arguments: constructor}, from :mod:`rope_ref.scaling` (imported lazily)."""
    from .. import scaling as sc

    return {
        "linear": {1: lambda f: sc.Linear(f)},
        "ntk": {1: lambda a: sc.NTKAware(a)},
        "dynamic": {2: lambda f, o: sc.DynamicNTK(f, _whole(o, "ORIG"))},
        "yarn": {2: lambda f, o: sc.YaRN(f, _whole(o, "ORIG"))},
        # Meta's Llama 3.1 release uses low_freq_factor 1 and high_freq_factor 4.
        "llama3": {
            2: lambda f, o: sc.Llama3(f, 1.0, 4.0, _whole(o, "ORIG")),
            4: lambda f, lo, hi, o: sc.Llama3(f, lo, hi, _whole(o, "ORIG")),
        },
    }


def parse_scaling(spec: str):
    """Parse ``NAME:ARG[:ARG...]`` into ``(scaling, base or None)``; ``@BASE`` at the end picks the base."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"--scaling must look like 'linear:4' or 'yarn:8:4096', got {spec!r}")
    body, _, base_text = spec.strip().partition("@")
    base = None
    if base_text:
        try:
            base = float(base_text)
        except ValueError:
            raise ValueError(f"--scaling {spec!r}: cannot parse base {base_text!r} after '@'") from None
    name, *raw = body.split(":")
    factories = _scaling_factories()
    if name not in factories:
        raise ValueError(f"--scaling {spec!r}: unknown type {name!r}; known: {', '.join(factories)}")
    makers = factories[name]
    if len(raw) not in makers:
        counts = " or ".join(str(n) for n in makers)
        raise ValueError(f"--scaling {spec!r}: {name} takes {counts} number(s) after the name, got {raw}")
    try:
        values = [float(v) for v in raw]
    except ValueError:
        raise ValueError(f"--scaling {spec!r}: arguments must be numbers, got {raw}") from None
    return makers[len(raw)](*values), base


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--head-dim", type=int, required=True, help="head dimension (even)")
    add("--rotary-dim", type=int, default=None, help="rotated channels (default: head dim)")
    add("--layout", choices=LAYOUTS, default="half", help="channel pairing (does not change the bound)")
    add("--base", type=float, action="append", default=None, help="RoPE base; repeatable (default 1e4)")
    add(
        "--scaling", action="append", default=[], metavar="SPEC",
        help="add a scaled curve (repeatable): linear:F, ntk:A, dynamic:F:O, yarn:F:O, llama3:F:O [@BASE]",
    )
    add("--max-distance", type=float, default=256.0, help="largest relative distance (default 256)")
    add("--step", type=float, default=1.0, help="distance step (default 1; may be fractional)")
    add("--log-x", action="store_true", help="symmetric-log distance axis")
    add("--window", type=int, default=1, help="plot a moving mean over this many distances (default 1: raw)")
    add("--title", default=None, help="figure title")
    add("--out", default=None, help="PNG file to write (needs matplotlib)")
    add("--csv", default=None, help="CSV file of the curves (distance, one column per curve)")


def build_configs(args: argparse.Namespace) -> list[RopeConfig]:
    """The configs the command plots, in legend order."""
    bases = args.base or [10000.0]
    configs = [
        RopeConfig(args.head_dim, layout=args.layout, rotary_dim=args.rotary_dim, base=b) for b in bases
    ]
    for spec in args.scaling:
        scaling, base = parse_scaling(spec)
        configs.append(
            RopeConfig(
                args.head_dim, layout=args.layout, rotary_dim=args.rotary_dim,
                base=bases[0] if base is None else base, scaling=scaling,
            )
        )
    return configs


def run(args: argparse.Namespace) -> int:
    if args.window < 1:
        raise ValueError(f"--window must be >= 1, got {args.window}")
    configs = build_configs(args)
    distances = decay_distances(args.max_distance, args.step)
    labels = [config_label(c) for c in configs]
    curves = [relative_upper_bound(distances, c) for c in configs]
    shown = [d for d in _TABLE_DISTANCES if d <= distances[-1]]
    idx = np.searchsorted(distances, shown)
    print("RoFormer relative upper bound (1/(d/2)) sum_j |S_j(r)|  (arXiv 2104.09864 §3.4.3)")
    width = max(len(s) for s in labels)
    print(f"{'config':<{width}}  " + "  ".join(f"{'r=' + format(distances[i], 'g'):>9}" for i in idx))
    for label, curve in zip(labels, curves, strict=True):
        print(f"{label:<{width}}  " + "  ".join(f"{curve[i]:>9.4f}" for i in idx))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["distance", *labels])
            for row in zip(distances, *curves, strict=True):
                writer.writerow([repr(float(v)) for v in row])
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.out:
        plot_decay(
            configs, args.max_distance, step=args.step, log_x=args.log_x, window=args.window,
            title=args.title, path=args.out,
        )
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
