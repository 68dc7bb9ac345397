"""The torch adapter's multi-axis RoPE (``rope_ref.backends.torch.multiaxis_apply``) against the oracle.

Reference: :func:`rope_ref.multiaxis.apply` (float64, exact cos/sin of the exact product). Tolerances,
per rotated pair ``i`` with radius ``r`` (of the pair in ``x``), attention factor ``A``, position
``m = m^(s(i))`` and frequency ``phi_i``:

* float64 angles and arithmetic: ``A r (|m phi_i| + 16) 2^-53``. The adapter rounds the product
  ``m phi_i`` once (an angle error of at most ``|m phi_i| 2^-53``; ``phi_i`` is the oracle's own
  float64 value); cos/sin (libm, within 1 ulp = 2u each), the attention factor and the rotation's three
  roundings add at most about ``6u A r``, and the oracle's own output carries about ``5u A r`` (its cos/sin
  are correctly rounded, its products and sums rounded once each, as in Higham's model
  ``fl(a op b) = (a op b)(1 + d)``): ``16u`` bounds both with a little room.
* float32 angles: the conformance model (``docs/tolerance.md``, constants from
  :mod:`rope_ref.conformance.tolerance`): ``A r (k_i |m phi_i| u_a + ROUND_SLACK u_r) + floor`` with
  ``k_i = PHASE_SLACK + 2 |ln phi_i|`` and ``u_r = u_io + u_a + u_c``.

Pass-through channels must be exact. Each bug class of issue 20 (pairing flag ignored, sections in
the wrong order, interleaved sections read as blocked, partial rotary dropped) is emulated by the
wrong spec a buggy port effectively uses, and must fail the comparison.
"""

from __future__ import annotations

import numpy as np
import pytest
from multiaxis_specs import broken_specs, pair_geometry, per_element, positions, presets, ratio

torch = pytest.importorskip("torch")

from rope_ref.backends import torch as rt  # noqa: E402
from rope_ref.backends._torch_multiaxis import multiaxis_apply  # noqa: E402
from rope_ref.conformance.tolerance import PHASE_SLACK, ROUND_SLACK, UNIT_ROUNDOFF  # noqa: E402

import rope_ref  # noqa: E402
from rope_ref import RopeConfig, multiaxis  # noqa: E402
from rope_ref.scaling import DynamicNTK, YaRN  # noqa: E402

_NAMES = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def tolerance(x: np.ndarray, pos: np.ndarray, spec, io: str, angle: str, seq_len=None) -> np.ndarray:
    """Per-element bound (module docstring); 0 on pass-through channels."""
    phi, m, radius, a, b = pair_geometry(x, pos, spec, seq_len)
    if angle == "float64":
        pair = radius * (np.abs(m * phi) + 16.0) * UNIT_ROUNDOFF["float64"] + 4 * 2.0**-1022
    else:
        u_a, compute = UNIT_ROUNDOFF["float32"], "float32" if io in ("float16", "bfloat16") else io
        u_r = UNIT_ROUNDOFF[io] + u_a + UNIT_ROUNDOFF[compute]
        k = PHASE_SLACK + 2.0 * np.abs(np.log(phi))
        pair = radius * (k * np.abs(m * phi) * u_a + ROUND_SLACK * u_r) + 4.0 * 2.0**-126
    return per_element(x.shape, a, b, pair)


def worst_ratio(x, pos, spec, got, io, angle, *, want_spec=None, seq_len=None) -> float:
    """max |got - oracle| / tol over rotated channels; inf if a pass-through channel differs."""
    ref = want_spec or spec
    want = multiaxis.apply(x, pos, ref, seq_len=seq_len)
    tol = tolerance(x, pos, ref, io, angle, seq_len)
    return ratio(got, want, tol)


