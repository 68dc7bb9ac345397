"""The array-api backend's multi-axis RoPE (``rope_ref.backends.array_api.multiaxis_apply``) vs the oracle.

Run on three namespaces: NumPy and PyTorch (through array-api-compat) and array-api-strict, which
refuses anything outside the standard (the proof that only standard calls are used). Reference:
:func:`rope_ref.multiaxis.apply` (float64). Tolerance per rotated pair ``i`` (radius ``r``, factor
``A``, position ``m = m^(s(i))``, frequency ``phi_i``):

* float64: ``A r (|m phi_i| + 16) 2^-53`` (the adapter rounds ``m phi_i`` once; libm cos/sin, the
  factor, the rotation and the oracle's own roundings stay within ``16u A r``; see
  ``tests/backends/test_torch_multiaxis.py``);
* float32 activations (float64 or float32 angles): the conformance model (``docs/tolerance.md``)
  ``A r (k_i |m phi_i| u_a + ROUND_SLACK u_r) + floor``, ``k_i = PHASE_SLACK + 2 |ln phi_i|``,
  ``u_r = u_io + u_a + u_c``.

Each bug class of issue 20 is emulated by the wrong spec a buggy port effectively uses and must fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from multiaxis_specs import broken_specs, pair_geometry, per_element, positions, presets, ratio
from rope_ref.backends.array_api import make_backend, multiaxis_apply
from rope_ref.conformance.tolerance import PHASE_SLACK, ROUND_SLACK, UNIT_ROUNDOFF

from rope_ref import RopeConfig, multiaxis
from rope_ref.scaling import DynamicNTK, YaRN

NAMESPACES = ["numpy", "array_api_strict", "torch"]


def namespace(name: str):
    """(the namespace module, to_array(np) -> array, to_numpy(array) -> float64 np.ndarray)."""
    mod = pytest.importorskip(name)
    if name == "torch":
        return mod, lambda a, dt=None: mod.tensor(np.asarray(a, dtype=dt)), lambda a: a.double().numpy()
    return (
        mod,
        lambda a, dt=None: mod.asarray(np.asarray(a, dtype=dt)),
        lambda a: np.asarray(a, dtype=np.float64),
    )


def tolerance(x, pos, spec, io: str, angle: str, seq_len=None) -> np.ndarray:
    """Per-element bound (module docstring); 0 on pass-through channels."""
    phi, m, radius, a, b = pair_geometry(x, pos, spec, seq_len)
    if io == "float64":
        pair = radius * (np.abs(m * phi) + 16.0) * UNIT_ROUNDOFF["float64"] + 4 * 2.0**-1022
    else:
        u_a = UNIT_ROUNDOFF[angle]
        k = PHASE_SLACK + 2.0 * np.abs(np.log(phi))
        u_r = 2 * UNIT_ROUNDOFF[io] + u_a
        pair = radius * (k * np.abs(m * phi) * u_a + ROUND_SLACK * u_r) + 4.0 * 2.0**-126
    return per_element(x.shape, a, b, pair)


def worst_ratio(x, pos, spec, got, io, angle="float64", *, want_spec=None, seq_len=None) -> float:
    """max |got - oracle| / tol over rotated channels; inf if a pass-through channel differs."""
    ref = want_spec or spec
    want = multiaxis.apply(x, pos, ref, seq_len=seq_len)
    tol = tolerance(x, pos, ref, io, angle, seq_len)
    return ratio(got, want, tol)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("name", sorted(presets()))
def test_presets_match_the_oracle(name, ns) -> None:
    _, arr, back = namespace(ns)
    spec = presets()[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal((2, 9, 3, spec.head_dim))
    pos = positions(rng, spec, (2, 9, 1))
    got = multiaxis_apply(arr(x), arr(pos), spec)
    assert type(got) is type(arr(x))  # the caller's library
    assert worst_ratio(x, pos, spec, back(got), "float64") <= 1.0
    x32 = x.astype(np.float32)
    got = multiaxis_apply(arr(x32), arr(pos), spec)
    assert back(got).dtype == np.float64 and str(got.dtype).endswith("float32")
    assert worst_ratio(x32.astype(np.float64), pos, spec, back(got), "float32") <= 1.0


@pytest.mark.parametrize("ns", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("bug", sorted(broken_specs()))
def test_each_bug_class_fails_the_comparison(bug, ns) -> None:
    _, arr, back = namespace(ns)
    name, wrong = broken_specs()[bug]
    spec = presets()[name]
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 2, 9, spec.head_dim))
    pos = positions(rng, spec, (3, 1, 9))
    right = worst_ratio(x, pos, spec, back(multiaxis_apply(arr(x), arr(pos), spec)), "float64")
    bad = back(multiaxis_apply(arr(x), arr(pos), wrong))
    broken = worst_ratio(x, pos, wrong, bad, "float64", want_spec=spec)
    assert right <= 1.0 < broken and broken > 1e3, (right, broken)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl", "glm-4.1v"])
def test_text_only_equals_the_backends_1d_apply_bit_for_bit(name, ns) -> None:
    _, arr, back = namespace(ns)
    spec = presets()[name]
    rng = np.random.default_rng(4)
    for precision, dt in (("fp64", np.float64), ("fp32", np.float32)):
        backend = make_backend(precision, namespace=ns)
        x = arr(rng.standard_normal((2, 4, 13, spec.head_dim)), dt)
        ids = rng.integers(0, 30000, size=(2, 1, 13))
        y3 = back(multiaxis_apply(x, arr(np.stack([ids] * 3)), spec))
        y1 = back(backend.apply(x, arr(ids), spec.tables[0]))
        assert np.array_equal(y3, y1)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_chatglm_2d_is_two_half_head_ropes(ns) -> None:
    xp, arr, back = namespace(ns)
    spec = multiaxis.chatglm_2d(64)
    backend = make_backend("fp64", namespace=ns)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 2, 64))
    pid, bid = rng.integers(0, 500, size=(5, 1)), rng.integers(0, 40, size=(5, 1))
    y = back(multiaxis_apply(arr(x), arr(np.stack([pid, bid])), spec))
    half = RopeConfig(32, layout="half")
    want = np.concatenate([back(backend.apply(arr(x[..., :32]), arr(pid), half)),
                           back(backend.apply(arr(x[..., 32:]), arr(bid), half))], axis=-1)  # fmt: skip
    assert np.array_equal(y, want)


def test_per_stream_tables_length_scaling_and_float32_angles() -> None:
    xps = pytest.importorskip("array_api_strict")
    plain = RopeConfig(48, layout="interleaved", rotary_dim=32)
    yarn = RopeConfig(48, layout="interleaved", rotary_dim=32, scaling=YaRN(4.0, 2048))
    ntk = RopeConfig(48, layout="interleaved", rotary_dim=32, scaling=DynamicNTK(2.0, 1024))
    spec = multiaxis.MultiAxisRope(48, layout="interleaved", streams=(0,) * 4 + (1,) * 6 + (2,) * 6,
                                   tables=(plain, yarn, ntk), freq_index=tuple(range(16)))  # fmt: skip
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 2, 48))
    pos = positions(rng, spec, (6, 1))
    pos[2, 3, 0] = 9000  # dynamic NTK past its original length: the table depends on max(pos) + 1
    for seq_len in (None, 12000):
        got = np.asarray(multiaxis_apply(xps.asarray(x), xps.asarray(pos), spec, seq_len=seq_len))
        assert worst_ratio(x, pos, spec, got, "float64", seq_len=seq_len) <= 1.0
    # A device without float64: angles in float32 (rounded phi, float32 product, cos/sin).
    dev = xps.Device("no_float64")
    x32 = x.astype(np.float32)
    got = multiaxis_apply(xps.asarray(x32, device=dev), xps.asarray(pos.astype(np.int32), device=dev), spec)
    assert got.device == dev and got.dtype == xps.float32
    got = np.asarray(xps.asarray(got, device=xps.Device("CPU_DEVICE")), dtype=np.float64)
    assert worst_ratio(x32.astype(np.float64), pos, spec, got, "float32", "float32") <= 1.0


def test_bad_arguments_name_the_argument() -> None:
    spec = presets()["qwen2-vl"]
    x = np.zeros((2, 128))
    with pytest.raises(ValueError, match="n_streams=3"):
        multiaxis_apply(x, np.zeros((2, 2)), spec)
    with pytest.raises(ValueError, match="positions"):
        multiaxis_apply(x, np.zeros((3, 5)), spec)
    with pytest.raises(ValueError, match="head_dim=128"):
        multiaxis_apply(np.zeros((2, 64)), np.zeros((3, 2)), spec)
    with pytest.raises(TypeError, match="spec"):
        multiaxis_apply(x, np.zeros((3, 2)), RopeConfig(128, layout="half"))


def ntk_spec() -> multiaxis.MultiAxisRope:
    """Two streams; only the second table is length-dependent (dynamic NTK, original length 8)."""
    plain = RopeConfig(8, layout="half", base=30.0)
    ntk = RopeConfig(8, layout="half", base=30.0, scaling=DynamicNTK(2.0, 8))
    return multiaxis.MultiAxisRope(8, layout="half", streams=(0, 1, 1, 0), tables=(plain, ntk))


def test_positions_of_another_library_are_converted_on_the_host() -> None:
    torch = pytest.importorskip("torch")
    spec = ntk_spec()
    x = np.random.default_rng(8).standard_normal((3, 8))
    pos = np.array([[0, 4, 40], [2, 1, 30]])
    want = multiaxis_apply(torch.tensor(x), torch.tensor(pos), spec)
    for host in (pos, pos.tolist()):
        got = multiaxis_apply(torch.tensor(x), host, spec)
        assert isinstance(got, torch.Tensor) and torch.equal(got, want)
    assert worst_ratio(x, pos, spec, want.numpy(), "float64") <= 1.0


def test_length_rule_over_every_stream_empty_and_negative_positions() -> None:
    """max(positions) + 1 over all streams (40 on the plain stream stretches the NTK table), at least 1
    (all-negative positions: no stretch), nothing to measure without positions."""
    spec = ntk_spec()
    x = np.random.default_rng(9).standard_normal((3, 8))
    for pos in (np.array([[0, 40, 3], [1, 2, 3]]), np.array([[-50, -3, -9], [-1, -2, -7]])):
        got = multiaxis_apply(x, pos, spec)
        seq_len = max(int(pos.max()) + 1, 1)
        assert worst_ratio(x, pos, spec, got, "float64", seq_len=seq_len) <= 1.0
    stretched = multiaxis_apply(x, np.array([[0, 40, 3], [1, 2, 3]]), spec)
    short = multiaxis_apply(x, np.array([[0, 40, 3], [1, 2, 3]]), spec, seq_len=8)
    assert not np.allclose(stretched, short)
    empty = multiaxis_apply(np.zeros((0, 8)), np.zeros((2, 0)), spec)
    assert empty.shape == (0, 8)


def test_float16_activations_stay_float16() -> None:
    spec = presets()["qwen2-vl"]
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 128)).astype(np.float16)
    pos = positions(rng, spec, (4,))
    got = multiaxis_apply(x, pos, spec)
    assert got.dtype == np.float16
    want = multiaxis.apply(x.astype(np.float64), pos, spec)
    # cos/sin rounded to float16 (u = 2**-11 each), two products and a sum: <= 5u r, r <= sqrt(2) max|x|.
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=4e-3 * np.abs(x).max())


def test_zero_d_inputs_are_refused_naming_the_argument() -> None:
    spec = presets()["qwen2-vl"]
    with pytest.raises(ValueError, match=r"n_streams=3 \(one row per stream\), got shape \(\)"):
        multiaxis_apply(np.zeros((2, 128)), np.array(3), spec)
    with pytest.raises(ValueError, match=r"head_dim=128, got x.shape=\(\)"):
        multiaxis_apply(np.array(1.0), np.zeros((3, 2)), spec)
    with pytest.raises(
        ValueError, match=r"positions of shape \(3, 5\) do not broadcast against x.shape\[:-1\] = \(2,\)"
    ):
        multiaxis_apply(np.zeros((2, 128)), np.zeros((3, 5)), spec)
