"""Issue 20 point 6: the multi-axis operations of the conformance suite, their families and broken ports.

Expected values here are derived by hand from the released rules (``docs/multimodal.md`` §3-§5), never
read back from the code under test; the broken backends (``broken_backends.BROKEN_ISSUE20``) must each
fail their own family at every I/O dtype, and a correct float32 port must pass it.
"""

from __future__ import annotations

import math

import broken_backends as bb
import numpy as np
import pytest
from rope_ref.conformance import catalogue, multimodal
from rope_ref.conformance.case import Case
from rope_ref.conformance.golden import load_golden
from rope_ref.conformance.protocol import Backend, PrecisionPolicy
from rope_ref.conformance.runner import Runner, select_cases
from rope_ref.conformance.tolerance import check_case, element_tolerance

from rope_ref import mla, mrope, multiaxis, vision_rope

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FAMILIES = (
    "mrope_pairing_flag",
    "mrope_section_order",
    "mrope_interleaved_vs_blocked",
    "mrope_partial_rotary",
    "mla_rope_yarn",
    "vision_merge_window_order",
    "mrope_temporal_scaling",
    "mrope_left_padding",
    "mrope_decode_deltas",
    "mla_second_mscale",
)
ACTIVATION_FAMILIES = FAMILIES[:5]
IOS = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def cases():
    return load_golden()


@pytest.fixture(scope="module")
def by_id(cases):
    return {c.id: c for c in cases}


def test_every_family_is_shipped_with_its_dtypes(cases):
    for family in FAMILIES:
        mine = [c for c in cases if c.bug_class == family]
        assert mine and family in catalogue.BUG_CLASSES, family
        if family in ACTIVATION_FAMILIES:
            assert {c.io_dtype for c in mine} == {"float64", "float32", "float16", "bfloat16"}, family
            assert all(c.op == "multiaxis_apply" and c.tolerance == "rotation" for c in mine)
        else:
            assert all(c.io_dtype is None and c.tolerance in ("exact", "scale") for c in mine)


def test_mla_positions_reach_beyond_twice_the_original_context(by_id):
    case = by_id["multiaxis_apply-deepseek_v3_rope_d64-fp32"]
    original = case.params["spec"]["tables"][0]["scaling"]["original_max_position_embeddings"]
    assert original == 4096 and case.inputs["positions"].max() > 2 * original


def test_spec_json_round_trips_every_preset():
    specs = [mrope.preset(n).rope for n in mrope.preset_names()]
    specs += [vision_rope.preset(n) for n in vision_rope.preset_names()]
    specs += [mla.preset(n).spec for n in mla.preset_names()] + [multiaxis.chatglm_2d(128)]
    for spec in specs:
        assert multimodal.spec_from_dict(multimodal.spec_to_dict(spec)) == spec
    for name in mla.preset_names():
        cfg = mla.preset(name)
        assert multimodal.mla_from_dict(multimodal.mla_to_dict(cfg)) == cfg


# -- expected ids and scales, by hand -------------------------------------------------------------------


def test_left_padding_ids_and_deltas_by_hand(by_id):
    case = by_id["mrope_position_ids-qwen2_vl_left_padding"]
    # Row 1: 3 pads (id 1), text 0 1, an image (1, 4, 4) merged to 2 x 2 at start 2, then text 4 5.
    t = [1, 1, 1, 0, 1, 2, 2, 2, 2, 4, 5]
    h = [1, 1, 1, 0, 1, 2, 2, 3, 3, 4, 5]
    w = [1, 1, 1, 0, 1, 2, 3, 2, 3, 4, 5]
    assert case.expected["position_ids"][:, 1].tolist() == [t, h, w]
    # Row 0: text 0 1, an image (1, 4, 6) -> 2 x 3 at start 2, then text from max + 1 = 5.
    assert case.expected["position_ids"][2, 0].tolist() == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7]
    assert case.expected["deltas"].tolist() == [[7 + 1 - 11], [5 + 1 - 11]]
    decode = by_id["mrope_decode_ids-left_padding_c14_n3"]
    assert decode.expected["out"][0].tolist() == [[14 - 3, 15 - 3, 16 - 3], [14 - 5, 15 - 5, 16 - 5]]


def test_qwen2_5_time_ids_by_hand(by_id):
    t = by_id["mrope_position_ids-qwen2_5_vl_video_seconds"].expected["position_ids"][0, 0]
    # Video 1 (3, 4, 4) at 0.75 s per step starts at 6: trunc(k * 0.75 * 2) = 0, 1, 3 (4 tokens each).
    assert t[8:20].tolist() == [6] * 4 + [7] * 4 + [9] * 4
    # Video 2 (2, 4, 4) at 2.0 s per step starts at max + 1 + 2 text tokens = 13: 0 and 4.
    assert t[23:31].tolist() == [13] * 4 + [17] * 4