def run(x: np.ndarray, pos: np.ndarray, spec, dtype, device="cpu", **kw) -> tuple[np.ndarray, np.ndarray]:
    """(the float64 values the adapter sees, its output as float64)."""
    xt = torch.tensor(x, device=device).to(dtype)
    y = multiaxis_apply(xt, torch.tensor(pos, device=device), spec, **kw)
    assert y.dtype == dtype and y.shape == xt.shape and y.device == xt.device
    return xt.double().cpu().numpy(), y.double().cpu().numpy()


# -- against the oracle ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(presets()))
def test_presets_match_the_oracle_in_float64(name, device) -> None:
    spec = presets()[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal((2, 3, 17, spec.head_dim))
    pos = positions(rng, spec, (2, 1, 17))  # (streams, batch, 1, seq): x of (batch, heads, seq, dim)
    xq, got = run(x, pos, spec, torch.float64, device, angle_dtype=torch.float64)
    assert worst_ratio(xq, pos, spec, got, "float64", "float64") <= 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(presets()))
def test_presets_match_the_oracle_in_low_precision(name, dtype) -> None:
    spec = presets()[name]
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    x = rng.standard_normal((2, 11, 3, spec.head_dim))
    pos = positions(rng, spec, (2, 11, 1))
    xq, got = run(x, pos, spec, dtype)
    assert worst_ratio(xq, pos, spec, got, _NAMES[dtype], "float32") <= 1.0


@pytest.mark.parametrize("bug", sorted(broken_specs()))
def test_each_bug_class_fails_the_comparison(bug) -> None:
    name, wrong = broken_specs()[bug]
    spec = presets()[name]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 2, 9, spec.head_dim))
    pos = positions(rng, spec, (3, 1, 9))
    for dtype, angle in ((torch.float64, torch.float64), (torch.float32, torch.float32)):
        io = _NAMES[dtype]
        xq, good = run(x, pos, spec, dtype, angle_dtype=angle)
        _, bad = run(x, pos, wrong, dtype, angle_dtype=angle)
        right = worst_ratio(xq, pos, spec, good, io, _NAMES[angle])
        broken = worst_ratio(xq, pos, wrong, bad, io, _NAMES[angle], want_spec=spec)
        assert right <= 1.0 < broken and broken > 1e3, (io, right, broken)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl", "glm-4.1v"])
def test_text_only_equals_the_1d_apply_bit_for_bit(name, dtype) -> None:
    spec = presets()[name]
    rng = np.random.default_rng(5)
    x = torch.tensor(rng.standard_normal((2, 4, 13, spec.head_dim))).to(dtype)
    ids = torch.tensor(rng.integers(0, 30000, size=(2, 1, 13)))
    for angle in (torch.float32, torch.float64):
        y3 = multiaxis_apply(x, torch.stack([ids] * 3), spec, angle_dtype=angle)
        y1 = rt.apply(x, ids, spec.tables[0], angle_dtype=angle)
        assert torch.equal(y3, y1)


def test_chatglm_2d_is_two_half_head_ropes_bit_for_bit() -> None:
    spec = multiaxis.chatglm_2d(64)
    rng = np.random.default_rng(6)
    x = torch.tensor(rng.standard_normal((5, 2, 64)), dtype=torch.float32)
    pid, bid = (torch.tensor(rng.integers(0, n, size=(5, 1))) for n in (500, 40))
    y = multiaxis_apply(x, torch.stack([pid, bid]), spec)
    half = RopeConfig(32, layout="half")
    want = torch.cat([rt.apply(x[..., :32], pid, half), rt.apply(x[..., 32:], bid, half)], dim=-1)
    assert torch.equal(y, want)


def mixed_spec() -> multiaxis.MultiAxisRope:
    """Three streams, three tables: plain, YaRN (attention factor != 1), dynamic NTK (length-dependent)."""
    plain = RopeConfig(48, layout="interleaved", rotary_dim=32)
    yarn = RopeConfig(48, layout="interleaved", rotary_dim=32, scaling=YaRN(4.0, 2048))
    ntk = RopeConfig(48, layout="interleaved", rotary_dim=32, scaling=DynamicNTK(2.0, 1024))
    assert rope_ref.attention_factor(yarn) != 1.0
    return multiaxis.MultiAxisRope(48, layout="interleaved", streams=(0,) * 4 + (1,) * 6 + (2,) * 6,
                                   tables=(plain, yarn, ntk), freq_index=tuple(range(16)))  # fmt: skip


