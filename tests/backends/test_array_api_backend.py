"""The generic Array API backend (``array-api:<module>``, issue 9 part 2).

array-api-strict is the witness that only standard functions are used: it rejects everything else.
Expected values come from explicit Python loops (``math.cos``), hand-written published numbers, the
transpose identity <R x, g> = <x, R^T g>, or the float64 oracle (a separate implementation).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from rope_ref.conformance.registry import BackendUnavailable, get_backend
from shipped_golden import shipped_cases

import rope_ref

NO_JAX = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed: jax.numpy not checked"
)
NAMESPACES = [
    "array_api_strict",
    "numpy",
    "torch",
    pytest.param("jax.numpy", marks=NO_JAX),
]
CONFIGS = {
    "half": rope_ref.RopeConfig(8, layout="half"),
    "interleaved-partial": rope_ref.RopeConfig(10, layout="interleaved", rotary_dim=6, base=500.0),
}


def _backend(ns: str, precision: str = "fp64"):
    """The backend for ``ns``; skips when the library is missing or (jax) lacks what the policy needs.

    jax without ``jax_enable_x64`` has no float64, so its backend raises ``BackendUnavailable``: that is
    a property of the installation, not a bug, and is a skip. For every other namespace it is a failure.
    """
    pytest.importorskip(ns.split(".")[0])
    try:
        return get_backend(f"array-api:{ns}", precision)
    except BackendUnavailable as exc:
        if ns == "jax.numpy":
            pytest.skip(f"jax is installed but cannot run this policy ({exc})")
        raise


def _loop_apply(x: np.ndarray, positions: np.ndarray, cfg) -> np.ndarray:
    """RoFormer eq. 34 pair by pair with math.cos/math.sin (x: (n, head_dim), positions: (n,))."""
    out = x.copy()
    rd = cfg.rotary_dim
    for r in range(x.shape[0]):
        for i in range(rd // 2):
            a, b = (i, i + rd // 2) if cfg.layout == "half" else (2 * i, 2 * i + 1)
            t = float(positions[r]) * cfg.base ** (-2.0 * i / rd)
            c, s = math.cos(t), math.sin(t)
            out[r, a] = x[r, a] * c - x[r, b] * s
            out[r, b] = x[r, b] * c + x[r, a] * s
    return out


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("layout", list(CONFIGS))
def test_apply_matches_a_python_loop(ns, layout):
    cfg = CONFIGS[layout]
    b = _backend(ns)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, cfg.head_dim))
    pos = np.array([0, 1, 5, 17, 300, 4096])
    got = b.to_numpy(b.apply(b.from_numpy(x, "float64"), b.from_numpy(pos), cfg))
    np.testing.assert_allclose(got, _loop_apply(x, pos, cfg), rtol=0, atol=1e-12)
    assert np.array_equal(got[:, cfg.rotary_dim :], x[:, cfg.rotary_dim :])


@pytest.mark.parametrize("ns", NAMESPACES)
def test_vjp_is_the_transpose(ns):
    cfg = CONFIGS["interleaved-partial"]
    b = _backend(ns)
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((2, 3, 10)), rng.standard_normal((2, 3, 10))
    pos = b.from_numpy(np.array([[3], [900]]))
    y = b.to_numpy(b.apply(b.from_numpy(x, "float64"), pos, cfg))
    v = b.to_numpy(b.apply_vjp(b.from_numpy(x, "float64"), pos, cfg, b.from_numpy(g, "float64")))
    assert math.isclose(float(np.sum(y * g)), float(np.sum(x * v)), rel_tol=1e-12)


def test_namespace_and_device_are_preserved_on_array_api_strict():
    xps = pytest.importorskip("array_api_strict")
    b = _backend("array_api_strict")
    dev = xps.Device("device1")
    cfg = CONFIGS["half"]
    x = xps.asarray(np.ones((3, 8)), device=dev)
    pos = xps.asarray([0, 1, 2], device=dev)
    outputs = [
        b.apply(x, pos, cfg),
        b.apply_vjp(x, pos, cfg, x),
        *b.cos_sin(pos, cfg),
        b.decay_upper_bound(xps.asarray([1.0, 2.0], device=dev), cfg),
        b.chatglm_apply_2d(x, pos, pos, base=10000.0, precision="float64"),
    ]
    for out in outputs:
        assert type(out) is type(x) and out.device == dev
    ids = xps.asarray([[7, 130001, 130004, 9]], device=dev)
    out = b.chatglm_position_ids(
        ids, bos_token_id=130004, mask_token_id=130000, gmask_token_id=130001, position_encoding_2d=True
    )
    assert out.device == dev and out.dtype == xps.int64


def test_namespace_and_dtype_are_preserved_on_torch():
    torch = pytest.importorskip("torch")
    b = _backend("torch", "fp32")
    x = torch.ones(2, 8, dtype=torch.float32)
    out = b.apply(x, torch.tensor([1, 2]), CONFIGS["half"])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.device == x.device
    bf = b.apply(x.to(torch.bfloat16), torch.tensor([1, 2]), CONFIGS["half"])
    assert bf.dtype == torch.bfloat16


def test_angles_use_float32_where_the_device_has_no_float64():
    xps = pytest.importorskip("array_api_strict")
    from rope_ref.backends.array_api import make_backend, widest_float

    assert widest_float(xps) == xps.float64
    assert widest_float(xps, xps.Device("no_float64")) == xps.float32
    b = make_backend("fp32", namespace="array_api_strict", device="no_float64")
    assert b.precision.angle_dtype == "float32" and b.precision.compute_dtype == "float32"
    assert make_backend("fp32", namespace="array_api_strict").precision.angle_dtype == "float64"
    cfg = CONFIGS["half"]
    x = b.from_numpy(np.ones((2, 8)), "float32")
    got = b.to_numpy(b.apply(x, b.from_numpy(np.array([3, 7])), cfg))
    np.testing.assert_allclose(got, _loop_apply(np.ones((2, 8)), np.array([3, 7]), cfg), atol=2e-6)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_cos_sin_come_back_in_the_activation_dtype_rounded_once(ns):
    """fp32 on a device with float64: angles and cos/sin in float64, then ONE rounding to float32 (the
    declared compute dtype). So each entry is float32(cos(m theta)) to a float32 ulp (2**-24 below 1),
    at m = 40000 too, where float32 angles would be off by ~m 2**-24 = 2.4e-3."""
    b = _backend(ns, "fp32")
    cfg = rope_ref.RopeConfig(8, layout="half", base=300.0)
    pos = np.array([0, 3, 977, 40_000])
    c, s = b.cos_sin(b.from_numpy(pos), cfg)
    assert c.dtype == b.xp.float32 and s.dtype == b.xp.float32
    angles = [[float(m) * 300.0 ** (-2.0 * i / 8) for i in range(4)] for m in pos]
    want_c = np.array([[math.cos(t) for t in row] for row in angles], dtype=np.float32)
    want_s = np.array([[math.sin(t) for t in row] for row in angles], dtype=np.float32)
    np.testing.assert_allclose(b.to_numpy(c), want_c, rtol=0, atol=2.0**-24)
    np.testing.assert_allclose(b.to_numpy(s), want_s, rtol=0, atol=2.0**-24)


def test_oracle_and_backend_agree_in_float64_on_numpy():
    """Same formula, different angles: the backend takes cos/sin of fl(m theta) with ``xp.cos``, the
    oracle of the exact m theta. Their cos/sin differ by at most |m theta| 2**-53 (the angle's rounding)
    plus an ulp each, so the rotations agree to 2 |x| (|m| 2**-53 + 2**-51); a wrong formula (a swapped
    sign, a wrong pair) is off by O(|x|)."""
    b = _backend("numpy")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 7, 16))
    pos = rng.integers(0, 50_000, (4, 7))
    atol = 2.0 * np.abs(x).max() * (pos.max() * 2.0**-53 + 2.0**-51)
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(16, layout=layout, rotary_dim=12)
        np.testing.assert_allclose(b.apply(x, pos, cfg), rope_ref.apply(x, pos, cfg), rtol=0, atol=atol)
        vjp = b.apply_vjp(x, pos, cfg, x)
        np.testing.assert_allclose(vjp, rope_ref.apply(x, -pos, cfg), rtol=0, atol=atol)
    c, s = b.cos_sin(pos, cfg)
    rc, rs = rope_ref.cos_sin(pos, cfg)
    table_atol = pos.max() * 2.0**-53 + 2.0**-51
    np.testing.assert_allclose(c, rc, rtol=0, atol=table_atol)
    np.testing.assert_allclose(s, rs, rtol=0, atol=table_atol)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0 off the zero row
def test_position_zero_is_the_identity_bit_for_bit():
    b = _backend("array_api_strict")
    x = np.array([[-0.0, 5.0, -0.0, -3.0, np.inf, 1.0, 2.0, -0.0]])
    got = b.to_numpy(b.apply(b.from_numpy(x, "float64"), b.from_numpy(np.array([0])), CONFIGS["half"]))
    assert np.array_equal(np.signbit(got), np.signbit(x)) and np.array_equal(got, x)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_decay_upper_bound_matches_published_values(ns):
    b = _backend(ns)
    cfg = rope_ref.RopeConfig(128, layout="half")
    d = b.from_numpy(np.array([0.0, 10.0, 100.0, 256.0]))
    # shared notes performance.md §1 (d=128, base 1e4); f(0) = (d/2 + 1) / 2 exactly.
    got = b.to_numpy(b.decay_upper_bound(d, cfg))
    np.testing.assert_allclose(got, [32.5, 17.954, 10.227, 6.543], atol=5e-4)


def _dynamic_ntk_bound(r: np.ndarray, d: int, base: float, factor: float, original: int, length: int):
    """RoFormer's (1/(d/2)) sum_j |S_j(r)| over dynamic NTK frequencies at sequence length ``length``
    (HF ``_compute_dynamic_ntk_parameters``: base * ((factor L / L0) - (factor - 1))^(d / (d - 2)))."""
    scaled = base * ((factor * length / original) - (factor - 1)) ** (d / (d - 2))
    theta = scaled ** (-np.arange(0, d, 2) / d)
    angles = r[:, None] * theta
    partial = np.hypot(np.cumsum(np.cos(angles), axis=-1), np.cumsum(np.sin(angles), axis=-1))
    return partial.mean(axis=-1)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_decay_upper_bound_sees_the_longest_distance_of_either_sign(ns):
    """Length-dependent scalings see max|r| + 1: a distance of -3000 stretches dynamic NTK as 3000 does."""
    b = _backend(ns)
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.scaling.DynamicNTK(4.0, 64))
    r = np.array([-3000.0, 5.0, 40.0])
    got = b.to_numpy(b.decay_upper_bound(b.from_numpy(r), cfg))
    np.testing.assert_allclose(got, _dynamic_ntk_bound(r, 16, 10000.0, 4.0, 64, 3001), rtol=1e-9)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_chatglm_position_ids_hand_written(ns):
    b = _backend(ns)
    bos, mask, gmask = 130004, 130000, 130001
    ids = np.array([[5, 6, gmask, bos, 9, 9], [7, mask, bos, 9, 9, 9]])
    kw = {"bos_token_id": bos, "mask_token_id": mask, "gmask_token_id": gmask}
    two = b.to_numpy(b.chatglm_position_ids(b.from_numpy(ids), position_encoding_2d=True, **kw))
    assert two.tolist() == [
        [[0, 1, 2, 2, 2, 2], [0, 0, 0, 1, 2, 3]],
        [[0, 1, 1, 1, 1, 1], [0, 0, 1, 2, 3, 4]],
    ]
    one = b.to_numpy(b.chatglm_position_ids(b.from_numpy(ids), position_encoding_2d=False, **kw))
    assert one.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 1, 1, 1, 1]]  # [gMASK] rows keep 0..S-1 in 1D
    with pytest.raises(ValueError, match="row 1 has no bos"):
        bad = b.from_numpy(np.array([[bos, gmask], [gmask, 9]]))
        b.chatglm_position_ids(bad, position_encoding_2d=True, **kw)


def test_unavailable_namespaces_and_dtypes_say_why():
    with pytest.raises(BackendUnavailable, match="cannot import"):
        get_backend("array-api:no_such_array_library_xyz")
    with pytest.raises(BackendUnavailable, match="bfloat16"):
        get_backend("array-api:numpy", "bf16")
    with pytest.raises(BackendUnavailable, match="float16"):
        get_backend("array-api:array_api_strict", "fp16")
    with pytest.raises(ValueError, match="precision"):
        get_backend("array-api:numpy", "fp8")


# -- the conformance suite ------------------------------------------------------------------------------

SLOW = pytest.mark.slow  # the same suite again in another precision: `pytest --full`
SUITE_RUNS = [
    ("array_api_strict", "fp64"),
    pytest.param("array_api_strict", "fp32", marks=SLOW),
    ("numpy", "fp64"),
    ("numpy", "fp32"),
    ("numpy", "fp16"),
    pytest.param("torch", "fp64", marks=SLOW),
    ("torch", "fp32"),
    pytest.param("torch", "fp16", marks=SLOW),
    ("torch", "bf16"),
    pytest.param("jax.numpy", "fp32", marks=NO_JAX),
]


@pytest.fixture(scope="module")
def suite_cases():
    """The shipped golden set (``rope-ref conformance run`` without ``--golden``)."""
    return shipped_cases()


@pytest.mark.parametrize("ns, precision", SUITE_RUNS)
def test_conformance_suite_passes_every_applicable_case(ns, precision, suite_cases):
    from rope_ref.conformance.runner import Runner

    b = _backend(ns, precision)
    report = Runner(b, spec=f"array-api:{ns}", precision=precision).run(suite_cases)
    counts = report.counts()
    failures = [f"{r.case_id} [{r.kind}]: {r.message[:300]}" for r in report.failures]
    assert not failures, "\n".join(failures)
    assert counts["passed"] > 0
    # Only the fp16 emulation needs a dtype outside the standard, and the adapter has no issue-20 id
    # builders or MLA scale ("operation missing"); nothing else may be unsupported.
    no_op = {"mrope_position_ids", "mrope_decode_ids", "vision_ids", "mla_softmax_scale"}
    missing = [r for r in report.results if r.status == "unsupported" and r.op in no_op]
    assert all(r.unsupported_reason == "operation" for r in missing)
    assert any(r.op == "multiaxis_apply" and r.status == "passed" for r in report.results)
    unsupported = [r.case_id for r in report.results if r.status == "unsupported" and r.op not in no_op]
    assert all(cid.startswith("chatglm_apply_2d-fp16") for cid in unsupported), unsupported
    if ns != "array_api_strict":
        assert not unsupported


def test_unavailable_jax_policy_is_a_skip_and_other_namespaces_still_fail(monkeypatch):
    """jax installed without x64 raises BackendUnavailable: a skip for jax only, never for numpy."""
    import sys

    def unavailable(spec, precision=None):
        raise BackendUnavailable(f"{spec}: no float64 (jax_enable_x64 is off)")

    monkeypatch.setattr(pytest, "importorskip", lambda name, *a, **k: None)  # pretend jax imports
    monkeypatch.setattr(sys.modules[__name__], "get_backend", unavailable)
    with pytest.raises(pytest.skip.Exception, match="jax"):
        _backend("jax.numpy")
    with pytest.raises(BackendUnavailable):
        _backend("numpy")


# -- the backend's own pieces, called directly ------------------------------------------------------------

DYNAMIC = rope_ref.RopeConfig(12, layout="half", scaling=rope_ref.scaling.DynamicNTK(3.0, 16))
YARN = rope_ref.RopeConfig(8, layout="interleaved", scaling=rope_ref.scaling.YaRN(4.0, 64))
YARN_FACTOR = 0.1 * math.log(4.0) + 1.0  # YaRN eq. 22 (Peng et al. 2023): sqrt(1/t) = 0.1 ln s + 1


def test_make_backend_defaults_name_version_and_policy():
    from rope_ref.backends.array_api import KERNEL_OPS, make_backend

    b = make_backend()
    assert b.name == "array-api:numpy" and b.version == np.__version__ and b.device == "cpu"
    assert (b.precision.io_dtype, b.precision.angle_dtype, b.precision.compute_dtype) == (
        "float32",
        "float64",
        "float32",
    )
    assert b.io_dtype == np.float32 and b.angle_dtype == np.float64
    assert b.inplace_ops == KERNEL_OPS and b.inplace is False
    half = make_backend("fp16", namespace="numpy")
    assert (half.precision.io_dtype, half.precision.compute_dtype) == ("float16", "float16")


def test_immutable_namespaces_get_no_inplace_ops(monkeypatch):
    from rope_ref.backends import array_api

    monkeypatch.setattr(array_api, "mutable_namespace", lambda xp, device: False)
    assert array_api.make_backend("fp64").inplace_ops == frozenset()


def test_make_backend_refusals_name_the_cause():
    from rope_ref.backends.array_api import available, make_backend

    with pytest.raises(ValueError, match=r"array-api backend: unknown options \['colour', 'speed'\]"):
        make_backend("fp32", speed=1, colour="red")
    with pytest.raises(
        BackendUnavailable, match=r"array-api:no_such_xyz_lib: cannot import 'no_such_xyz_lib'"
    ):
        make_backend("fp32", namespace="no_such_xyz_lib")
    with pytest.raises(BackendUnavailable, match="array-api:numpy has no bfloat16 on device cpu"):
        make_backend("bf16", namespace="numpy")
    assert available() == (True, "")
    assert available("numpy") == (True, "")
    ok, why = available("no_such_xyz_lib")
    assert not ok and why.startswith("array-api:no_such_xyz_lib: cannot import 'no_such_xyz_lib'")


def test_from_numpy_copies_keeps_zero_d_and_rounds_on_the_host():
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    src = np.array([1.0, 2.0, 3.0])
    plain, typed = b.from_numpy(src), b.from_numpy(src, "float64")
    src[0] = 99.0  # neither conversion may alias the caller's array
    assert plain.tolist() == [1.0, 2.0, 3.0] and typed.tolist() == [1.0, 2.0, 3.0]
    offset = b.from_numpy(np.array(7))
    assert offset.shape == () and int(offset) == 7 and offset.dtype == np.int64
    f16 = b.from_numpy(np.array([1.0 + 2.0**-12, 3.0 + 2.0**-10]), "fp16")
    assert f16.dtype == np.float16 and f16.tolist() == [1.0, 3.0]
    with pytest.raises(ValueError, match="array-api:numpy has no bf16 on device cpu"):
        b.from_numpy(src, "bf16")
    assert b.to_numpy(src) is src


def test_from_numpy_bfloat16_goes_through_float32():
    torch = pytest.importorskip("torch")
    from rope_ref.backends.array_api import make_backend

    b = make_backend("bf16", namespace="torch")
    # exact in float32; rounded in bfloat16; 70000 overflows float16 (bfloat16 has float32's range)
    vals = np.array([1.0 + 2.0**-9, 3.0 + 2.0**-8, -1.5, 70000.0])
    got = b.from_numpy(vals, "bfloat16")
    assert got.dtype == torch.bfloat16
    assert (
        got.tolist()
        == torch.tensor(vals, dtype=torch.float32).to(torch.bfloat16).tolist()
        == [1.0, 3.0, -1.5, 70144.0]
    )
    assert b.to_numpy(got.float()).dtype == np.float32


def test_seq_len_rule_at_the_helper():
    """HF's dynamic rule: explicit seq_len wins; else floor(max) + 1, at least 1; None without positions."""
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    xp = b.xp
    assert b._seq_len(xp, np.array([2.5, 7.9, 3.0]), DYNAMIC, None) == 8
    assert b._seq_len(xp, np.array([-6.0, -2.0]), DYNAMIC, None) == 1
    assert b._seq_len(xp, np.zeros(0), DYNAMIC, None) is None
    assert b._seq_len(xp, np.array([2.0]), DYNAMIC, 40) == 40
    assert b._seq_len(xp, np.array([500.0]), CONFIGS["half"], None) is None
    with pytest.raises(ValueError, match="seq_len"):
        b._seq_len(xp, np.array([2.0]), DYNAMIC, 0)


def test_explicit_seq_len_reaches_apply_vjp_and_cos_sin():
    """Dynamic NTK (factor 3, original 16): a seq_len of 200 stretches the base; positions <= 9 alone would
    not. Expected values: the float64 oracle with the same seq_len."""
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    rng = np.random.default_rng(21)
    x, g = rng.standard_normal((5, 12)), rng.standard_normal((5, 12))
    pos = np.array([0, 2, 5, 9, 4])
    for n in (None, 200):
        np.testing.assert_allclose(
            b.apply(x, pos, DYNAMIC, n), rope_ref.apply(x, pos, DYNAMIC, seq_len=n), atol=1e-13
        )
        np.testing.assert_allclose(
            b.apply_vjp(x, pos, DYNAMIC, g, n), rope_ref.apply(g, -pos, DYNAMIC, seq_len=n), atol=1e-13
        )
        c, s = b.cos_sin(pos, DYNAMIC, n)
        rc, rs = rope_ref.cos_sin(pos, DYNAMIC, seq_len=n)
        np.testing.assert_allclose(c, rc, atol=1e-14)
        np.testing.assert_allclose(s, rs, atol=1e-14)
    assert not np.allclose(b.apply(x, pos, DYNAMIC, 200), b.apply(x, pos, DYNAMIC))
    np.testing.assert_allclose(b.inv_freq(DYNAMIC, 200), rope_ref.inv_freq(DYNAMIC, 200), rtol=1e-15)


@pytest.mark.parametrize("ns", ["numpy", "array_api_strict"])
def test_omitted_seq_len_is_the_largest_position_plus_one_at_every_entry(ns):
    """Dynamic NTK (head 12, factor 3, original 16) with positions up to 40 and no seq_len: apply,
    apply_vjp and cos_sin all stretch the base for L = 41 (HF ``_compute_dynamic_ntk_parameters``:
    base * (factor L / L0 - (factor - 1))^(d / (d - 2))), written out here with NumPy."""
    b = _backend(ns)
    pos = np.array([3, 40, 7, 0, 12])
    scaled = 10000.0 * (3.0 * 41 / 16 - 2.0) ** (12 / 10)
    theta = pos[:, None] * scaled ** (-np.arange(0, 12, 2) / 12)
    cos, sin = np.cos(theta), np.sin(theta)
    x = np.random.default_rng(23).standard_normal((5, 12))

    def rotated(s):  # half layout: pairs (i, i + 6)
        a, c = x[:, :6], x[:, 6:]
        return np.concatenate([a * cos - c * s, c * cos + a * s], axis=-1)

    got_cos, got_sin = (b.to_numpy(t) for t in b.cos_sin(b.from_numpy(pos), DYNAMIC))
    np.testing.assert_allclose(got_cos, cos, atol=1e-13)
    np.testing.assert_allclose(got_sin, sin, atol=1e-13)
    xb, pb = b.from_numpy(x), b.from_numpy(pos)
    np.testing.assert_allclose(b.to_numpy(b.apply(xb, pb, DYNAMIC)), rotated(sin), atol=1e-13)
    np.testing.assert_allclose(b.to_numpy(b.apply_vjp(xb, pb, DYNAMIC, xb)), rotated(-sin), atol=1e-13)
    # the stretch matters: the unscaled base (seq_len <= 16) gives other angles
    assert not np.allclose(b.to_numpy(b.cos_sin(pb, DYNAMIC, 16)[0]), cos, atol=1e-6)


def test_attention_factor_scales_every_position_including_zero():
    """YaRN's factor multiplies cos and sin, so position 0 gives A x, not x (the identity shortcut is
    only for a factor of 1)."""
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    assert math.isclose(b.attention_factor(YARN), YARN_FACTOR, rel_tol=1e-15)
    x = np.arange(1.0, 17.0).reshape(2, 8)
    y = b.apply(x, np.array([0, 0]), YARN)
    np.testing.assert_allclose(y, YARN_FACTOR * x, rtol=1e-15)
    c, s = b.cos_sin(np.array([0, 3]), YARN)
    np.testing.assert_allclose(c[0], np.full(4, YARN_FACTOR), rtol=1e-15)
    np.testing.assert_allclose(np.hypot(c, s), YARN_FACTOR, rtol=1e-14)


def test_positions_as_a_python_list_and_a_leading_batch_axis():
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    cfg = CONFIGS["interleaved-partial"]
    x = np.random.default_rng(22).standard_normal((2, 3, 10))
    want = _loop_apply(x.reshape(6, 10), np.array([4, 11, 30] * 2), cfg).reshape(2, 3, 10)
    np.testing.assert_allclose(b.apply(x, [4, 11, 30], cfg), want, atol=1e-13)
    np.testing.assert_allclose(b.apply(x, np.array([4, 11, 30]), cfg), want, atol=1e-13)


def test_rotate_refuses_bad_shapes_naming_them():
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp64")
    cfg = CONFIGS["half"]
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=8, got x.shape=\(3, 6\)"):
        b.apply(np.zeros((3, 6)), np.arange(3), cfg)
    with pytest.raises(ValueError, match=r"head_dim=8, got x.shape=\(\)"):
        b.apply(np.zeros(()), np.arange(1), cfg)
    # exactly head_dim: wider than head_dim, or as wide as rotary_dim only (partial rotary), is refused
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=8, got x.shape=\(3, 10\)"):
        b.apply(np.zeros((3, 10)), np.arange(3), cfg)
    partial = CONFIGS["interleaved-partial"]  # head_dim 10, rotary_dim 6
    for width in (6, 8, 12):
        with pytest.raises(ValueError, match=rf"head_dim=10, got x.shape=\(3, {width}\)"):
            b.apply(np.zeros((3, width)), np.arange(3), partial)
        with pytest.raises(ValueError, match=rf"head_dim=10, got x.shape=\(3, {width}\)"):
            b.apply_vjp(np.zeros((3, 10)), np.arange(3), partial, np.zeros((3, width)))
    with pytest.raises(
        ValueError, match=r"positions of shape \(4,\) do not broadcast against x.shape\[:-1\] = \(3,\)"
    ):
        b.apply(np.zeros((3, 8)), np.arange(4), cfg)
    with pytest.raises(ValueError, match=r"positions of shape \(2,\)"):
        b.apply_vjp(np.zeros((3, 8)), np.arange(2), cfg, np.zeros((3, 8)))


def test_float32_device_rounds_the_table_once():
    xps = pytest.importorskip("array_api_strict")
    from rope_ref.backends.array_api import make_backend

    b = make_backend("fp32", namespace="array_api_strict", device="no_float64")
    cfg = rope_ref.RopeConfig(8, layout="half", base=300.0)
    dev = xps.Device("no_float64")
    assert b.from_numpy(np.ones(3), "float32").device == dev and b.from_numpy(np.arange(3)).device == dev
    freqs = b.inv_freq(cfg)
    assert freqs.dtype == xps.float32 and freqs.device == dev
    host = freqs.to_device(xps.Device("CPU_DEVICE"))
    assert np.array_equal(np.asarray(host), np.array([300.0 ** (-i / 4) for i in range(4)], dtype=np.float32))
