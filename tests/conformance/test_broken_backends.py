"""Proof that the suite works: the oracle passes 100%, a correct float32 port passes, every broken port fails.

Each backend in ``broken_backends.BROKEN`` is one deviation from ``Float32Backend`` modelled on a real
bug (``docs/known-bugs.md``); each runs at float32, float16 and bfloat16 I/O and must fail, in a case of the
bug class it targets. Run with ``-s`` to see the catch rate.
"""

from __future__ import annotations

import broken_backends as bb
import pytest
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner, select_cases

# The broken backends overflow float16 on purpose (positions above 65504).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


IOS = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def catches(cases):
    """``run(broken, io) -> (failed results, bug classes)``, memoised: each pair runs once per module,
    whichever test asks first, so no test depends on another having run (or on the order)."""
    memo: dict[tuple[str, str], tuple[list, list[str]]] = {}

    def run(broken, io: str) -> tuple[list, list[str]]:
        key = (broken.__name__, io)
        if key not in memo:
            failed = Runner(broken(io)).run(cases).failures
            memo[key] = (failed, sorted({r.bug_class for r in failed}))
        return memo[key]

    return run


def test_oracle_passes_100_percent(cases):
    report = Runner(OracleBackend()).run(cases)
    counts = report.counts()
    assert report.ok, report.failure_details()
    assert counts["unsupported"] == 0 and counts["passed"] > 0
    # Every case written for the oracle's float64 I/O (or for no I/O dtype) runs and passes.
    assert counts["passed"] == sum(c.io_dtype in (None, "float64") for c in cases)


@pytest.mark.parametrize("io", ["float32", "float16", "bfloat16"])
def test_correct_float32_port_passes(cases, io):
    report = Runner(bb.Float32Backend(io)).run(cases)
    assert report.ok, report.failure_details()
    assert report.counts()["unsupported"] == 0


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bb.BROKEN, ids=lambda c: c.__name__)
@pytest.mark.slow
def test_every_broken_backend_fails_its_target(catches, broken, io):
    """Every broken port fails at every I/O dtype, and in a case of each bug class it targets."""
    failed, classes = catches(broken, io)
    assert failed, f"{broken.__name__} passed the suite at io {io}: {broken.__doc__}"
    assert broken.targets, f"{broken.__name__} names no target bug class"
    missed = [t for t in broken.targets if t not in classes]
    assert not missed, f"{broken.__name__} at io {io}: no failing case of its target class(es) {missed}"
    for r in failed:  # every failure says where and by how much, and how to reproduce it
        assert r.reproducer.startswith("rope-ref conformance run")
        assert r.kind and (r.worst is not None or r.message)


@pytest.mark.slow
def test_catch_rate(catches, capsys):
    """Runs (or reuses) every (broken backend, io) pair itself: correct alone, in any order."""
    table = {(broken.__name__, io): catches(broken, io) for broken in bb.BROKEN for io in IOS}
    caught = sum(bool(failed) for failed, _ in table.values())
    on_target = sum(
        all(t in classes for t in getattr(bb, name).targets) for (name, _), (_, classes) in table.items()
    )
    with capsys.disabled():
        print(
            f"\ncatch rate: {caught}/{len(table)} (broken backend, io dtype) runs fail the shipped suite, "
            f"{on_target}/{len(table)} in their target bug class"
        )
        for (name, io), (failed, classes) in table.items():
            print(f"  {name:20s} {io:8s} {len(failed):3d} failing cases: {', '.join(classes)}")
    assert caught == on_target == len(table) == len(bb.BROKEN) * len(IOS)


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bb.BROKEN_ISSUE15 + bb.BROKEN_ISSUE20, ids=lambda c: c.__name__)
def test_broken_backend_fails_its_family_alone(cases, broken, io):
    """Each backend of issues 15 and 20 fails its one family from that family's cases alone, with a
    reproducer and a worst element or message; a correct float32 port passes exactly those cases."""
    (family,) = broken.targets
    pattern = "|".join(f"^{c.id}$" for c in cases if c.bug_class == family).replace(".", r"\.")
    chosen = select_cases(cases, pattern)
    report = Runner(broken(io)).run(chosen)
    assert any(r.bug_class == family for r in report.failures), f"{broken.__name__} passed {family} at {io}"
    for r in report.failures:
        assert r.reproducer.startswith("rope-ref conformance run") and (r.worst is not None or r.message)
    assert Runner(bb.Float32Backend(io)).run(chosen).ok
