"""Proof that the suite works: the oracle passes 100%, a correct float32 port passes, every broken port fails.

Each backend in ``broken_backends.BROKEN`` is one deviation from ``Float32Backend`` modelled on a real
bug (``known-bugs.md``); each runs at float32, float16 and bfloat16 I/O and must fail, in a case of the
bug class it targets. Run with ``-s`` to see the catch rate and the run times.
"""

from __future__ import annotations

import time

import broken_backends as bb
import pytest
from rope_ref.conformance.golden import load_golden
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner

# The broken backends overflow float16 on purpose (positions above 65504).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def cases():
    return load_golden()


@pytest.fixture(scope="module")
def catches():
    return {}


def test_oracle_passes_100_percent_quickly(cases):
    start = time.perf_counter()
    report = Runner(OracleBackend()).run(cases)
    elapsed = time.perf_counter() - start
    counts = report.counts()
    assert report.ok, report.failure_details()
    assert counts["unsupported"] == 0 and counts["passed"] > 0
    # Every case written for the oracle's float64 I/O (or for no I/O dtype) runs and passes.
    assert counts["passed"] == sum(c.io_dtype in (None, "float64") for c in cases)
    assert elapsed < 60.0


@pytest.mark.parametrize("io", ["float32", "float16", "bfloat16"])
def test_correct_float32_port_passes(cases, io):
    report = Runner(bb.Float32Backend(io)).run(cases)
    assert report.ok, report.failure_details()
    assert report.counts()["unsupported"] == 0


IOS = ("float32", "float16", "bfloat16")


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bb.BROKEN, ids=lambda c: c.__name__)
def test_every_broken_backend_fails_its_target(cases, catches, broken, io):
    """Every broken port fails at every I/O dtype, and in a case of each bug class it targets."""
    start = time.perf_counter()
    report = Runner(broken(io)).run(cases)
    failed = report.failures
    classes = sorted({r.bug_class for r in failed})
    catches[broken.__name__, io] = (len(failed), classes, time.perf_counter() - start)
    assert failed, f"{broken.__name__} passed the suite at io {io}: {broken.__doc__}"
    assert broken.targets, f"{broken.__name__} names no target bug class"
    missed = [t for t in broken.targets if t not in classes]
    assert not missed, f"{broken.__name__} at io {io}: no failing case of its target class(es) {missed}"
    for r in failed:  # every failure says where and by how much, and how to reproduce it
        assert r.reproducer.startswith("rope-ref conformance run")
        assert r.kind and (r.worst is not None or r.message)


def test_catch_rate(catches, capsys):
    assert len(catches) == len(bb.BROKEN) * len(IOS), "run the whole module so every broken backend is tried"
    caught = sum(n > 0 for n, _, _ in catches.values())
    on_target = sum(
        all(t in classes for t in getattr(bb, name).targets) for (name, _), (_, classes, _) in catches.items()
    )
    with capsys.disabled():
        print(
            f"\ncatch rate: {caught}/{len(catches)} (broken backend, io dtype) runs fail the shipped suite, "
            f"{on_target}/{len(catches)} in their target bug class"
        )
        for (name, io), (n, classes, seconds) in catches.items():
            print(f"  {name:20s} {io:8s} {n:3d} failing cases in {seconds:.2f}s: {', '.join(classes)}")
    assert caught == on_target == len(catches)