def test_per_stream_tables_and_length_dependent_scaling() -> None:
    spec = mixed_spec()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 2, 48))
    pos = positions(rng, spec, (6, 1))
    pos[2, 3, 0] = 9000  # beyond the dynamic-NTK original length: its table depends on max(pos) + 1
    for seq_len in (None, 12000):
        xq, got = run(x, pos, spec, torch.float64, angle_dtype=torch.float64, seq_len=seq_len)
        assert worst_ratio(xq, pos, spec, got, "float64", "float64", seq_len=seq_len) <= 1.0
    xq, got = run(x, pos, spec, torch.float32)
    assert worst_ratio(xq, pos, spec, got, "float32", "float32") <= 1.0


def test_one_scaled_table_shared_by_every_stream_applies_its_attention_factor() -> None:
    """Three streams sharing one YaRN table (factor 4): every rotated pair's radius grows by
    0.1 ln 4 + 1 (YaRN eq. 22, Peng et al. 2023), and the pass-through channels stay as they are."""
    table = RopeConfig(16, layout="half", scaling=YaRN(4.0, 64))
    spec = multiaxis.MultiAxisRope(16, layout="half", streams=(0, 0, 1, 1, 2, 2), tables=table)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 16))
    pos = positions(rng, spec, (5,))
    xq, got = run(x, pos, spec, torch.float64, angle_dtype=torch.float64)
    assert worst_ratio(xq, pos, spec, got, "float64", "float64") <= 1.0
    a, b = np.arange(6), np.arange(6, 12)  # the half layout's pairs (i, i + 6) of rotary_dim 12
    radius_in, radius_out = np.hypot(x[:, a], x[:, b]), np.hypot(got[:, a], got[:, b])
    np.testing.assert_allclose(radius_out, (0.1 * np.log(4.0) + 1.0) * radius_in, rtol=1e-13)
    assert np.array_equal(got[:, 12:], x[:, 12:])


def test_blocked_spec_keeps_its_pass_through_channels() -> None:
    """Two blocks of 3 pairs (ChatGLM-6B's two half-heads) in a head of 20: channels 12..19 pass through."""
    spec = multiaxis.MultiAxisRope(
        20, layout="half", streams=(0, 0, 0, 1, 1, 1), tables=RopeConfig(20, layout="half"), blocks=2
    )
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 3, 20))
    pos = positions(rng, spec, (4, 1))
    xq, got = run(x, pos, spec, torch.float64, angle_dtype=torch.float64)
    assert got.shape == x.shape
    assert np.array_equal(got[..., 12:], x[..., 12:])
    assert worst_ratio(xq, pos, spec, got, "float64", "float64") <= 1.0


# -- autograd and torch.compile ----------------------------------------------------------------------


