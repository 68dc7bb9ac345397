"""``conformance.cases.rotation``: the ``apply`` cases (layouts, head sizes, partial rotary, heads, per-row,
decode, fractional, precision-revealing and very large positions) and the negative-position cases, as
generated (not as shipped). Each case's config, shape, positions and bug class are written out here from the
bug each case documents, and every float64 expected value is recomputed pair by pair with math.cos /
math.sin (RoFormer, arXiv:2104.09864, eq. 34: x'_a = x_a cos(m theta_i) - x_b sin(m theta_i), x'_b = x_b
cos + x_a sin, theta_i = base^(-2i/rotary_dim); pairs (i, i + rd/2) in the half layout, (2i, 2i + 1)
interleaved; channels past rotary_dim pass through)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mp_reference import loop_rotate
from rope_ref.conformance.cases import operations, rotation
from rope_ref.conformance.cases.common import rope_aux

DTYPES = ("fp64", "fp32", "fp16", "bf16")

#: name, head_dim, rotary_dim, layout, base, x shape, axes and bug class of each case, as documented (the
#: head-size cases, after the partial ones, follow from _HEAD_DIMS)
_TABLE = """
layout_half_d64                64  64  half         1e4  2x3x6x64   bhsd  layout
layout_interleaved_d64         64  64  interleaved  1e4  2x3x6x64   bhsd  layout
tiny_d4_half                   4   4   half         1e4  4x4        sd    rotation_direction
tiny_d4_interleaved            4   4   interleaved  1e4  4x4        sd    rotation_direction
tiny_d2                        2   2   half         1e4  4x2        sd    rotation_direction
positions_arange_d32           32  32  half         1e4  1x2x16x32  bhsd  position_offset
partial_half_d80_r32           80  32  half         1e4  2x4x80     hsd   partial_rotary
partial_half_d80_r20           80  20  half         1e4  2x4x80     hsd   partial_rotary
partial_half_d256_r64          256 64  half         1e4  2x4x256    hsd   inv_freq_exponent
partial_interleaved_d128_r64   128 64  interleaved  1e4  2x4x128    hsd   partial_rotary
partial_interleaved_d256_r64   256 64  interleaved  1e4  2x4x256    hsd   partial_rotary
all_heads_d32                  32  32  half         1e4  1x8x3x32   bhsd  heads
per_row_positions_d32          32  32  half         1e4  3x2x9x32   bhsd  per_row_positions
decode_batched_d64             64  64  half         1e4  5x4x1x64   bhsd  decode_offsets
fractional_d32                 32  32  interleaved  1e4  5x2x32     shd   fractional_positions
precision_256_d128             128 128 half         1e4  3x2x128    shd   precision_positions
precision_2048_d128            128 128 half         1e4  3x2x128    shd   precision_positions
precision_angles_512_d128      128 128 half         1e4  4x2x128    shd   precision_angles
precision_4095_d128            128 128 half         1e4  3x2x128    shd   precision_positions
precision_32768_d128           128 128 half         5e5  2x2x128    shd   precision_positions
large_131071_d128              128 128 half         1e4  1x2x128    shd   large_position_trig
large_2p20_d128                128 128 half         1e4  1x2x128    shd   large_position_trig
large_2p24_d128                128 128 half         1e4  3x2x128    shd   large_position_trig
"""
_HEAD_DIMS = [("half", d) for d in (2, 4, 6, 8, 16, 32, 64, 72, 80, 96, 120, 128, 256)]
_HEAD_DIMS += [("interleaved", d) for d in (6, 72, 120, 256)]
_ROWS = [line.split() for line in _TABLE.strip().splitlines()]
_ROWS[11:11] = [
    [f"head_dim_{d}_{lay}", str(d), str(d), lay, "1e4", f"4x{d}", "sd", "head_dims"] for lay, d in _HEAD_DIMS
]
SPEC = {name: rest for name, *rest in _ROWS}

#: name -> the positions, flattened (every other case: 0, 3, 17, 100, the head-size cases')
POSITIONS = {
    "layout_half_d64": [0, 1, 2, 7, 63, 511],
    "layout_interleaved_d64": [0, 1, 2, 7, 63, 511],
    "tiny_d4_half": [0, 1, 3, 100],
    "tiny_d4_interleaved": [0, 1, 3, 100],
    "tiny_d2": [0, 1, 2, 3],
    "positions_arange_d32": list(range(16)),
    **{f"partial_{kind}": [0, 5, 700, 2355] for kind in ("half_d80_r32", "half_d80_r20", "half_d256_r64")},
    **{f"partial_interleaved_d{d}_r64": [0, 5, 700, 2355] for d in (128, 256)},
    "all_heads_d32": [1, 9, 40],
    "per_row_positions_d32": [*range(9), 5, 3, 3, 9, 100, 101, 0, 2, 17, *[0] * 9],
    "decode_batched_d64": [37, 12, 0, 100, 2049],
    "fractional_d32": [0.5, 1.25, 2.75, 100.5, 1000.125],
    "precision_256_d128": [255, 256, 257],  # 257: the first integer bf16 cannot hold
    "precision_2048_d128": [2047, 2048, 2049],  # 2049: the first integer fp16 cannot hold
    "precision_angles_512_d128": [300, 400, 511, 512],
    "precision_4095_d128": [1857, 4095, 15962],
    "precision_32768_d128": [32768, 32769],
    "large_131071_d128": [2**17 - 1],
    "large_2p20_d128": [2**20],
    "large_2p24_d128": [2**24 - 1, 2**24, 16_800_000],
}


def _spec(name: str) -> tuple:
    d, rd, layout, base, shape, axes, bug = SPEC[name]
    return int(d), int(rd), layout, float(base), tuple(int(n) for n in shape.split("x")), axes, bug


@pytest.fixture(scope="module")
def built():
    """The family's cases as generated (a tenth of a second; the whole catalogue takes over a second)."""
    return {c.id: c for c in rotation.rotation_cases() + rotation.negative_cases()}


