"""The kernel-shape families of ``kernel_shape_inverse_and_seq_len_cases`` (cases/kernel_shapes.py):
inverse through ``apply_qk`` / ``apply_qkv``, an explicit ``seq_len`` for a chunk of a long sequence, the
YaRN inverse with its attention factor. Expected values checked against the documented formulas (HF
``_compute_dynamic_ntk_parameters``, ``_compute_yarn_parameters``, ``_compute_longrope_parameters``),
written out here in float64 (angles as plain products: errors up to |position| x 2^-52, hence atol 1e-10).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from rope_ref.conformance import catalogue

DTYPES = {"float64", "float32", "float16", "bfloat16"}
FAMILIES = {
    "inverse_fused": {"apply_qk", "apply_qkv"},
    "kernel_seq_len": {"apply_axes", "apply_qk", "apply_qkv"},
    "inverse_attention_factor": {"apply_axes"},
}


def _pairs(x: np.ndarray, n: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The two channel blocks of the first ``n`` pairs: (i, i + n) half, (2i, 2i + 1) interleaved."""
    if layout == "half":
        return x[..., :n], x[..., n : 2 * n]
    return x[..., 0 : 2 * n : 2], x[..., 1 : 2 * n : 2]


def _rotated(x, pos, inv_freq, layout, factor=1.0):
    """``factor * R(pos * inv_freq) x`` on the first ``len(inv_freq)`` pairs, the other channels kept."""
    n = len(inv_freq)
    a, b = _pairs(np.asarray(x, dtype=np.float64), n, layout)
    theta = np.asarray(pos, dtype=np.float64)[..., None] * inv_freq
    ra, rb = (
        factor * (a * np.cos(theta) - b * np.sin(theta)),
        factor * (b * np.cos(theta) + a * np.sin(theta)),
    )
    out = np.array(x, dtype=np.float64, copy=True)
    if layout == "half":
        out[..., :n], out[..., n : 2 * n] = ra, rb
    else:
        out[..., 0 : 2 * n : 2], out[..., 1 : 2 * n : 2] = ra, rb
    return out


def _default(base: float, d: int) -> np.ndarray:
    return base ** (-np.arange(0, d, 2) / d)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_is_shipped_with_its_dtypes(cases, family):
    mine = [c for c in cases if c.bug_class == family]
    assert mine and family in catalogue.BUG_CLASSES
    assert {c.op for c in mine} == FAMILIES[family] and {c.io_dtype for c in mine} == DTYPES
    assert {c.config["layout"] for c in mine} == {"half", "interleaved"}
    assert any(c.config["rotary_dim"] < c.config["head_dim"] for c in mine)  # partial rotary
    assert all(c.params["inverse"] for c in mine) == (family != "kernel_seq_len")
    assert all(c.params["seq_len"] is not None for c in mine) == (family == "kernel_seq_len")


def test_fused_inverse_qk_by_hand(by_id):
    case = by_id["apply_qk-bshd-gqa-inverse-half-fp64"]
    pos = case.inputs["positions"][0][:, None]  # (S, 1): every head of token s
    inv = _default(10000.0, 16)
    for name in ("q", "k"):
        x = case.inputs[name][0]
        np.testing.assert_allclose(case.expected[name][0], _rotated(x, -pos, inv, "half"), rtol=0, atol=1e-10)


def test_fused_inverse_qkv_keeps_v_and_rotates_back(by_id):
    case = by_id["apply_qkv-bshd-qkv-inverse-interleaved-partial-fp64"]
    qkv, out = case.inputs["qkv"][0], case.expected["out"][0]  # (S, 4 + 2 + 2, 16), rotary 8 of 16
    pos = case.inputs["positions"][0][:, None]
    want = _rotated(qkv[:, :6], -pos, _default(10000.0, 8), "interleaved")
    np.testing.assert_allclose(out[:, :6], want, rtol=0, atol=1e-10)
    assert np.array_equal(out[:, 6:], qkv[:, 6:])  # V bit for bit


