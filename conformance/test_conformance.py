"""The conformance suite under pytest, one test per golden case id.

Run with ``pytest --pyargs rope_ref.conformance --rope-backend NAME`` (options come from
``rope_ref.conformance.pytest_plugin``). Imports are absolute on purpose: pytest may import this file
under another package name, and the backend classes must come from ``rope_ref.conformance``.
"""

from __future__ import annotations

import warnings

import pytest


def _option(config, name: str):
    try:
        return config.getoption(name)
    except ValueError:  # the plugin is not loaded (package not installed with its entry point)
        return None


def pytest_generate_tests(metafunc) -> None:
    if "rope_case" not in metafunc.fixturenames:
        return
    if _option(metafunc.config, "--rope-backend") is None:
        skip = pytest.mark.skip(reason="no backend chosen: pass --rope-backend NAME (e.g. numpy)")
        metafunc.parametrize("rope_case", [pytest.param(None, marks=skip)], ids=["no-backend"])
        return
    from rope_ref.conformance.golden import load_golden

    cases = load_golden(_option(metafunc.config, "--rope-golden"))
    metafunc.parametrize("rope_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def rope_runner(request):
    from rope_ref.conformance.pytest_plugin import configured_backend
    from rope_ref.conformance.registry import BackendUnavailable, get_backend
    from rope_ref.conformance.runner import DEFAULT_TIMEOUT, Runner

    config = request.config
    name = _option(config, "--rope-backend")
    precision = _option(config, "--rope-precision")
    backend = configured_backend(config)  # resolved once by the plugin at start-up
    if backend is None:  # the plugin did not run (not installed with its entry point)
        try:
            backend = get_backend(name, precision)
        except BackendUnavailable as exc:
            backend = exc
    if isinstance(backend, BackendUnavailable):
        pytest.skip(f"backend {name!r} unavailable: {backend}")
    timeout = _option(config, "--rope-timeout") or DEFAULT_TIMEOUT
    return Runner(
        backend, timeout=timeout, spec=name, precision=precision, golden=_option(config, "--rope-golden")
    )


@pytest.fixture(scope="session")
def rope_cases_by_id(request):
    from rope_ref.conformance.golden import load_golden

    return {c.id: c for c in load_golden(_option(request.config, "--rope-golden"))}


@pytest.fixture(scope="session")
def rope_xfails(request):
    from rope_ref.conformance.runner import load_xfails

    path = _option(request.config, "--rope-xfails")
    return load_xfails(path) if path else {}


def _run_prerequisites(case, runner, by_id) -> None:
    """Cases ``case`` requires run first on the same instance (e.g. under ``-k``), once per session."""
    for req in case.requires:
        if req not in runner.executed:
            _run_prerequisites(by_id[req], runner, by_id)
            runner.run_case(by_id[req])  # its own verdict is reported by its own test


def test_case(rope_case, rope_runner, rope_xfails, rope_cases_by_id, request):
    from rope_ref.conformance.pytest_plugin import record_result
    from rope_ref.conformance.runner import SuiteReport, _xfail_reason

    _run_prerequisites(rope_case, rope_runner, rope_cases_by_id)
    result = rope_runner.run_case(rope_case)
    match = _xfail_reason(rope_case.id, rope_xfails)
    if match is not None and result.status in ("failed", "passed"):
        result.status = "xfailed" if result.status == "failed" else "xpassed"
        result.xfail_reason = match[1]
    record_result(request.config, result)
    if result.status == "skipped":
        pytest.skip(result.message)
    if result.status == "unsupported":
        pytest.skip(f"unsupported (not a pass): {result.message}")
    if match is not None:
        if result.status == "xfailed":
            pytest.xfail(match[1])
        warnings.warn(f"stale xfail: {rope_case.id} passed (entry {match[0]!r}: {match[1]})", stacklevel=1)
    if result.status == "failed":
        report = SuiteReport({}, [result], [], result.duration)
        pytest.fail(report.failure_details(), pytrace=False)