def test_qwen2_vl_window_order_by_hand(by_id):
    out = by_id["vision_ids-qwen2_vl_merge2"].expected["out"]
    # Grid (1, 4, 6), merge 2: windows (0,0), (0,1), (0,2), (1,0), ... each row-major inside.
    assert out[0, :8].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert out[1, :8].tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert out.shape == (2, 24 + 2 * 16)
    pix = by_id["vision_ids-pixtral"].expected["out"]
    assert pix[:, :5].tolist() == [[0, 0, 0, 0, 1], [0, 1, 2, 3, 0]]


def test_mla_softmax_scales_by_hand(by_id):
    for name, factor, m in (
        ("deepseek-v3", 40.0, 1.0),
        ("deepseek-v2-lite", 40.0, 0.707),
        ("kimi-k2", 32, 1.0),
    ):
        want = 192**-0.5 * (0.1 * m * math.log(factor) + 1.0) ** 2
        got = float(by_id[f"mla_softmax_scale-{name}"].expected["value"])
        assert got == pytest.approx(want, rel=1e-15)
    assert float(by_id["mla_softmax_scale-no-yarn"].expected["value"]) == pytest.approx(192**-0.5, rel=1e-16)


# -- tolerance ---------------------------------------------------------------------------------------------


def test_scale_rule_is_eight_roundings_of_the_table_dtype(by_id):
    case = by_id["mla_softmax_scale-deepseek-v3"]
    value = float(case.expected["value"])
    policy = PrecisionPolicy("float32", "float32", "float32")
    tol = float(element_tolerance(case, "value", policy).tol)
    assert tol == pytest.approx(8 * 2.0**-24 * value)
    fp64 = float(element_tolerance(case, "value", PrecisionPolicy()).tol)
    assert fp64 == pytest.approx(8 * 2.0**-53 * value)
    assert all(
        c.passed for c in check_case(case, {"value": np.array(value * (1 + 4 * 2.0**-53))}, PrecisionPolicy())
    )
    assert not any(
        c.passed
        for c in check_case(case, {"value": np.array(value * (1 + 16 * 2.0**-53))}, PrecisionPolicy())
    )


@pytest.mark.parametrize("io", ("float64", "float32", "bfloat16"))
def test_one_stream_bound_equals_the_1d_rotation_bound(by_id, io):
    """The multi-axis bound of a one-stream spec is the 1D ``apply`` bound of its table."""
    case = by_id[f"multiaxis_apply-deepseek_v3_rope_d64-{catalogue.DTYPE_SHORT[io]}"]
    table = case.params["spec"]["tables"][0]
    one_d = Case(
        "1d",
        "apply",
        table,
        {"x": case.inputs["x"], "positions": case.inputs["positions"][0]},
        {"out": case.expected["out"]},
        "tables",
        "rotation",
        params={"seq_len": None},
    )
    policy = PrecisionPolicy(
        io, "float32" if io != "float64" else "float64", io if io != "bfloat16" else "float32"
    )
    got, want = element_tolerance(case, "out", policy), element_tolerance(one_d, "out", policy)
    np.testing.assert_allclose(got.tol, want.tol, rtol=1e-12)
    assert np.array_equal(got.exact, want.exact)


# -- backends -------------------------------------------------------------------------------------------


class _PreIssue20(bb.Float32Backend):
    multiaxis_apply = Backend.multiaxis_apply
    mrope_position_ids = Backend.mrope_position_ids
    mrope_decode_ids = Backend.mrope_decode_ids
    vision_ids = Backend.vision_ids
    mla_softmax_scale = Backend.mla_softmax_scale


def test_an_old_backend_reports_the_new_operations_missing(cases):
    chosen = [c for c in cases if c.op in multimodal.MULTIMODAL_OPS]
    report = Runner(_PreIssue20("float32")).run(chosen)
    assert report.ok and report.counts()["passed"] == 0
    ran = [r for r in report.results if r.status != "skipped"]
    assert ran and all(r.status == "unsupported" and r.unsupported_reason == "operation" for r in ran)
    assert "operation missing" in report.coverage_table()


def test_the_oracle_passes_every_new_case(cases):
    from rope_ref.conformance.oracle_backend import OracleBackend

    chosen = [c for c in cases if c.op in multimodal.MULTIMODAL_OPS and c.io_dtype in (None, "float64")]
    report = Runner(OracleBackend()).run(chosen)
    assert report.ok and report.counts()["passed"] == len(chosen)


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bb.BROKEN_ISSUE20, ids=lambda c: c.__name__)
def test_broken_backend_fails_its_family_alone(cases, broken, io):
    (family,) = broken.targets
    pattern = "|".join(f"^{c.id}$" for c in cases if c.bug_class == family).replace(".", r"\.")
    chosen = select_cases(cases, pattern)
    report = Runner(broken(io)).run(chosen)
    assert any(r.bug_class == family for r in report.failures), f"{broken.__name__} passed {family} at {io}"
    for r in report.failures:
        assert r.reproducer.startswith("rope-ref conformance run") and (r.worst is not None or r.message)
    assert Runner(bb.Float32Backend(io)).run(chosen).ok