def _rotate(x: np.ndarray, pos: np.ndarray, d: int, rd: int, layout: str, base: float) -> np.ndarray:
    """Rows of x (..., d) rotated pair by pair with RoFormer's frequencies base^(-2i/rd)."""
    assert x.shape[-1] == d
    return loop_rotate(x, pos, [base ** (-2.0 * i / rd) for i in range(rd // 2)], layout)


def _atol(positions) -> float:
    """The float64 angle m*theta carries a few ulp of relative error: about |m| * 1e-15 absolute."""
    return 1e-13 + 4e-15 * float(np.max(np.abs(positions)))


def test_rotation_cases_are_exactly_the_documented_ones(built):
    ids = [c.id for c in built.values() if c.bug_class != "negative_positions"]
    assert ids == [f"apply-{name}-{short}" for name in SPEC for short in DTYPES]


@pytest.mark.parametrize("name", list(SPEC))
def test_each_rotation_case_as_documented(built, name):
    d, rd, layout, base, shape, axes, bug = _spec(name)
    positions = POSITIONS.get(name, [0, 3, 17, 100])
    fp64 = built[f"apply-{name}-fp64"]
    for short in DTYPES:
        case = built[f"apply-{name}-{short}"]
        assert (case.op, case.bug_class, case.tolerance) == ("apply", bug, "rotation")
        assert case.config == {
            "head_dim": d,
            "layout": layout,
            "rotary_dim": rd,
            "base": base,
            "scaling": None,
        }
        assert case.params == {"seq_len": None, "axes": axes} and case.requires == []
        assert case.inputs["x"].shape == shape and sorted(case.inputs) == ["positions", "x"]
        assert case.inputs["positions"].ravel().tolist() == positions
        want_dtype = np.float64 if short == "fp64" else np.float32
        assert case.inputs["x"].dtype == want_dtype
        if short == "fp32":
            assert np.array_equal(case.inputs["x"], fp64.inputs["x"].astype(np.float32))
        if short == "fp16":
            assert np.array_equal(case.inputs["x"], fp64.inputs["x"].astype(np.float16).astype(np.float32))
    pos = fp64.inputs["positions"]
    assert pos.dtype == (np.float64 if name == "fractional_d32" else np.int64)
    x = fp64.inputs["x"]
    np.testing.assert_allclose(
        fp64.expected["out"], _rotate(x, pos, d, rd, layout, base), rtol=0, atol=_atol(pos)
    )
    inv = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    np.testing.assert_allclose(fp64.aux["inv_freq"], inv, rtol=1e-15)
    assert float(fp64.aux["attention_factor"]) == 1.0


def test_the_two_layout_cases_share_x_and_the_hand_checkable_ones_use_written_x(built):
    half, inter = built["apply-layout_half_d64-fp64"], built["apply-layout_interleaved_d64-fp64"]
    assert np.array_equal(half.inputs["x"], inter.inputs["x"])
    assert not np.array_equal(
        half.inputs["x"][0, 0, :, :32], built["apply-positions_arange_d32-fp64"].inputs["x"][0, 0, :6]
    )
    assert 0.5 < np.std(half.inputs["x"]) < 1.5  # seeded normal draws, not a written pattern
    for short in DTYPES:
        for layout in ("half", "interleaved"):
            assert built[f"apply-tiny_d4_{layout}-{short}"].inputs["x"].tolist() == [[1.0, 0.0, 0.0, 1.0]] * 4
        assert built[f"apply-tiny_d2-{short}"].inputs["x"].tolist() == [[1.0, 0.0]] * 4


def test_descriptions_name_the_head_size_and_base_of_the_precision_cases(built):
    assert built["apply-precision_32768_d128-fp64"].description.startswith(
        "D=128, base 500000: Megatron #535"
    )
    assert built["apply-precision_256_d128-bf16"].description == (
        "D=128, base 10000: 257 is the first integer bf16 cannot hold"
    )
    assert built["apply-tiny_d4_interleaved-fp64"].description.startswith("hand-checkable: D=4")
    assert "interleaved" in built["apply-tiny_d4_interleaved-fp64"].description
    assert built["apply-layout_interleaved_d64-fp64"].description.startswith("interleaved layout")
    assert built["apply-head_dim_72_interleaved-fp64"].description == "head_dim=72, interleaved"
    assert built["apply-head_dim_72_half-fp64"].description == "head_dim=72, half layout"


def test_apply_is_registered_with_the_rope_aux():
    entry = operations.OPERATIONS["apply"]
    assert entry.auxiliary is rope_aux
    x = np.array([[1.0, 0.0, 0.0, 1.0]])
    cfg = {"head_dim": 4, "layout": "interleaved", "rotary_dim": 4, "base": 100.0, "scaling": None}
    out = entry.evaluate(cfg, {"x": x, "positions": np.array([2.0])}, {"seq_len": None})["out"]
    c0, s0, c1, s1 = math.cos(2.0), math.sin(2.0), math.cos(0.2), math.sin(0.2)
    np.testing.assert_allclose(out, [[c0, s0, -s1, c1]], rtol=0, atol=1e-15)


NEGATIVE = [-1, -2, -7, -256, -257, -2049, -4097, -100000]
NEG_TABLE = [-1, -3, -257, -2049, -65536, 0, 5]
NEG_VJP = [[-5, -4, -3, -2], [-300, 0, 300, -9000]]


def test_negative_cases_are_exactly_the_documented_ones(built):
    ids = [c.id for c in built.values() if c.bug_class == "negative_positions"]
    assert ids == [f"apply-negative_d64-{s}" for s in DTYPES] + ["cos_sin-negative_d64"] + [
        f"apply_vjp-negative_interleaved_d32-{s}" for s in DTYPES
    ]


def test_negative_positions_rotate_backwards(built):
    cfg64 = {"head_dim": 64, "layout": "half", "rotary_dim": 64, "base": 1e4, "scaling": None}
    for short in DTYPES:
        case = built[f"apply-negative_d64-{short}"]
        assert (case.bug_class, case.config, case.params) == (
            "negative_positions",
            cfg64,
            {"seq_len": None, "axes": "shd"},
        )
        assert case.inputs["x"].shape == (8, 1, 64) and case.inputs["positions"].ravel().tolist() == NEGATIVE
    case = built["apply-negative_d64-fp64"]
    want = _rotate(case.inputs["x"], case.inputs["positions"], 64, 64, "half", 1e4)
    np.testing.assert_allclose(case.expected["out"], want, rtol=0, atol=_atol(NEGATIVE))
    table = built["cos_sin-negative_d64"]
    assert (table.op, table.bug_class, table.tolerance, table.config) == (
        "cos_sin",
        "negative_positions",
        "trig",
        cfg64,
    )
    assert table.inputs["positions"].tolist() == NEG_TABLE and table.params == {"seq_len": None}
    angles = np.array(NEG_TABLE, dtype=np.float64)[:, None] * np.array([1e4 ** (-i / 32) for i in range(32)])
    np.testing.assert_allclose(table.expected["cos"], np.cos(np.abs(angles)), rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        table.expected["sin"], np.sign(angles) * np.sin(np.abs(angles)), rtol=0, atol=1e-10
    )


def test_the_vjp_at_negative_positions_rotates_grad_out_forward(built):
    cfg32 = {"head_dim": 32, "layout": "interleaved", "rotary_dim": 32, "base": 1e4, "scaling": None}
    for short in DTYPES:
        case = built[f"apply_vjp-negative_interleaved_d32-{short}"]
        assert (case.op, case.bug_class, case.config) == ("apply_vjp", "negative_positions", cfg32)
        assert case.params == {"seq_len": None, "axes": "bsd"}
        assert case.inputs["positions"].tolist() == NEG_VJP
        assert case.inputs["x"].shape == case.inputs["grad_out"].shape == (2, 4, 32)
        assert not np.array_equal(case.inputs["x"], case.inputs["grad_out"])
    case = built["apply_vjp-negative_interleaved_d32-fp64"]
    pos = np.array(NEG_VJP, dtype=np.float64)
    want = _rotate(case.inputs["grad_out"], -pos, 32, 32, "interleaved", 1e4)
    (name,) = case.expected
    np.testing.assert_allclose(case.expected[name], want, rtol=0, atol=_atol(pos))
