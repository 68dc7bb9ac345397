"""The ``rope-ref`` command line. Each subcommand lives in its own module (listed in SUBCOMMANDS); none of
them imports torch, cupy or matplotlib until it runs."""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys

from .. import __version__

# subcommand name -> (module, one-line help). The module defines add_arguments(parser) and run(args).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "table": ("rope_ref.cli.table", "print inverse frequencies and the cos/sin table for a config"),
    "decay": ("rope_ref.cli.decay", "plot RoFormer's long-term decay bound for one or more configs"),
    "conformance": ("rope_ref.conformance.cli_run", "run the conformance suite against a backend"),
    "golden": ("rope_ref.conformance.cli_golden", "generate or verify golden vectors (safetensors + JSON)"),
    "ecosystem": (
        "rope_ref.peers.cli_ecosystem",
        "run the suite against every installed peer library and write docs/results/ecosystem.md",
    ),
    "zoo": (
        "rope_ref.peers.zoo",
        "check every rotary embedding of the installed transformers against the oracle "
        "(docs/results/transformers-zoo.md)",
    ),
}


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit status 2), like every
    other error of ``rope-ref``; ``--help`` still shows the full usage."""

    def error(self, message: str):  # type: ignore[override]
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rope-ref",
        description="rope-ref: the float64 RoPE oracle, golden vectors and conformance suite.",
        epilog="Exit status: 0 passed (every case passed, or the golden set verified); 1 a case failed "
        "(a backend's result, or a stored value against its regeneration); 2 usage error, bad input, or a "
        "golden set over a reading limit (raise it with --limit NAME=N); 3 a corrupt, malformed or hostile "
        "golden set (checksum, schema, symlink, duplicate key, sizes that contradict the files); "
        "130 interrupted; 141 broken pipe. See docs/golden-format.md.",
    )
    parser.add_argument("--version", action="version", version=f"rope-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sp = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


#: Exit status after a broken pipe (128 + SIGPIPE, what a tool killed by SIGPIPE reports).
EXIT_BROKEN_PIPE = 141
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."


def main(argv: list[str] | None = None) -> int:
    """Run ``rope-ref``; errors in the arguments or inputs give one line on stderr and exit status 2.

    A broken pipe (``rope-ref table ... | head``) exits quietly with status 141; Ctrl-C prints one line and
    exits with status 130.
    """
    name = "rope-ref"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        name = f"rope-ref {args.command}"
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's final flush
        return status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, TypeError, OSError, OverflowError) as exc:
        print(f"{name}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
