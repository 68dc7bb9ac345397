"""The multi-axis operations of the conformance suite (conformance/cases/multiaxis.py): their families and
dtypes, and their expected ids and scales checked by hand (M-RoPE, vision, MLA).
"""

from __future__ import annotations

import math

import pytest
from rope_ref.conformance import catalogue, multimodal
from rope_ref.conformance.runner import Runner

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


def test_the_oracle_passes_every_new_case(cases):
    from rope_ref.conformance.oracle_backend import OracleBackend

    chosen = [c for c in cases if c.op in multimodal.MULTIMODAL_OPS and c.io_dtype in (None, "float64")]
    report = Runner(OracleBackend()).run(chosen)
    assert report.ok and report.counts()["passed"] == len(chosen)
