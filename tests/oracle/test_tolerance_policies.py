"""Every tolerance rule under every precision policy, pinned to the formulas of ``docs/tolerance.md``.

The allowances are recomputed here from the documented formulas with the documented constants (unit
roundoffs 2^-53 / 2^-24 / 2^-11 / 2^-8, smallest normals 2^-1022 / 2^-126 / 2^-14 / 2^-126, k_i = 8 + 2
|ln theta_i|, 8 u_r, the float32 cap on u_a, the table dtype of the angles, u_t = u_a + u_c for decay) and
compared with :func:`rope_ref.tolerance.element_tolerance` for all 64 combinations of (io, angle,
compute) dtypes: mixed policies (float32 I/O with float64 angles, float64 I/O with float32 compute),
the float16 floor, and the kernel-shape operations under an attention factor (``apply_qkv``,
``round_trip``: the first rotation's bound carried through the second, ``sqrt(2) A tol1``, plus the
second's for pairs of radius ``A r``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import rope_ref
from rope_ref.case import Case
from rope_ref.precision import PrecisionPolicy
from rope_ref.tolerance import compare_output, element_tolerance

U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
TINY = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}
POLICIES = [PrecisionPolicy(*p) for p in itertools.product(U, repeat=3)]
IDS = [f"{p.io_dtype}-{p.angle_dtype}-{p.compute_dtype}" for p in POLICIES]

D, BASE = 16, 10000.0
THETA = BASE ** (-np.arange(0, D, 2) / D)  # RoFormer eq. 15
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
A_YARN = 0.1 * math.log(4.0) + 1.0  # YaRN's get_mscale(s) = 0.1 ln s + 1


def u_a(p: PrecisionPolicy) -> float:
    return min(U[p.angle_dtype], 2.0**-24)  # angles judged as if at least float32


def u_r(p: PrecisionPolicy) -> float:
    return U[p.io_dtype] + u_a(p) + U[p.compute_dtype]


def floor(p: PrecisionPolicy) -> float:
    return 4.0 * max(TINY[p.io_dtype], TINY[p.compute_dtype])


def table_floor(p: PrecisionPolicy) -> float:
    return 4.0 * TINY["float64" if p.angle_dtype == "float64" else "float32"]


def k(omega) -> np.ndarray:
    return 8.0 + 2.0 * np.abs(np.log(omega))


def rotation_tol(x, m, omega, amp, p, rotary=D):
    """``A r (k_i |t| u_a + 8 u_r) + 4 tiny`` on both channels of each half-layout pair; pass-through 0;
    rows at position 0 exact (0) when A = 1."""
    n = rotary // 2
    r = np.hypot(x[..., :n], x[..., n:rotary])
    t = m[..., None] * omega
    pair = amp * r * (k(omega) * np.abs(t) * u_a(p) + 8.0 * u_r(p)) + floor(p)
    if amp == 1.0:
        pair = np.where((m == 0)[..., None], 0.0, pair)
    tol = np.zeros(x.shape)
    tol[..., :n], tol[..., n:rotary] = pair, pair
    return tol


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _case(op, config, inputs, expected, rule, params=None):
    return Case(f"t-{op}", op, config, inputs, expected, "test", rule, params=params or {})


@pytest.mark.parametrize("p", POLICIES, ids=IDS)
def test_rotation_rule_of_apply_under_every_policy(p):
    m = np.array([0.0, 1.0, 7.0, 300.0, 70000.0])
    x = _x((5, D))
    cfg = {"head_dim": D, "layout": "half", "rotary_dim": 12}
    case = _case("apply", cfg, {"x": x, "positions": m}, {"out": np.zeros(x.shape)}, "rotation")
    theta = BASE ** (-np.arange(0, 12, 2) / 12)
    bounds = element_tolerance(case, "out", p)
    np.testing.assert_allclose(bounds.tol, rotation_tol(x, m, theta, 1.0, p, rotary=12), rtol=1e-12, atol=0)
    assert bounds.exact[:, 12:].all() and bounds.exact[0].all() and not bounds.exact[1:, :12].any()
    [(_, a, b, amp, ntol)] = bounds.norms
    np.testing.assert_allclose(ntol, amp * 8.0 * u_r(p) + floor(p), rtol=1e-12, atol=0)


def test_every_policy_combination_gives_its_own_rotation_bound():
    """Policies with equal (u_a, u_r, floor) share a bound, whichever fields the dtypes come from."""
    m, x = np.array([3.0, 5000.0]), _x((2, D))
    seen = {}
    for p in POLICIES:
        case = _case(
            "apply", {"head_dim": D, "layout": "half"}, {"x": x, "positions": m}, {"out": x}, "rotation"
        )
        key = (u_a(p), u_r(p), floor(p))
        tol = element_tolerance(case, "out", p).tol
        if key in seen:
            np.testing.assert_array_equal(tol, seen[key])
        seen[key] = tol
    assert len(seen) >= 16


@pytest.mark.parametrize("p", POLICIES, ids=IDS)
def test_table_trig_decay_and_scale_rules_under_every_policy(p):
    cfg = {"head_dim": D, "layout": "half"}
    values = np.array([1.0, 0.3, 1e-3, 1e-30, 1e-300, 2.5])
    tol = element_tolerance(_case("inv_freq", cfg, {}, {"inv_freq": values}, "table"), "inv_freq", p).tol
    np.testing.assert_allclose(tol, np.abs(values) * k(values) * u_a(p) + table_floor(p), rtol=1e-12, atol=0)
    factor = np.array(0.7)
    tol = element_tolerance(_case("attention_factor", cfg, {}, {"a": factor}, "table"), "a", p).tol
    np.testing.assert_allclose(tol, 0.7 * k(0.7) * u_a(p) + table_floor(p), rtol=1e-12, atol=0)

    m = np.array([[0.0, 2.0, 4097.0]])
    trig = _case("cos_sin", cfg, {"positions": m}, {"cos": np.zeros((1, 3, D // 2))}, "trig")
    want = k(THETA) * np.abs(m[..., None] * THETA) * u_a(p) + 8.0 * u_r(p) + floor(p)
    np.testing.assert_allclose(element_tolerance(trig, "cos", p).tol, want, rtol=1e-12, atol=0)

    r, e = np.array([0.0, 1.0, 40.0, 5000.0]), np.array([1.0, 0.5, 0.2, 0.01])
    decay = _case("decay_upper_bound", cfg, {"distances": -r}, {"bound": e}, "decay")
    ut = u_a(p) + U[p.compute_dtype]  # no I/O roundoff: decay never passes through the activations
    n = D // 2
    want = u_a(p) * np.sum(k(THETA) * THETA) * r + ut * (n * n + 8.0 * e) + table_floor(p)
    np.testing.assert_allclose(element_tolerance(decay, "bound", p).tol, want, rtol=1e-12, atol=0)

    scale = np.array([0.125, 0.0883883])
    s = _case("mla_softmax_scale", cfg, {}, {"scale": scale}, "scale")
    t_dtype = "float64" if p.angle_dtype == "float64" else "float32"
    np.testing.assert_allclose(
        element_tolerance(s, "scale", p).tol, 8.0 * U[t_dtype] * scale, rtol=1e-12, atol=0
    )


def test_trig_rule_under_an_attention_factor_at_float16_io():
    """A (k |t| u_a + 8 u_r) + 4 tiny(float16): the factor scales the rounding term, not the floor."""
    p = PrecisionPolicy("float16", "float32", "float32")
    cfg = {"head_dim": D, "layout": "half", "scaling": YARN}
    m = np.array([0.0, 1.0, 30.0])
    case = _case("cos_sin", cfg, {"positions": m}, {"cos": np.zeros((3, D // 2))}, "trig")
    omega = rope_ref.inv_freq(rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(4.0, 64)))
    assert rope_ref.attention_factor(case.rope_config()) == pytest.approx(A_YARN, rel=1e-15)
    want = A_YARN * (k(omega) * np.abs(m[:, None] * omega) * 2.0**-24 + 8.0 * u_r(p)) + 4.0 * 2.0**-14
    np.testing.assert_allclose(element_tolerance(case, "cos", p).tol, want, rtol=1e-12, atol=0)


# -- kernel-shape operations under an attention factor ------------------------------------------------------

IDS_BS = np.array([[0, 1, 2, 90, 200], [3000, 3001, 3002, 3003, 3004]])


YARN_CFG = {"head_dim": D, "layout": "half", "scaling": YARN}
BSHD_IDS = {"axes": "bshd", "form": "ids"}
#: mixed policies: float32 I/O with float64 angles, bfloat16 I/O, float16 I/O with float64 angles
MIXED = [
    PrecisionPolicy("float32", "float64", "float32"),
    PrecisionPolicy("bfloat16", "float32", "float32"),
    PrecisionPolicy("float16", "float64", "float32"),
    PrecisionPolicy("float32", "float32", "float32"),
]


def _yarn_omega():
    seq_len = int(IDS_BS.max()) + 1
    return rope_ref.inv_freq(rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(4.0, 64)), seq_len)


def _m(heads: int) -> np.ndarray:
    """IDS_BS placed over (B, S, heads)."""
    return np.broadcast_to(IDS_BS[:, :, None], (2, 5, heads)).astype(float)


@pytest.mark.parametrize("p", MIXED, ids=lambda p: f"{p.io_dtype}-{p.angle_dtype}")
def test_apply_qk_and_apply_qkv_bounds_under_yarn(p):
    cfg, params = YARN_CFG, BSHD_IDS
    q, kk = _x((2, 5, 4, 16), 1), _x((2, 5, 2, 16), 2)
    m = _m(4)
    qk = _case("apply_qk", cfg, {"q": q, "k": kk, "positions": IDS_BS}, {"q": q, "k": kk}, "rotation", params)
    omega = _yarn_omega()
    np.testing.assert_allclose(
        element_tolerance(qk, "q", p).tol, rotation_tol(q, m, omega, A_YARN, p), rtol=1e-12
    )
    np.testing.assert_allclose(
        element_tolerance(qk, "k", p).tol, rotation_tol(kk, m[:, :, :2], omega, A_YARN, p), rtol=1e-12
    )
    qkv = _x((2, 5, 8, 16), 3)  # 4 q heads, 2 k heads, 2 V heads
    qkv_params = {**params, "num_heads_q": 4, "num_heads_kv": 2}
    case = _case("apply_qkv", cfg, {"qkv": qkv, "positions": IDS_BS}, {"out": qkv}, "rotation", qkv_params)
    bounds = element_tolerance(case, "out", p)
    want = rotation_tol(qkv, _m(8), omega, A_YARN, p)
    want[:, :, 6:] = 0.0
    np.testing.assert_allclose(bounds.tol, want, rtol=1e-12)
    assert bounds.exact[:, :, 6:].all() and not bounds.exact[:, :, :6].any()


def test_apply_qkv_under_yarn_keeps_v_and_passes_its_pair_norm():
    """V is not scaled by the attention factor: its pair norm must be r, not A r."""
    cfg, params = YARN_CFG, {**BSHD_IDS, "num_heads_q": 4, "num_heads_kv": 2}
    qkv = _x((2, 5, 8, 16), 3)
    rc = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(4.0, 64))
    out = qkv.copy()
    out[:, :, :6] = rope_ref.apply(qkv[:, :, :6], IDS_BS[:, :, None], rc, seq_len=3005)
    case = _case("apply_qkv", cfg, {"qkv": qkv, "positions": IDS_BS}, {"out": out}, "rotation", params)
    p = PrecisionPolicy("float32", "float32", "float32")
    assert all(c.passed for c in compare_output(case, "out", out, p))
    scaled_v = out.copy()
    scaled_v[:, :, 6:] *= A_YARN  # the attention factor applied to V as well
    assert not compare_output(case, "out", scaled_v, p)[0].passed


@pytest.mark.parametrize("p", MIXED, ids=lambda p: f"{p.io_dtype}-{p.angle_dtype}")
def test_round_trip_bound_carries_the_first_rotation_through_the_second(p):
    x = _x((2, 5, 3, 16), 4)
    case = _case("round_trip", YARN_CFG, {"x": x, "positions": IDS_BS}, {"out": x}, "rotation", BSHD_IDS)
    m = _m(3)
    omega = _yarn_omega()
    tol1 = rotation_tol(x, m, omega, A_YARN, p)
    tol2 = rotation_tol(A_YARN * x, m, omega, A_YARN, p)
    bounds = element_tolerance(case, "out", p)
    np.testing.assert_allclose(bounds.tol, math.sqrt(2.0) * A_YARN * tol1 + tol2, rtol=1e-12)
    assert bounds.norms == [] and not bounds.exact.any()


def test_round_trip_without_a_factor_keeps_position_zero_exact():
    cfg = {"head_dim": D, "layout": "half", "rotary_dim": 8}
    x = _x((2, 5, 3, 16), 5)
    case = _case("round_trip", cfg, {"x": x, "positions": IDS_BS}, {"out": x}, "rotation", BSHD_IDS)
    p = PrecisionPolicy("float32", "float32", "float32")
    bounds = element_tolerance(case, "out", p)
    assert bounds.exact[0, 0].all() and bounds.exact[..., 8:].all() and not bounds.exact[0, 1, :, :8].any()
    m = _m(3)
    theta = BASE ** (-np.arange(0, 8, 2) / 8)
    want = (math.sqrt(2.0) + 1.0) * rotation_tol(x, m, theta, 1.0, p, rotary=8)
    np.testing.assert_allclose(bounds.tol, want, rtol=1e-12)


def test_one_stream_multiaxis_under_yarn_is_judged_like_apply():
    """A stream with A != 1: its position-0 pairs are rotated (scaled), not exact, as in apply."""
    from rope_ref.conformance.multimodal import spec_to_dict

    from rope_ref import multiaxis

    rc = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(4.0, 64))
    x, m = _x((4, D), 6), np.array([0.0, 3.0, 90.0, 500.0])
    single = _case("apply", {"head_dim": D, "layout": "half", "scaling": YARN}, {"x": x, "positions": m},
                   {"out": x}, "rotation")  # fmt: skip
    multi = _case("multiaxis_apply", None, {"x": x, "positions": m[None]}, {"out": x}, "rotation",
                  {"spec": spec_to_dict(multiaxis.from_config(rc))})  # fmt: skip
    p = PrecisionPolicy("float32", "float32", "float32")
    a, b = element_tolerance(single, "out", p), element_tolerance(multi, "out", p)
    assert not a.exact.any() and not b.exact.any()
    np.testing.assert_allclose(b.tol, a.tol, rtol=1e-12)
    np.testing.assert_allclose(a.tol, rotation_tol(x, m, rope_ref.inv_freq(rc, 501), A_YARN, p), rtol=1e-12)


def test_an_inverse_kernel_case_is_bounded_at_its_forward_length():
    """An inverse call under dynamic NTK uses the table of the forward positions (seq_len = max + 1 of the
    forward ids), so its bound is the forward case's: |angle| is the same and so is every frequency."""
    x = _x((2, 5, 3, 16), 5)
    cfg = {"head_dim": D, "layout": "half",
           "scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}}
    p = PrecisionPolicy("float32", "float32", "float32")
    forward = _case("apply_axes", cfg, {"x": x, "positions": IDS_BS}, {"out": x}, "rotation", BSHD_IDS)
    inverse = _case("apply_axes", cfg, {"x": x, "positions": IDS_BS}, {"out": x}, "rotation",
                    {**BSHD_IDS, "inverse": True})
    omega = rope_ref.inv_freq(rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.DynamicNTK(4.0, 64)),
                              int(IDS_BS.max()) + 1)
    want = rotation_tol(x, _m(3), omega, 1.0, p)
    np.testing.assert_allclose(element_tolerance(forward, "out", p).tol, want, rtol=1e-12)
    np.testing.assert_allclose(element_tolerance(inverse, "out", p).tol, want, rtol=1e-12)