@pytest.mark.parametrize("autograd", ["function", "native"])
@pytest.mark.parametrize("name", ["qwen3-vl", "glm-4.1v", "chatglm-6b", "pixtral"])
@pytest.mark.slow
def test_gradcheck_in_float64(name, autograd) -> None:
    spec = presets()[name]
    rng = np.random.default_rng(8)
    x = torch.tensor(rng.standard_normal((2, 3, spec.head_dim)), requires_grad=True)
    pos = torch.tensor(positions(rng, spec, (2, 3)))

    def f(t, p=pos):
        return multiaxis_apply(t, p, spec, angle_dtype=torch.float64, autograd=autograd)

    assert torch.autograd.gradcheck(f, (x,))
    if autograd == "function" and name in ("chatglm-6b", "pixtral"):  # double backward (blocks, gather)
        small = x[:1, :2].detach().requires_grad_()
        assert torch.autograd.gradgradcheck(lambda t: f(t, pos[:, :1, :2]), (small,))
    # The gradient is the inverse rotation: the oracle at the negated positions.
    g = torch.tensor(rng.standard_normal(tuple(x.shape)))
    (gx,) = torch.autograd.grad(f(x), x, g)
    want = multiaxis.apply(g.numpy(), -pos.numpy(), spec)
    np.testing.assert_allclose(gx.numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_torch_compile_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()
    rng = np.random.default_rng(9)
    for name in ("qwen3-vl", "chatglm-6b"):  # the gather path and the block reshape
        spec = presets()[name]

        def f(t, p, spec=spec):
            return multiaxis_apply(t, p, spec)

        compiled = torch.compile(f, fullgraph=True)  # fullgraph: a graph break raises
        x = torch.tensor(
            rng.standard_normal((2, 7, 3, spec.head_dim)), dtype=torch.float32, requires_grad=True
        )
        pos = torch.tensor(positions(rng, spec, (2, 7, 1)))
        y = compiled(x, pos)
        assert worst_ratio(x.detach().double().numpy(), pos.numpy(), spec, y.detach().double().numpy(),
                           "float32", "float32") <= 1.0  # fmt: skip
        g = torch.ones_like(y)
        (gx,) = torch.autograd.grad(y, x, g)
        (ge,) = torch.autograd.grad(f(x, pos), x, g)
        torch.testing.assert_close(gx, ge, rtol=1e-5, atol=1e-5)
    # Per-stream tables with a length-dependent scaling and a changing seq_len (a symbolic int: the
    # frequency table and the attention factors are runtime values of the graph, no recompile per length).
    spec = mixed_spec()
    compiled = torch.compile(
        lambda t, p, n: multiaxis_apply(t, p, spec, seq_len=n, angle_dtype=torch.float64), fullgraph=True
    )
    x = rng.standard_normal((6, 2, 48))
    pos = positions(rng, spec, (6, 1))
    for n in (3000, 5000, 9000):
        got = compiled(torch.tensor(x), torch.tensor(pos), n).numpy()
        assert worst_ratio(x, pos, spec, got, "float64", "float64", seq_len=n) <= 1.0


def test_tables_match_the_oracle_cos_sin() -> None:
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    spec = mixed_spec()
    rng = np.random.default_rng(10)
    pos = positions(rng, spec, (4, 5))
    cos, sin = multiaxis_tables(torch.tensor(pos), spec, angle_dtype=torch.float64)
    want_cos, want_sin = multiaxis.cos_sin(pos, spec)
    phi, amp = spec.pair_frequencies(int(pos.max()) + 1)
    m = np.moveaxis(pos, 0, -1)[..., list(spec.streams)]
    bound = amp * (np.abs(m * phi) + 4) * 2.0**-53  # the product's rounding, cos/sin and factor ulps
    assert np.all(np.abs(cos.numpy() - want_cos) <= bound) and np.all(np.abs(sin.numpy() - want_sin) <= bound)


def test_bad_arguments_name_the_argument() -> None:
    spec = presets()["qwen2-vl"]
    x = torch.zeros(2, 128)
    with pytest.raises(ValueError, match="n_streams=3"):
        multiaxis_apply(x, torch.zeros(2, 2), spec)
    with pytest.raises(ValueError, match="positions"):
        multiaxis_apply(x, torch.zeros(3, 5), spec)
    with pytest.raises(ValueError, match="head_dim=128"):
        multiaxis_apply(torch.zeros(2, 64), torch.zeros(3, 2), spec)
    with pytest.raises(TypeError, match="spec"):
        multiaxis_apply(x, torch.zeros(3, 2), RopeConfig(128, layout="half"))
    with pytest.raises(ValueError, match="finite"):
        multiaxis_apply(x, torch.full((3, 2), float("nan")), spec)
    # the dtype arguments are checked by multiaxis_apply itself, not only by multiaxis_tables
    ids = torch.zeros(3, 2, dtype=torch.int64)
    for bad in (torch.float16, torch.bfloat16, torch.int64, "float32"):
        with pytest.raises(ValueError, match=f"angle_dtype must be torch.float32 or .*, got {bad!r}"):
            multiaxis_apply(x, ids, spec, angle_dtype=bad)
    with pytest.raises(ValueError, match="compute_dtype must be None, 'input' or one of .*, got torch.int32"):
        multiaxis_apply(x, ids, spec, compute_dtype=torch.int32)


def test_exported_from_the_torch_adapter() -> None:
    assert rt.multiaxis_apply is multiaxis_apply


def test_tables_helper_checks_and_dtypes() -> None:
    """multiaxis_tables on its own: angle dtype checked, positions rounded to it (float64 positions give
    float32 tables), built on the positions' device ("meta" stands in for a GPU)."""
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    spec = rope_ref.mrope.mrope(RopeConfig(16, layout="half"), (2, 3, 3))
    pos = torch.tensor([[2.0**24 + 1, 2.0**24], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    cos, sin = multiaxis_tables(pos, spec)
    assert cos.dtype == torch.float32 and cos.shape == (2, 8)
    assert cos[0, 0].item() == cos[1, 0].item()  # 2**24 + 1 rounds to 2**24 in float32
    with pytest.raises(ValueError, match="angle_dtype must be torch.float32 or torch.float64"):
        multiaxis_tables(pos, spec, angle_dtype=torch.float16)
    with pytest.raises(TypeError, match="spec must be a rope_ref.multiaxis.MultiAxisRope, got RopeConfig"):
        multiaxis_tables(pos, RopeConfig(16, layout="half"))
    meta_cos, _ = multiaxis_tables(torch.zeros(3, 4, device="meta", dtype=torch.int64), spec)
    assert meta_cos.device.type == "meta" and meta_cos.shape == (4, 8)
    y = multiaxis_apply(
        torch.zeros(4, 16, device="meta"), torch.zeros(3, 4, device="meta", dtype=torch.int64), spec
    )
    assert y.device.type == "meta" and y.shape == (4, 16)


def test_compute_dtype_and_broadcast_are_honoured() -> None:
    spec = rope_ref.mrope.mrope(RopeConfig(16, layout="interleaved", rotary_dim=12), (2, 2, 2))
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(9), dtype=torch.float64).bfloat16()
    pos = torch.tensor([[0, 7, 3, 9, 2], [1, 1, 4, 4, 8], [6, 0, 5, 2, 2]])
    narrow = multiaxis_apply(x, pos, spec, compute_dtype="input")
    assert not torch.equal(narrow, multiaxis_apply(x, pos, spec))
    assert torch.equal(narrow[..., 12:], x[..., 12:])
    with pytest.raises(ValueError, match=r"positions of shape \(2, 3, 5\) does not broadcast"):
        multiaxis_apply(x[0], torch.zeros(3, 2, 3, 5, dtype=torch.int64), spec)


# -- the helpers: gather plan, index cache, lengths, the compiled path --------------------------------------


def repeated_table_spec() -> multiaxis.MultiAxisRope:
    """Streams 0 and 1 share table A (base 100); stream 2 has its own B (base 7, YaRN factor 2 on a
    head of 12), so the distinct tables are (A, B) read by streams (0, 2): offsets 0 and 4."""
    a = RopeConfig(12, layout="half", base=100.0, rotary_dim=8)
    b = RopeConfig(12, layout="half", base=7.0, rotary_dim=8, scaling=YaRN(2.0, 32))
    return multiaxis.MultiAxisRope(12, layout="half", streams=(2, 0, 1, 2), tables=(a, a, b),
                                   freq_index=(3, 1, 2, 0))  # fmt: skip


def test_plan_of_a_repeated_table() -> None:
    from rope_ref.backends._torch_multiaxis import _plan

    unique, pair_table, gather, shared = _plan(repeated_table_spec())
    assert unique == (0, 2) and pair_table == (1, 0, 0, 1) and gather == (4 + 3, 1, 2, 4 + 0)
    assert shared is False
    assert _plan(presets()["qwen2-vl"])[3] is True


def test_repeated_tables_give_each_pair_its_own_frequency_and_factor() -> None:
    """Hand-derived: pair i turns by m^(s(i)) * base_i^(-2 f_i / 8), times YaRN's 0.1 ln 2 + 1 on table B."""
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    spec = repeated_table_spec()
    pos = torch.tensor([[3, 11], [5, 0], [17, 2]])
    cos, sin = multiaxis_tables(pos, spec, angle_dtype=torch.float64)
    amp_b = 0.1 * np.log(2.0) + 1.0
    base = np.array([7.0, 100.0, 100.0, 7.0])
    amp = np.array([amp_b, 1.0, 1.0, amp_b])
    phi = base ** (-2.0 * np.array([3, 1, 2, 0]) / 8)
    # YaRN ramps the low frequencies of B (original length 32): use the oracle's own per-pair phi for B.
    phi_oracle, amp_oracle = spec.pair_frequencies()
    np.testing.assert_allclose(amp_oracle, amp, rtol=1e-15)
    np.testing.assert_allclose(phi_oracle[1:3], phi[1:3], rtol=1e-15)
    m = pos.numpy().T[:, [2, 0, 1, 2]].astype(np.float64)
    np.testing.assert_allclose(cos.numpy(), amp * np.cos(m * phi_oracle), rtol=0, atol=1e-14)
    np.testing.assert_allclose(sin.numpy(), amp * np.sin(m * phi_oracle), rtol=0, atol=1e-14)


def test_distinct_plain_tables_keep_unit_amplitude() -> None:
    """Two unscaled tables of different bases (the non-shared path with every factor 1)."""
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    a, b = RopeConfig(8, layout="half", base=50.0), RopeConfig(8, layout="half", base=9.0)
    spec = multiaxis.MultiAxisRope(8, layout="half", streams=(0, 1, 1, 0), tables=(a, b))
    pos = torch.tensor([[2, 7, 40], [9, 1, 3]])
    cos, sin = multiaxis_tables(pos, spec, angle_dtype=torch.float64)
    phi = np.array([50.0**0, 9.0 ** (-1 / 4), 9.0 ** (-2 / 4), 50.0 ** (-3 / 4)])
    m = pos.numpy().T[:, [0, 1, 1, 0]]
    np.testing.assert_allclose(cos.numpy(), np.cos(m * phi), rtol=0, atol=1e-14)
    np.testing.assert_allclose(sin.numpy(), np.sin(m * phi), rtol=0, atol=1e-14)


def test_seq_len_helper_takes_the_longest_over_every_table() -> None:
    from rope_ref.backends._torch_multiaxis import _seq_len

    plain, _, ntk = mixed_spec().tables
    pos = torch.tensor([[4, 9000], [3, 2], [1, 7]])  # the long position is on stream 0, not ntk's stream
    assert _seq_len(pos, (plain, ntk), None) == 9001
    assert _seq_len(pos, (plain, ntk), 50) == 50
    assert _seq_len(pos, (plain,), None) is None
    spec = mixed_spec()
    x = np.random.default_rng(13).standard_normal((2, 48))
    xq, got = run(x, pos.numpy(), spec, torch.float64, angle_dtype=torch.float64)
    assert worst_ratio(xq, pos.numpy(), spec, got, "float64", "float64") <= 1.0


def test_index_tensors_are_cached_per_device_and_outlive_inference_mode() -> None:
    """Built first under inference mode, the cached indices must still be usable by autograd later
    (positions that require a gradient save the stream index for backward)."""
    from rope_ref.backends._torch_multiaxis import _index_tensors, _indices, multiaxis_tables

    spec = multiaxis.MultiAxisRope(
        10, layout="interleaved", streams=(1, 0, 1), tables=RopeConfig(10, layout="interleaved", base=321.0)
    )
    with torch.inference_mode():
        streams, gather, pair_table = _index_tensors(spec, torch.device("cpu"))
        multiaxis_tables(torch.zeros(2, 3), spec)
    assert not any(t.is_inference() for t in (streams, gather, pair_table))
    assert streams.tolist() == [1, 0, 1] and gather.tolist() == [0, 1, 2] and pair_table.tolist() == [0, 0, 0]
    assert streams.dtype == torch.long
    assert _index_tensors(spec, torch.device("meta"))[0].device.type == "meta"
    assert {t.device.type for t in _indices(spec, torch.device("meta"))} == {"meta"}
    assert {t.device.type for t in _indices(spec, "cpu")} == {"cpu"}
    pos = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64, requires_grad=True)
    cos, _ = multiaxis_tables(pos, spec, angle_dtype=torch.float64)
    cos.sum().backward()
    phi = 321.0 ** (-np.arange(3) * 2 / 10)
    p = pos.detach().numpy()
    want = np.zeros_like(p)
    for i, s in enumerate((1, 0, 1)):
        want[s] -= phi[i] * np.sin(p[s] * phi[i])
    np.testing.assert_allclose(pos.grad.numpy(), want, rtol=1e-13)


def test_tables_device_argument_and_host_positions() -> None:
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    spec = presets()["qwen2-vl"]
    cos, _ = multiaxis_tables(torch.zeros(3, 2, dtype=torch.int64), spec, device="meta")
    assert cos.device.type == "meta" and cos.shape == (2, 64)
    host, _ = multiaxis_tables([[0, 5], [0, 5], [0, 5]], spec)
    assert host.device.type == "cpu" and host.dtype == torch.float32
    ids, _ = multiaxis_tables(torch.tensor([[0, 5]] * 3), spec)
    assert torch.equal(host, ids)


def test_the_compiled_path_builds_the_same_tables(monkeypatch) -> None:
    """Under torch.compile the indices are graph constants and length-dependent factors runtime tensors;
    emulated eagerly (is_compiling patched), both must give the eager tables bit for bit, in angle_dtype."""
    from rope_ref.backends._torch_multiaxis import multiaxis_tables

    pos = torch.tensor(positions(np.random.default_rng(14), mixed_spec(), (5,)))
    cases = [(mixed_spec(), 3000), (mixed_spec(), 9000), (repeated_table_spec(), None)]
    eager = {}
    for i, (spec, n) in enumerate(cases):
        p = pos[: spec.n_streams]
        for dtype in (torch.float32, torch.float64):
            eager[i, dtype] = multiaxis_tables(p, spec, seq_len=n, angle_dtype=dtype)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    for i, (spec, n) in enumerate(cases):
        p = pos[: spec.n_streams]
        for dtype in (torch.float32, torch.float64):
            cos, sin = multiaxis_tables(p, spec, seq_len=n, angle_dtype=dtype)
            assert cos.dtype == sin.dtype == dtype
            assert torch.equal(cos, eager[i, dtype][0]) and torch.equal(sin, eager[i, dtype][1]), (i, dtype)


def test_zero_d_positions_and_bad_autograd_are_refused() -> None:
    spec = presets()["qwen2-vl"]
    with pytest.raises(ValueError, match=r"n_streams=3 .* got shape \(\)"):
        multiaxis_apply(torch.zeros(2, 128), torch.tensor(4), spec)
    with pytest.raises(ValueError, match="autograd"):
        multiaxis_apply(torch.zeros(2, 128), torch.zeros(3, 2), spec, autograd="fast")


def test_native_autograd_records_plain_ops() -> None:
    spec = presets()["chatglm-6b"]
    x = torch.randn(3, spec.head_dim, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 4, 9], [1, 0, 2]])
    native = multiaxis_apply(x, pos, spec, angle_dtype=torch.float64, autograd="native")
    function = multiaxis_apply(x, pos, spec, angle_dtype=torch.float64)

    def parents(y):  # the blocks' flatten is a view: the rotation is the node below it
        return {type(fn).__name__ for fn, _ in y.grad_fn.next_functions}

    assert parents(function) == {"RotateFunctionBackward"}
    assert "RotateFunctionBackward" not in parents(native)
    torch.testing.assert_close(native, function, rtol=0, atol=1e-15)
