"""The broken ports of ``tests/broken_grids_and_wrappers.py``: each fails its own family, at every I/O
dtype, and no case of any other family; the correct float32 port passes those families.
"""

from __future__ import annotations

import broken_backends as bb
import broken_grids_and_wrappers as bg
import pytest
from rope_ref.conformance.runner import Runner

# The float32 port overflows float16 on purpose in other families (positions above 65504).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

IOS = ("float32", "float16", "bfloat16")
FAMILIES = {b.__name__: b.targets[0] for b in bg.BROKEN_GRIDS_AND_WRAPPERS}


def _family(cases, name):
    return [c for c in cases if c.bug_class == name]


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bg.BROKEN_GRIDS_AND_WRAPPERS, ids=lambda c: c.__name__)
def test_broken_port_fails_every_case_of_its_family(cases, broken, io):
    (family,) = broken.targets
    mine = [c for c in _family(cases, family) if c.io_dtype in (None, io)]
    report = Runner(broken(io)).run(mine)
    assert mine and {r.case_id for r in report.failures} == {c.id for c in mine}, broken.__name__
    for r in report.failures:
        assert r.reproducer.startswith("rope-ref conformance run") and (r.worst is not None or r.message)


@pytest.mark.parametrize("io", IOS)
def test_correct_float32_port_passes_the_new_families(cases, io):
    mine = [c for f in FAMILIES.values() for c in _family(cases, f)]
    report = Runner(bb.Float32Backend(io)).run(mine)
    assert report.ok, report.failure_details()
    assert report.counts()["passed"] == sum(c.io_dtype in (None, io) for c in mine)


@pytest.mark.slow
@pytest.mark.parametrize("broken", bg.BROKEN_GRIDS_AND_WRAPPERS, ids=lambda c: c.__name__)
def test_broken_port_fails_no_other_family(cases, broken):
    """Over the whole shipped set, at every I/O dtype: the only failing bug class is the target."""
    for io in IOS:
        classes = {r.bug_class for r in Runner(broken(io)).run(cases).failures}
        assert classes == set(broken.targets), f"{broken.__name__} at {io}: {sorted(classes)}"


def test_every_new_family_has_one_broken_port():
    assert sorted(FAMILIES.values()) == sorted(
        [
            "vision_rotation",
            "mrope_video_ids",
            "mrope_spatial_extent",
            "inverse_fused",
            "kernel_seq_len",
            "inverse_attention_factor",
        ]
    )
