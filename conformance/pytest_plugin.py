"""pytest plugin (entry point ``pytest11``): the conformance suite as one pytest test per golden case.

Usage: ``pytest --pyargs rope_ref.conformance --rope-backend NAME [--rope-precision fp32] [--rope-golden DIR]
[--rope-xfails FILE] [--rope-timeout S]``. The plugin only adds these options; it imports nothing
heavy, so it is harmless in every other pytest run. The tests live in ``test_conformance.py`` next to
this file and run the same :class:`~rope_ref.conformance.runner.Runner` as ``rope-ref conformance run``.
"""

from __future__ import annotations

__all__ = ["pytest_addoption"]


def pytest_addoption(parser) -> None:
    group = parser.getgroup("rope-ref", "rope-ref conformance suite")
    group.addoption(
        "--rope-backend",
        default=None,
        metavar="NAME",
        help="backend to check (numpy, torch, module:attr, entry-point name)",
    )
    group.addoption(
        "--rope-precision",
        default=None,
        choices=("fp64", "fp32", "fp16", "bf16"),
        help="precision policy to ask the backend for",
    )
    group.addoption(
        "--rope-golden", default=None, metavar="DIR", help="golden directory (default: shipped set)"
    )
    group.addoption("--rope-xfails", default=None, metavar="FILE", help="expected failures with reasons")
    group.addoption(
        "--rope-timeout", default=None, type=float, metavar="S", help="per-case timeout in seconds"
    )
