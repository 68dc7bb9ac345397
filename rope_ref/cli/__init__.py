"""The ``rope-ref`` command line. Each subcommand lives in its own module (listed in SUBCOMMANDS); none of
them imports torch, cupy or matplotlib until it runs."""

from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__

# subcommand name -> (module, one-line help). The module defines add_arguments(parser) and run(args).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "table": ("rope_ref.cli.table", "print inverse frequencies and the cos/sin table for a config"),
    "decay": ("rope_ref.cli.decay", "plot RoFormer's long-term decay bound for one or more configs"),
    "conformance": ("rope_ref.conformance.cli_run", "run the conformance suite against a backend"),
    "golden": ("rope_ref.conformance.cli_golden", "generate or verify golden vectors (safetensors + JSON)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rope-ref",
        description="rope-ref: the float64 RoPE oracle, golden vectors and conformance suite.",
    )
    parser.add_argument("--version", action="version", version=f"rope-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sp = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (ValueError, TypeError, OSError) as exc:
        print(f"rope-ref {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