def test_chunk_seq_len_dynamic_ntk_by_hand(by_id):
    case = by_id["apply_axes-bshd-chunk-dynamic-half-fp64"]
    assert case.params["seq_len"] == 8192 and case.inputs["positions"].max() + 1 == 3008

    def dynamic(seq_len):  # base * (factor * L / L0 - (factor - 1)) ** (d / (d - 2)), factor 2, L0 2048
        return _default(10000.0 * (2.0 * seq_len / 2048 - 1.0) ** (16 / 14), 16)

    x, pos = case.inputs["x"][0], case.inputs["positions"][0][:, None]
    np.testing.assert_allclose(
        case.expected["out"][0], _rotated(x, pos, dynamic(8192), "half"), rtol=0, atol=1e-10
    )
    # The table of the chunk's own length is far off: the case tells the two apart.
    assert np.abs(case.expected["out"][0] - _rotated(x, pos, dynamic(3008), "half")).max() > 0.1


def test_chunk_seq_len_qk_offsets_share_one_table(by_id):
    case = by_id["apply_qk-bhsd-chunk-offset-dynamic-interleaved-fp64"]
    inv = _default(10000.0 * (2.0 * 6000 / 2048 - 1.0) ** (16 / 14), 16)
    pos = np.array([2500, 4000])[:, None, None] + np.arange(4)[None, None, :]  # (B, 1, S): offset[b] + s
    for name in ("q", "k"):
        x = case.inputs[name]
        np.testing.assert_allclose(
            case.expected[name], _rotated(x, pos, inv, "interleaved"), rtol=0, atol=1e-10
        )


def test_chunk_seq_len_longrope_uses_long_factors(by_id):
    case = by_id["apply_qkv-thd-chunk-longrope-half-partial-fp64"]
    scaling = case.config["scaling"]
    assert case.inputs["cu_seqlens"].tolist() == [0, 3, 7]
    pos = np.array([100, 101, 102, 1000, 1001, 1002, 1003])[:, None]  # start offsets 100 and 1000
    assert pos.max() < scaling["original_max_position_embeddings"] < case.params["seq_len"]
    inv = _default(10000.0, 8) / np.array(scaling["long_factor"])
    factor = math.sqrt(1 + math.log(16.0) / math.log(4096))
    qkv, out = case.inputs["qkv"], case.expected["out"]  # (T, 2 + 1 + 1, 16)
    np.testing.assert_allclose(out[:, :3], _rotated(qkv[:, :3], pos, inv, "half", factor), rtol=0, atol=1e-10)
    assert np.array_equal(out[:, 3:], qkv[:, 3:])


@pytest.mark.parametrize(
    ("cid", "factor"),
    [
        # mscale ratio: (0.1 * 1.0 * ln 4 + 1) / (0.1 * 0.5 * ln 4 + 1); not 0.1 ln 4 + 1
        ("apply_axes-bshd-inverse-yarn-mscale-half-fp64", (0.1 * math.log(4) + 1) / (0.05 * math.log(4) + 1)),
        ("apply_axes-thd-inverse-yarn-factor-interleaved-partial-fp64", 0.75),
    ],
)
def test_yarn_inverse_carries_the_configs_attention_factor(by_id, cid, factor):
    """A rotation keeps every pair's norm: the expected pairs are the input pairs' norms times A."""
    case = by_id[cid]
    n = case.config["rotary_dim"] // 2
    layout = case.config["layout"]
    a, b = _pairs(case.inputs["x"], n, layout)
    ea, eb = _pairs(case.expected["out"], n, layout)
    np.testing.assert_allclose(np.hypot(ea, eb), factor * np.hypot(a, b), rtol=1e-12)
    rest = case.config["rotary_dim"]
    assert np.array_equal(case.expected["out"][..., rest:], case.inputs["x"][..., rest:])
