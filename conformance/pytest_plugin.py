"""pytest plugin (entry point ``pytest11``): the conformance suite as one pytest test per golden case.

Usage: ``pytest --pyargs rope_ref.conformance --rope-backend NAME [--rope-precision fp32] [--rope-golden DIR]
[--rope-xfails FILE] [--rope-timeout S]``. The plugin adds these options and, only when
``--rope-backend`` is given, resolves the backend once at start-up (``registry.get_backend``, which
also looks for ``module:attr`` modules in the current directory): a backend that cannot be found or
built stops the run with one usage error instead of an error per case; one that is unavailable here
(library or device missing) makes every case skip with the reason. It imports nothing heavy otherwise,
so it is harmless in every other pytest run. The tests live in ``test_conformance.py`` next to this
file and run the same :class:`~rope_ref.conformance.runner.Runner` as ``rope-ref conformance run``;
at the end of the session the plugin prints the same coverage table, skip/unsupported reasons and
verdict line as that command (unsupported cases are pytest skips, but are counted apart there).
"""

from __future__ import annotations

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_terminal_summary",
    "configured_backend",
    "record_result",
]

_BACKEND_ATTR = "_rope_ref_backend"
_RESULTS_ATTR = "_rope_ref_results"


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


def pytest_configure(config) -> None:
    name = config.getoption("--rope-backend", None)
    if name is None:
        return
    import pytest
    from rope_ref.conformance.registry import BackendUnavailable, get_backend

    precision = config.getoption("--rope-precision", None)
    try:
        backend = get_backend(name, precision)
    except BackendUnavailable as exc:
        backend = exc
    except Exception as exc:  # noqa: BLE001 - any failure to build the backend is a usage error
        raise pytest.UsageError(
            f"--rope-backend {name!r}: {exc}"
            + ("" if isinstance(exc, ValueError) else f" ({type(exc).__name__} while building the backend)")
        ) from None
    setattr(config, _BACKEND_ATTR, backend)


def configured_backend(config):
    """The backend resolved at start-up: a Backend, a ``BackendUnavailable`` error, or ``None``."""
    return getattr(config, _BACKEND_ATTR, None)


def record_result(config, result) -> None:
    """Keep one case's :class:`~rope_ref.conformance.report.CaseResult` for the end-of-session summary."""
    results = getattr(config, _RESULTS_ATTR, None)
    if results is None:
        results = []
        setattr(config, _RESULTS_ATTR, results)
    results.append(result)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The conformance report's coverage table, reasons and verdict line, as ``conformance run`` ends."""
    results = getattr(config, _RESULTS_ATTR, None)
    if not results:
        return
    from rope_ref.conformance.report import SuiteReport

    report = SuiteReport({}, list(results), [], sum(r.duration for r in results))
    terminalreporter.section("rope-ref conformance")
    for chunk in (report.reason_lines(), [report.coverage_table(), ""], [report.verdict_line()]):
        for line in "\n".join(chunk).splitlines():
            terminalreporter.write_line(line)
