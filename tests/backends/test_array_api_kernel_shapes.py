"""Issue 16, array-API adapter: axes, offsets, varlen, GQA q/k, packed QKV, in place, inverse, views.

``apply_axes``, ``apply_qk`` and ``apply_qkv`` of ``array-api:<namespace>`` are checked against the float64
oracle (:func:`rope_ref.apply` with ``axes=`` / ``inverse=`` and :mod:`rope_ref.positions`) on NumPy (through
array_api_compat) and on array-api-strict, which refuses every call outside the standard. In place runs on
NumPy, array-api-strict and PyTorch through compat (when installed); a namespace whose slices are not views
reports it unsupported.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from rope_ref.backends._array_api_kernel_shapes import mutable_namespace
from rope_ref.backends.array_api import make_backend
from rope_ref.conformance.protocol import Unsupported

import rope_ref
from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset
from rope_ref.scaling import DynamicNTK

NAMESPACES = ["numpy", "array_api_strict"]
CFGS = {
    "half": rope_ref.RopeConfig(8, layout="half"),
    "interleaved-partial": rope_ref.RopeConfig(8, layout="interleaved", rotary_dim=6),
}
# The varlen lengths: a length-1 sequence and one longer than 2048 included.
LENGTHS = [400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100]
EPS64, EPS32 = 2.0**-52, 2.0**-23
GQA = [(32, 8), (17, 1), (16, 4)]


def backend(ns: str, precision: str = "fp64"):
    pytest.importorskip(ns)
    return make_backend(precision, namespace=ns)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def host(b, array) -> np.ndarray:
    return np.array(b.to_numpy(array), dtype=np.float64)


def check(b, y, x: np.ndarray, pos, cfg, axes: str, *, inverse: bool = False, eps: float = EPS64) -> None:
    """|y - oracle| within a few roundings of |x| plus the angle's rounding (|m theta| 2^-53 |x|)."""
    ref = rope_ref.apply(x, np.asarray(pos, dtype=np.float64), cfg, axes=axes, inverse=inverse)
    got = host(b, y)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    amax = float(np.abs(x).max(initial=0.0))
    angle = float(np.abs(np.asarray(pos, dtype=np.float64)).max(initial=0.0))  # inv_freq[0] is 1
    bound = rope_ref.attention_factor(cfg) * amax * (8 * eps + 2 * angle * 2.0**-53) + 1e-300
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"
    rd = cfg.rotary_dim
    assert np.array_equal(got[..., rd:], x[..., rd:])


def fails_check(*args, **kwargs) -> bool:
    try:
        check(*args, **kwargs)
    except AssertionError:
        return True
    return False


# -- axes and the forms of ids --------

SHAPES = {"bshd": (2, 9, 3, 8), "bhsd": (2, 3, 9, 8), "sbhd": (9, 2, 3, 8), "thd": (9, 3, 8)}


def ids_for(form: str):
    if form == "scalar":
        return 5
    if form == "tokens":
        return np.arange(9) * 3 + 1
    if form == "full":
        return None
    return np.arange(18).reshape(2, 9) * 7 + 2  # HF (B, S)


AXES_FORMS = [(a, f) for a in SHAPES for f in ("scalar", "tokens", "hf", "full") if f != "hf" or "b" in a]


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS)
@pytest.mark.parametrize("axes, form", AXES_FORMS)
def test_axes_and_id_forms(ns, cfg, axes, form):
    b = backend(ns)
    x = rng(1).standard_normal(SHAPES[axes])
    pos = ids_for(form)
    if pos is None:  # one id per leading axis (heads included)
        pos = rng(2).integers(0, 3000, size=x.shape[:-1])
    given = pos if form == "scalar" else b.from_numpy(np.asarray(pos))
    xb = b.from_numpy(x, "float64")
    y = b.apply_axes(xb, cfg, axes=axes, positions=given)
    check(b, y, x, pos, cfg, axes)
    assert np.array_equal(host(b, xb), x)  # out of place: the input is unchanged


@pytest.mark.parametrize("ns", NAMESPACES)
def test_ids_from_another_library(ns):
    """Ids as a plain list or a NumPy array are converted on the host."""
    b, cfg = backend(ns), CFGS["half"]
    x = rng(3).standard_normal(SHAPES["sbhd"])
    pos = np.arange(18).reshape(2, 9) + 30
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="sbhd", positions=pos.tolist())
    check(b, y, x, pos, cfg, "sbhd")


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("axes", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("offset", [0, 7, "array", [3, 11]])
def test_offset(ns, axes, offset):
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    x = rng(4).standard_normal(SHAPES[axes])
    seq = x.shape[axes.index("s")]
    if offset == "array":  # a 0-d integer array of the namespace
        value, given = 12, b.from_numpy(np.asarray(12))
    elif isinstance(offset, list):
        value, given = np.asarray(offset), b.from_numpy(np.asarray(offset))
    else:
        value, given = offset, offset
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes=axes, offset=given)
    check(b, y, x, positions_from_offset(np.asarray(value), seq, batch=2), cfg, axes)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_offset_per_sequence_not_per_token(ns):
    """offset[b] is per batch row; the check tells it from offset[s % B] (the issue's bug)."""
    b, cfg = backend(ns), CFGS["half"]
    x = rng(5).standard_normal((3, 6, 2, 8))
    offset = np.array([0, 40, 9])
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bshd", offset=b.from_numpy(offset))
    check(b, y, x, positions_from_offset(offset, 6), cfg, "bshd")
    wrong = offset[np.arange(6) % 3] + np.arange(6)
    y_bad = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bshd", positions=b.from_numpy(wrong))
    assert fails_check(b, y_bad, x, positions_from_offset(offset, 6), cfg, "bshd")


@pytest.mark.parametrize("ns", NAMESPACES)
def test_scalar_offset_on_packed_tokens(ns):
    b, cfg = backend(ns), CFGS["half"]
    x = rng(6).standard_normal(SHAPES["thd"])
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="thd", offset=100)
    check(b, y, x, np.arange(9) + 100, cfg, "thd")


# -- non-contiguous inputs --------


def views(b):
    """(name, backend view, NumPy view of the same values, axes): transposed, packed slice, strided."""
    base = rng(7).standard_normal((2, 9, 3, 8))
    yield (
        "transposed",
        b.permute(b.from_numpy(base, "float64"), (0, 2, 1, 3)),
        base.transpose(0, 2, 1, 3),
        "bhsd",
    )
    yield (
        "sbhd-of-bshd",
        b.permute(b.from_numpy(base, "float64"), (1, 0, 2, 3)),
        base.transpose(1, 0, 2, 3),
        "sbhd",
    )
    packed = rng(8).standard_normal((9, 2, 3, 3, 8))  # (S, B, qkv, H, D) projection
    yield "qkv-slice", b.from_numpy(packed, "float64")[:, :, 1, :, :], packed[:, :, 1], "sbhd"
    wide = rng(9).standard_normal((9, 4, 13))
    yield "strided", b.from_numpy(wide, "float64")[:, ::2, 1:9], wide[:, ::2, 1:9], "thd"
    odd = rng(10).standard_normal((4, 20, 3, 8))
    yield "every-third-token", b.from_numpy(odd, "float64")[1:3, ::3, :, :], odd[1:3, ::3], "bshd"


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS)
def test_non_contiguous(ns, cfg):
    b = backend(ns)
    for name, xb, x, axes in views(b):
        assert not x.flags.c_contiguous, name
        before = host(b, xb)
        seq = x.shape[axes.index("s" if "s" in axes else "t")]
        pos = np.arange(seq) * 11 + 3
        y = b.apply_axes(xb, cfg, axes=axes, positions=b.from_numpy(pos))
        check(b, y, x, pos, cfg, axes)
        assert np.array_equal(host(b, xb), before), name


# -- GQA q and k --------


def qk_shape(axes: str, heads: int, seq: int = 5) -> tuple[int, ...]:
    return {
        "bshd": (2, seq, heads, 8),
        "bhsd": (2, heads, seq, 8),
        "sbhd": (seq, 2, heads, 8),
        "thd": (seq, heads, 8),
    }[axes]


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("hq, hk", GQA)
@pytest.mark.parametrize("axes", ["bshd", "bhsd", "sbhd", "thd"])
def test_gqa(ns, hq, hk, axes):
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    q, k = rng(11).standard_normal(qk_shape(axes, hq)), rng(12).standard_normal(qk_shape(axes, hk))
    pos = np.arange(10).reshape(2, 5) * 3 + 1 if "b" in axes else np.arange(5) * 3
    qb, kb = b.from_numpy(q, "float64"), b.from_numpy(k, "float64")
    qr, kr = b.apply_qk(qb, kb, cfg, axes=axes, positions=b.from_numpy(pos))
    check(b, qr, q, pos, cfg, axes)
    check(b, kr, k, pos, cfg, axes)
    assert np.array_equal(host(b, qb), q) and np.array_equal(host(b, kb), k)
    # k rotated with q's first Hk heads instead of its own (the bug) fails the same check.
    q_heads = qb[tuple(slice(0, hk) if a == "h" else slice(None) for a in axes)]
    _, wrong = b.apply_qk(qb, q_heads, cfg, axes=axes, positions=b.from_numpy(pos))
    assert fails_check(b, wrong, k, pos, cfg, axes)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_gqa_offset_and_one_table_build(ns, monkeypatch):
    b, cfg = backend(ns), CFGS["half"]
    q, k = rng(13).standard_normal((2, 4, 16, 8)), rng(14).standard_normal((2, 4, 4, 8))
    calls = []
    real = type(b)._rotation
    monkeypatch.setattr(type(b), "_rotation", lambda self, *a: calls.append(1) or real(self, *a))
    offset = np.array([3, 900])
    qr, kr = b.apply_qk(
        b.from_numpy(q, "float64"), b.from_numpy(k, "float64"), cfg, axes="bshd", offset=b.from_numpy(offset)
    )
    assert len(calls) == 1
    pos = positions_from_offset(offset, 4)
    check(b, qr, q, pos, cfg, "bshd")
    check(b, kr, k, pos, cfg, "bshd")


# -- packed QKV --------


def v_bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("hq, hk", GQA)
@pytest.mark.parametrize("axes", ["bshd", "sbhd", "thd"])
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_packed_qkv(ns, hq, hk, axes, precision):
    b, cfg = backend(ns, precision), CFGS["half"]
    qkv = rng(15).standard_normal(qk_shape(axes, hq + 2 * hk))
    h = axes.index("h")
    v_index = (slice(None),) * h + (slice(hq + hk, None),)
    qkv[v_index + (0,)] = np.nan  # V's bits must survive, NaN and -0.0 included
    qkv[v_index + (1,)] = -0.0
    dtype = "float64" if precision == "fp64" else "float32"
    qb = b.from_numpy(qkv, dtype)
    given = host(b, qb)  # the values in the I/O dtype
    pos = np.arange(10).reshape(2, 5) + 4 if "b" in axes else np.arange(5) + 4
    out = b.apply_qkv(qb, cfg, axes=axes, num_heads_q=hq, num_heads_kv=hk, positions=b.from_numpy(pos))
    got = b.to_numpy(out)
    assert got.shape == qkv.shape and str(got.dtype) == dtype
    assert np.array_equal(v_bits(host(b, qb)), v_bits(given))  # input unchanged
    eps = EPS64 if precision == "fp64" else EPS32
    for start, stop in ((0, hq), (hq, hq + hk)):
        index = (slice(None),) * h + (slice(start, stop), ...)
        check(b, out[index], given[index], pos, cfg, axes, eps=eps)
    assert np.array_equal(v_bits(got[v_index]), v_bits(b.to_numpy(qb)[v_index]))
    # Rotating V too (every head through apply_axes) fails the bit check.
    every = b.to_numpy(b.apply_axes(qb, cfg, axes=axes, positions=b.from_numpy(pos)))
    assert not np.array_equal(v_bits(every[v_index]), v_bits(b.to_numpy(qb)[v_index]))


# -- varlen --------

CU = np.concatenate([[0], np.cumsum(LENGTHS)])


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS)
@pytest.mark.parametrize("starts", [None, "scalar", "per-sequence"])
def test_varlen(ns, cfg, starts):
    b = backend(ns)
    x = rng(16).standard_normal((int(CU[-1]), 2, 8))
    start = {None: None, "scalar": 77, "per-sequence": np.arange(len(LENGTHS)) * 37}[starts]
    given = b.from_numpy(start) if isinstance(start, np.ndarray) else start
    y = b.apply_axes(
        b.from_numpy(x, "float64"),
        cfg,
        axes="thd",
        cu_seqlens=b.from_numpy(CU),
        start_offsets=given,
        max_seqlen=max(LENGTHS),
    )
    pos = positions_from_cu_seqlens(CU, start)
    check(b, y, x, pos, cfg, "thd")
    # Positions that run over the whole pack instead of restarting fail the same check.
    flat = np.arange(int(CU[-1])) + (0 if start is None else pos - positions_from_cu_seqlens(CU))
    y_bad = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="thd", positions=b.from_numpy(flat))
    assert fails_check(b, y_bad, x, pos, cfg, "thd")


@pytest.mark.parametrize("ns", NAMESPACES)
def test_varlen_qk_qkv_and_empty_sequences(ns):
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    cu = np.array([0, 3, 3, 10, 10, 11])  # empty sequences repeat a boundary
    starts = np.array([5, 9, 0, 2, 1000])
    pos = positions_from_cu_seqlens(cu, starts)
    q, k = rng(17).standard_normal((11, 4, 8)), rng(18).standard_normal((11, 1, 8))
    where = dict(cu_seqlens=b.from_numpy(cu), start_offsets=b.from_numpy(starts))
    qr, kr = b.apply_qk(b.from_numpy(q, "float64"), b.from_numpy(k, "float64"), cfg, axes="thd", **where)
    check(b, qr, q, pos, cfg, "thd")
    check(b, kr, k, pos, cfg, "thd")
    qkv = rng(19).standard_normal((11, 6, 8))
    out = b.apply_qkv(b.from_numpy(qkv, "float64"), cfg, axes="thd", num_heads_q=2, num_heads_kv=2, **where)
    check(b, out[:, :4, :], qkv[:, :4], pos, cfg, "thd")
    assert np.array_equal(v_bits(b.to_numpy(out)[:, 4:]), v_bits(qkv[:, 4:]))
    empty = b.apply_axes(
        b.from_numpy(np.zeros((0, 2, 8)), "float64"), cfg, axes="thd", cu_seqlens=b.from_numpy(np.array([0]))
    )
    assert tuple(empty.shape) == (0, 2, 8)


# -- in place --------


def mutable_backends():
    """Namespaces whose arrays take writes through views: NumPy, array-api-strict, PyTorch (if installed)."""
    yield make_backend("fp64", namespace="numpy")
    for ns in ("array_api_strict", "torch"):
        try:
            yield make_backend("fp64", namespace=ns)
        except ImportError:
            continue


@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS)
def test_inplace_on_a_view(cfg):
    """apply_axes in place on a transposed, strided view writes exactly the view's elements."""
    for b in mutable_backends():
        assert b.inplace_ops == {"apply_axes", "apply_qk", "apply_qkv"}
        base = rng(20).standard_normal((2, 12, 3, 8))
        buf = b.from_numpy(base, "float64")
        view = b.permute(buf[:, 1::2, ...], (0, 2, 1, 3))  # bhsd view of every other token
        pos = np.arange(12).reshape(2, 6) * 9
        out = b.apply_axes(view, cfg, axes="bhsd", positions=b.from_numpy(pos), inplace=True)
        assert out is view
        after = host(b, buf)
        check(b, after[:, 1::2].transpose(0, 2, 1, 3), base[:, 1::2].transpose(0, 2, 1, 3), pos, cfg, "bhsd")
        assert np.array_equal(after[:, 0::2], base[:, 0::2])  # untouched between the view's rows


@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS)
@pytest.mark.parametrize("hq, hk", GQA)
def test_inplace_q_and_k_slices_of_one_buffer(cfg, hq, hk):
    for b in mutable_backends():
        base = rng(21).standard_normal((7, hq + 2 * hk, 8))  # thd packed projection
        buf = b.from_numpy(base, "float64")
        q, k = buf[:, :hq, :], buf[:, hq : hq + hk, :]
        pos = np.arange(7) * 5
        qr, kr = b.apply_qk(q, k, cfg, axes="thd", positions=b.from_numpy(pos), inplace=True)
        assert qr is q and kr is k
        after = host(b, buf)
        check(b, after[:, :hq], base[:, :hq], pos, cfg, "thd")
        check(b, after[:, hq : hq + hk], base[:, hq : hq + hk], pos, cfg, "thd")
        assert np.array_equal(v_bits(after[:, hq + hk :]), v_bits(base[:, hq + hk :]))


@pytest.mark.parametrize("hq, hk", GQA)
def test_inplace_packed_qkv(hq, hk):
    cfg = CFGS["interleaved-partial"]
    for b in mutable_backends():
        base = rng(22).standard_normal((2, 5, hq + 2 * hk, 8))
        base[..., hq + hk :, 0] = np.nan
        buf = b.from_numpy(base, "float64")
        out = b.apply_qkv(
            buf,
            cfg,
            axes="bshd",
            num_heads_q=hq,
            num_heads_kv=hk,
            offset=b.from_numpy(np.array([1, 60])),
            inplace=True,
        )
        assert out is buf
        after = host(b, buf)
        pos = positions_from_offset(np.array([1, 60]), 5)
        check(b, after[:, :, : hq + hk], base[:, :, : hq + hk], pos, cfg, "bshd")
        assert np.array_equal(v_bits(after[:, :, hq + hk :]), v_bits(base[:, :, hq + hk :]))


def test_inplace_varlen_inverse():
    b, cfg = make_backend("fp64", namespace="numpy"), CFGS["half"]
    x = rng(23).standard_normal((int(CU[-1]), 2, 8))
    buf = x.copy()
    b.apply_axes(buf, cfg, axes="thd", cu_seqlens=CU, start_offsets=3, inverse=True, inplace=True)
    check(b, buf, x, positions_from_cu_seqlens(CU, 3), cfg, "thd", inverse=True)


class _NoViews:
    """NumPy through compat, except that ``permute_dims`` copies (the standard allows it)."""

    def __init__(self, frozen: bool = False) -> None:
        import array_api_compat.numpy as xp

        self.xp, self.frozen = xp, frozen

    def __getattr__(self, name):
        return getattr(self.xp, name)

    def zeros(self, shape, device=None):
        out = self.xp.zeros(shape)
        out.flags.writeable = not self.frozen
        return out

    def permute_dims(self, x, axes):
        return self.xp.permute_dims(x, axes) if self.frozen else self.xp.permute_dims(x, axes).copy()


def test_inplace_only_where_views_take_writes():
    import array_api_compat.numpy as xnp

    assert mutable_namespace(xnp)
    assert not mutable_namespace(_NoViews())  # writes land in a copy
    assert not mutable_namespace(_NoViews(frozen=True))  # __setitem__ refused (as JAX does)
    b = make_backend("fp64", namespace="numpy")
    b.inplace_ops = frozenset()  # what a JAX backend declares
    x = b.from_numpy(np.zeros((2, 3, 1, 8)), "float64")
    with pytest.raises(Unsupported) as info:
        b.apply_axes(x, CFGS["half"], axes="bshd", positions=0, inplace=True)
    assert info.value.reason == "operation"
    assert str(info.value).startswith("array-api:numpy: apply_axes in place needs mutable arrays")
    b.inplace_ops = frozenset({"apply_axes"})  # each operation is looked up on its own
    with pytest.raises(Unsupported, match="apply_qk in place"):
        b.apply_qk(x, x, CFGS["half"], axes="bshd", positions=0, inplace=True)
    assert b.apply_axes(x, CFGS["half"], axes="bshd", positions=0, inplace=True) is x


def test_inplace_refuses_a_read_only_array():
    b = make_backend("fp64", namespace="numpy")
    x = np.zeros((2, 3, 1, 8))
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        b.apply_axes(x, CFGS["half"], axes="bshd", positions=0, inplace=True)
    # refused by the flag check itself, naming the array (not by NumPy's later failed write)
    with pytest.raises(ValueError, match="^inplace=True needs a writeable array, but x is read-only$"):
        b.apply_axes(x, CFGS["half"], axes="bshd", positions=0, inplace=True)
    q = np.zeros((2, 3, 2, 8))
    with pytest.raises(ValueError, match="^inplace=True needs a writeable array, but k is read-only$"):
        b.apply_qk(q, x, CFGS["half"], axes="bshd", positions=0, inplace=True)
    assert not q.any()


@pytest.mark.parametrize("ns", NAMESPACES)
def test_explicit_seq_len_reaches_the_tables(ns):
    """Dynamic NTK (original 16): positions below 16 alone leave the base as is; seq_len=200 stretches it,
    in every kernel-shape operation. Expected values: the oracle with the same seq_len."""
    b, cfg = backend(ns), DYNAMIC
    x = rng(9).standard_normal(SHAPES["bshd"])
    pos = np.arange(18).reshape(2, 9) % 7
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bshd", positions=pos, seq_len=200)
    want = rope_ref.apply(x, pos[:, :, None].astype(np.float64), cfg, axes="bshd", seq_len=200)
    np.testing.assert_allclose(host(b, y), want, rtol=0, atol=1e-13)
    assert not np.allclose(want, rope_ref.apply(x, pos[:, :, None].astype(np.float64), cfg, axes="bshd"))
    q, k = b.apply_qk(b.from_numpy(x, "float64"), b.from_numpy(x[:, :, :1], "float64"), cfg, axes="bshd",
                      positions=pos, seq_len=200)  # fmt: skip
    np.testing.assert_allclose(host(b, q), want, rtol=0, atol=1e-13)
    np.testing.assert_allclose(host(b, k), want[:, :, :1], rtol=0, atol=1e-13)


# -- inverse and round trip --------

DYNAMIC = rope_ref.RopeConfig(8, layout="half", scaling=DynamicNTK(factor=2.0, original_max_position=16))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("cfg", [*CFGS.values(), DYNAMIC], ids=[*CFGS, "dynamic-ntk"])
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_inverse_and_round_trip(ns, cfg, precision):
    b = backend(ns, precision)
    dtype = "float64" if precision == "fp64" else "float32"
    x = rng(24).standard_normal((2, 9, 3, 8))
    xb = b.from_numpy(x, dtype)
    given = host(b, xb)
    pos = np.arange(18).reshape(2, 9) * 11  # beyond the dynamic scaling's 16: seq_len matters
    eps = EPS64 if precision == "fp64" else EPS32
    inv = b.apply_axes(xb, cfg, axes="bshd", positions=b.from_numpy(pos), inverse=True)
    check(b, inv, given, pos, cfg, "bshd", inverse=True, eps=eps)
    # Not the same as rotating by -pos with the table of -pos (seq_len 1) under a length-dependent scaling.
    if cfg is DYNAMIC:
        naive = rope_ref.apply(given, -pos, cfg, axes="bshd")
        assert not np.allclose(host(b, inv), naive, rtol=0, atol=1e-6)
    fwd = b.apply_axes(xb, cfg, axes="bshd", positions=b.from_numpy(pos))
    back = b.apply_axes(fwd, cfg, axes="bshd", positions=b.from_numpy(pos), inverse=True)
    tol = 1e-12 if precision == "fp64" else 1e-5
    assert float(np.abs(host(b, back) - given).max()) < tol * float(np.abs(given).max())
    qkv = b.from_numpy(rng(25).standard_normal((2, 9, 6, 8)), dtype)
    packed = b.apply_qkv(qkv, cfg, axes="bshd", num_heads_q=2, num_heads_kv=2, positions=b.from_numpy(pos))
    undone = b.apply_qkv(
        packed, cfg, axes="bshd", num_heads_q=2, num_heads_kv=2, positions=b.from_numpy(pos), inverse=True
    )
    assert float(np.abs(host(b, undone) - host(b, qkv)).max()) < tol * 5


# -- bad input --------


def bad_calls(b):
    cfg = CFGS["half"]
    x = b.from_numpy(np.zeros((2, 5, 4, 8)), "float64")
    t = b.from_numpy(np.zeros((9, 2, 8)), "float64")
    a = b.from_numpy

    def thd(cu, **kw):
        return lambda: b.apply_axes(t, cfg, axes="thd", cu_seqlens=cu, **kw)

    def off(value):
        return lambda: b.apply_axes(x, cfg, axes="bshd", offset=value)

    return [
        ("decreasing", thd(a(np.array([0, 5, 3, 9]))), r"non-decreasing, got 5 then 3 at 1"),
        ("not-from-0", thd(a(np.array([1, 5, 9]))), r"cu_seqlens must start at 0, got \[1, 5, 9\]"),
        ("last-not-T", thd(a(np.array([0, 5, 8]))), r"cu_seqlens\[-1\] = 8 must equal .* = 9"),
        ("float-cu", thd(a(np.array([0.0, 9.0]))), r"cu_seqlens must hold integers, got dtype"),
        ("2d-cu", thd(a(np.array([[0, 9]]))), r"cu_seqlens must be 1-D .* \(1, 2\)"),
        (
            "cu-on-bshd",
            lambda: b.apply_axes(x, cfg, axes="bshd", cu_seqlens=a(np.array([0, 5]))),
            r"cu_seqlens needs packed tokens .* axes='bshd'",
        ),
        ("max_seqlen", thd(a(np.array([0, 4, 9])), max_seqlen=4), r"max_seqlen = 4 is shorter .* \(5\)"),
        (
            "starts-neg",
            thd(a(np.array([0, 9])), start_offsets=a(np.array([-1]))),
            r"start_offsets must be >= 0 .* -1",
        ),
        (
            "starts-count",
            thd(a(np.array([0, 4, 9])), start_offsets=a(np.array([1]))),
            r"start_offsets must .* 2 entries, got shape \(1,\)",
        ),
        ("starts-float", thd(a(np.array([0, 9])), start_offsets=1.5), r"start_offsets must hold integers"),
        (
            "starts-alone",
            lambda: b.apply_axes(t, cfg, axes="thd", positions=0, start_offsets=1),
            r"start_offsets goes with cu_seqlens",
        ),
        (
            "heads",
            lambda: b.apply_qk(x, x[:, :, :3, :], cfg, axes="bshd", positions=0),
            r"k heads \(3\) must divide q heads \(4\)",
        ),
        (
            "axes-ndim",
            lambda: b.apply_axes(x, cfg, axes="thd", positions=0),
            r"axes='thd' names 3 axes but x has 4",
        ),
        (
            "axes-letters",
            lambda: b.apply_axes(x, cfg, axes="bsxd", positions=0),
            r"axes='bsxd' has unknown letters \['x'\]",
        ),
        (
            "qk-no-h",
            lambda: b.apply_qk(t, t, cfg, axes="bsd", positions=0),
            r"axes='bsd' has no head axis 'h'",
        ),
        ("offset-float", off(1.5), r"offset must hold integers, got dtype"),
        ("offset-neg", off(-1), r"offset must be >= 0 \(a cache offset\), got -1"),
        ("offset-bool", off(True), r"offset must be an integer or an integer array, got True"),
        ("offset-neg-array", off(a(np.array([1, -2]))), r"offset must be >= 0 \(a cache offset\), got -2"),
        ("offset-float-array", off(a(np.array([1.0, 2.0]))), r"offset must hold integers, got dtype"),
        ("offset-batch", off(a(np.array([1, 2, 3]))), r"offset has 3 entries but x has batch 2"),
        ("offset-2d", off(a(np.array([[1, 2]]))), r"offset must be a scalar or 1-D .* \(1, 2\)"),
        (
            "offset-no-b",
            lambda: b.apply_axes(t, cfg, axes="thd", offset=a(np.array([1, 2]))),
            r"offset of shape \(2,\) is per batch row but axes='thd'",
        ),
        (
            "qkv-split",
            lambda: b.apply_qkv(x, cfg, axes="bshd", num_heads_q=2, num_heads_kv=2, positions=0),
            r"qkv.shape\[2\] = 4 does not split as num_heads_q \+ 2 \* num_heads_kv = 2 \+ 2 \* 2",
        ),
        (
            "qkv-zero-kv",
            lambda: b.apply_qkv(x, cfg, axes="bshd", num_heads_q=4, num_heads_kv=0, positions=0),
            r"num_heads_kv must be an int >= 1, got 0",
        ),
        (
            "two-forms",
            lambda: b.apply_axes(x, cfg, axes="bshd", positions=0, offset=1),
            r"give exactly one of positions, offset, cu_seqlens; got \['positions', 'offset'\]",
        ),
        (
            "no-form",
            lambda: b.apply_axes(x, cfg, axes="bshd"),
            r"give exactly one of positions, offset, cu_seqlens; got none",
        ),
        (
            "positions-shape",
            lambda: b.apply_axes(x, cfg, axes="bshd", positions=a(np.arange(4))),
            r"positions of shape \(4,\) do not fit x of shape \(2, 5, 4, 8\) with axes='bshd': "
            r"expected \(5,\) per-token ids on axis 's'",
        ),
        (
            "head-dim",
            lambda: b.apply_axes(x, rope_ref.RopeConfig(16, layout="half"), axes="bshd", positions=0),
            r"x.shape\[-1\] must equal head_dim=16, got x.shape=\(2, 5, 4, 8\)",
        ),
        (
            "hf-ids-batch",
            lambda: b.apply_axes(x, cfg, axes="bshd", positions=a(np.zeros((3, 5), dtype=np.int64))),
            r"positions of shape \(3, 5\) do not fit x of shape \(2, 5, 4, 8\) with axes='bshd': "
            r"expected HF-style \(B, S\) = \(2, 5\) ids",
        ),
        (
            "positions-3d",
            lambda: b.apply_axes(x, cfg, axes="bshd", positions=a(np.zeros((2, 5, 3), dtype=np.int64))),
            r"positions of shape \(2, 5, 3\) .* expected a scalar, \(5,\) per-token ids, HF-style",
        ),
        (
            "positions-bool",
            lambda: b.apply_axes(x, cfg, axes="bshd", positions=True),
            "positions must be numbers, got True",
        ),
        (
            "x-integer",
            lambda: b.apply_axes(a(np.zeros((2, 5, 4, 8), dtype=np.int64)), cfg, axes="bshd", positions=0),
            "x must have a real floating dtype, got (array_api_strict.)?int64",
        ),
        (
            "qk-ndim",
            lambda: b.apply_qk(x, t, cfg, axes="bshd", positions=0),
            r"k has 3 axes but q has 4 \(axes='bshd'\)",
        ),
        (
            "qk-dtype",
            lambda: b.apply_qk(x, a(np.zeros((2, 5, 2, 8)), "float32"), cfg, axes="bshd", positions=0),
            r"q and k must share dtype and device, got (\w+\.)?float64/.* and (\w+\.)?float32/",
        ),
        (
            "k-head-dim",
            lambda: b.apply_qk(x, a(np.zeros((2, 5, 2, 6)), "float64"), cfg, axes="bshd", positions=0),
            r"k.shape\[-1\] must equal head_dim=8, got k.shape=\(2, 5, 2, 6\)",
        ),
        (
            "qk-heads-positions",
            lambda: b.apply_qk(
                x, x[:, :, :2, :], cfg, axes="bshd", positions=a(np.zeros((2, 5, 4), dtype=np.int64))
            ),
            r"positions of shape \(2, 5, 4\) vary over the heads axis 2 \(axes='bshd'\)",
        ),
    ]


BAD = [name for name, _, _ in bad_calls(make_backend("fp64", namespace="numpy"))]


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("name", BAD)
def test_bad_input(ns, name):
    b = backend(ns)
    ((call, match),) = [(c, m) for n, c, m in bad_calls(b) if n == name]
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("ns", NAMESPACES)
def test_flags_must_be_bools(ns):
    b = backend(ns)
    x = b.from_numpy(np.zeros((2, 5, 4, 8)), "float64")
    with pytest.raises(TypeError, match="inverse"):
        b.apply_axes(x, CFGS["half"], axes="bshd", positions=0, inverse=1)
    with pytest.raises(TypeError, match="^inplace must be a bool, got int$"):
        b.apply_qk(x, x, CFGS["half"], axes="bshd", positions=0, inplace=1)
    with pytest.raises(TypeError, match="^inverse must be a bool, got NoneType$"):
        b.apply_qkv(x, CFGS["half"], axes="bshd", num_heads_q=2, num_heads_kv=1, positions=0, inverse=None)


def test_as_array_refuses_none_and_bools_at_the_helper():
    """The helper's own check (a caller's later dtype check would hide a missing one)."""
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import _as_array

    for bad in (None, True):
        with pytest.raises(ValueError, match=f"offset must be an integer or an integer array, got {bad!r}"):
            _as_array(xp, None, bad, "offset")


@pytest.mark.parametrize("ns", NAMESPACES)
def test_ids_as_arrays_of_another_namespace(ns):
    """A NumPy or torch array of ids handed to another namespace's backend is converted on the host."""
    torch = pytest.importorskip("torch")
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    x = rng(4).standard_normal(SHAPES["bhsd"])
    pos = np.arange(18).reshape(2, 9) * 5 + 1
    for ids in (pos, torch.tensor(pos)):
        y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bhsd", positions=ids)
        check(b, y, x, pos, cfg, "bhsd")


def test_as_array_converts_an_object_whose_namespace_cannot_be_found():
    """``__array_namespace__`` raising TypeError: not an array of xp, so converted through the host."""
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import _as_array

    class Foreign:
        def __array_namespace__(self, api_version=None):
            raise TypeError("no namespace")

        def __array__(self, dtype=None, copy=None):
            return np.array([3, 1, 4])

    got = _as_array(xp, "cpu", Foreign(), "positions")
    assert isinstance(got, np.ndarray) and got.tolist() == [3, 1, 4]


# -- ids with size-1 (broadcasting) axes, at the helper and end to end --------

X_BSHD = (2, 5, 3, 8)  # B = 2, S = 5, H = 3: no two equal
X_SBHD = (5, 2, 3, 8)


@pytest.mark.parametrize(
    "ids, axes, x_shape, placed",
    [
        (7, "bshd", X_BSHD, [[[7]]]),  # a scalar: one axis of 1 per leading axis of x
        (7, "thd", (5, 3, 8), [[7]]),
        ([7], "bshd", X_BSHD, [[[7]]]),  # (1,) per-token ids: one id for every token
        ([7], "thd", (5, 3, 8), [[7]]),
        ([[4], [9]], "bshd", X_BSHD, [[[4]], [[9]]]),  # HF (B, 1): one id per batch row
        ([[1, 2, 3, 4, 5]], "bshd", X_BSHD, [[[1], [2], [3], [4], [5]]]),  # HF (1, S)
        ([[4], [9]], "sbhd", X_SBHD, [[[4], [9]]]),  # HF (B, 1) transposed onto (S, B)
        ([[6]], "bshd", X_BSHD, [[[6]]]),  # HF (1, 1)
        ([[[1], [2], [3], [4], [5]]], "bshd", X_BSHD, [[[1], [2], [3], [4], [5]]]),  # full rank (1, S, 1)
        ([[[1, 2, 3]], [[4, 5, 6]]], "bshd", X_BSHD, [[[1, 2, 3]], [[4, 5, 6]]]),  # full rank (B, 1, H)
    ],
)
def test_place_positions_takes_size_one_axes_at_the_helper(ids, axes, x_shape, placed):
    """Every form of ids broadcasts along a size-1 axis (NumPy rules, as the oracle's
    :func:`rope_ref.axes.positions_for_axes`); the placed array is written out by hand."""
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import place_positions

    got = place_positions(xp, np.array(ids), axes, x_shape)
    assert np.asarray(got).tolist() == placed


@pytest.mark.parametrize("ids", [[4, 2], [[4, 9, 1]], [[1, 2, 3, 4]], [[[1, 2]]]])
def test_place_positions_refuses_sizes_other_than_the_axis_or_one(ids):
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import place_positions

    shape = tuple(np.shape(ids))
    with pytest.raises(
        ValueError, match=rf"ids of shape {re.escape(str(shape))} do not fit x of shape \(2, 5, 3, 8\)"
    ):
        place_positions(xp, np.array(ids), "bshd", X_BSHD, "ids")


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(
    "axes, ids", [("bshd", [[4], [9]]), ("sbhd", [[4], [9]]), ("bshd", [[1, 2, 3, 4, 5]]), ("bshd", [7])]
)
def test_broadcasting_ids_match_the_ids_written_out_in_full(ns, axes, ids):
    """Ids with a size-1 axis give what the same ids broadcast by hand to HF-style (B, S) give."""
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    x = rng(5).standard_normal(X_BSHD if axes == "bshd" else X_SBHD)
    full = np.broadcast_to(np.array(ids), (2, 5))
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes=axes, positions=b.from_numpy(np.array(ids)))
    check(b, y, x, full, cfg, axes)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(
    "precision, x_dtype, eps",
    [("fp32", "float64", EPS64), ("fp64", "float32", EPS32)],
    ids=["fp32-backend-float64-x", "fp64-backend-float32-x"],
)
def test_tables_take_the_dtype_of_x_not_the_backends_io_dtype(ns, precision, x_dtype, eps):
    """An fp32 backend given float64 arrays keeps float64 (no float32 table rounding), and the reverse."""
    b, cfg = backend(ns, precision), CFGS["interleaved-partial"]
    x = rng(40).standard_normal(qk_shape("bshd", 6))
    given = host(b, b.from_numpy(x, x_dtype))
    pos = np.arange(10).reshape(2, 5) * 131 + 7
    xb = b.from_numpy(x, x_dtype)
    ids = b.from_numpy(pos)
    outs = {
        "apply_axes": [b.apply_axes(xb, cfg, axes="bshd", positions=ids)],
        "apply_qk": list(b.apply_qk(xb, xb[:, :, :2, ...], cfg, axes="bshd", positions=ids)),
        "apply_qkv": [b.apply_qkv(xb, cfg, axes="bshd", num_heads_q=2, num_heads_kv=2, positions=ids)],
    }
    for op, ys in outs.items():
        for y in ys:
            assert str(b.to_numpy(y).dtype) == x_dtype, op
    check(b, outs["apply_axes"][0], given, pos, cfg, "bshd", eps=eps)
    check(b, outs["apply_qk"][1], given[:, :, :2], pos, cfg, "bshd", eps=eps)
    check(b, outs["apply_qkv"][0][:, :, :4, ...], given[:, :, :4], pos, cfg, "bshd", eps=eps)


# -- the helpers' own checks and results, called directly --------


@pytest.mark.parametrize(
    "value, match",
    [
        (-3, r"^start_offsets must be >= 0 \(a cache offset\), got -3$"),
        (True, r"^start_offsets must be an integer or an integer array, got True$"),
        (np.array([4, -1]), r"^start_offsets must be >= 0 \(a cache offset\), got -1$"),
        (np.array([[1, 2]]), r"^start_offsets must be a scalar or 1-D .*got shape \(1, 2\)$"),
        (np.array([1.0]), r"^start_offsets must hold integers, got dtype float64$"),
        (np.array([True]), r"^start_offsets must hold integers, got dtype bool$"),
    ],
)
def test_cache_offset_refuses_what_is_no_cache_offset_at_the_helper(value, match):
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import _cache_offset

    with pytest.raises(ValueError, match=match):
        _cache_offset(xp, "cpu", value, "start_offsets")


@pytest.mark.parametrize(
    "value", [2**33 + 5, np.array([2**33, 7], dtype=np.int64), np.array([3, 9], np.int32)]
)
def test_cache_offset_is_int64_and_keeps_large_offsets(value):
    """Offsets past 2^31 (long contexts) survive: int64, never a narrower integer."""
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import _cache_offset

    got = _cache_offset(xp, "cpu", value, "offset")
    assert got.dtype == np.int64 and np.asarray(got).tolist() == np.asarray(value).tolist()


@pytest.mark.parametrize("ns", NAMESPACES)
def test_offsets_past_two_to_the_31(ns):
    b, cfg = backend(ns), CFGS["half"]
    x = rng(41).standard_normal((2, 3, 2, 8))
    offset = np.array([2**33 + 3, 2**32 + 1])
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bshd", offset=b.from_numpy(offset))
    check(b, y, x, positions_from_offset(offset, 3), cfg, "bshd")


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("positions", [2.5, [0.5, 1.25, 7.75, 100.5, 3.0]])
def test_fractional_positions_are_taken_as_given(ns, positions):
    """Ids need not be integers (interpolated positions): a float scalar or float ids, never truncated."""
    b, cfg = backend(ns), CFGS["interleaved-partial"]
    x = rng(42).standard_normal((2, 5, 3, 8))
    given = positions if np.ndim(positions) == 0 else b.from_numpy(np.array(positions))
    y = b.apply_axes(b.from_numpy(x, "float64"), cfg, axes="bshd", positions=given)
    check(b, y, x, np.broadcast_to(np.asarray(positions, dtype=np.float64), (2, 5)), cfg, "bshd")


def test_varlen_and_offset_positions_at_the_helpers():
    """Written out by hand: offsets [3, 40] on sbhd (S=4, B=2) and cu_seqlens [0, 2, 2, 5] with
    start_offsets [10, 20, 30] (the empty sequence 1 is skipped)."""
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import offset_positions, varlen_positions

    got = offset_positions(xp, "cpu", np.array([3, 40]), "sbhd", (4, 2, 3, 8))
    assert np.asarray(got).tolist() == [[[3], [40]], [[4], [41]], [[5], [42]], [[6], [43]]]
    cu, starts = np.array([0, 2, 2, 5]), np.array([10, 20, 30])
    got = varlen_positions(xp, "cpu", cu, starts, None, "thd", (5, 2, 8))
    assert np.asarray(got).tolist() == [[10], [11], [30], [31], [32]]
    got = varlen_positions(xp, "cpu", cu, 7, 3, "htd", (2, 5, 8))  # t on axis 1; a scalar start
    assert np.asarray(got).tolist() == [[7, 8, 7, 8, 9]]
    with pytest.raises(
        ValueError, match=r"^cu_seqlens needs packed tokens \('t' in axes\), got axes='bshd'$"
    ):
        varlen_positions(xp, "cpu", cu, None, None, "bshd", (1, 5, 2, 8))


def test_split_qkv_gives_views_along_the_head_axis():
    from rope_ref.backends._array_api_kernel_shapes import split_qkv

    qkv = np.arange(2 * 3 * 8 * 4, dtype=np.float64).reshape(2, 3, 8, 4)  # Hq = 4, Hk = 2 on axis 2
    q, k, v, h = split_qkv(qkv, 4, 2, "bshd")
    assert h == 2 and q.shape == (2, 3, 4, 4) and k.shape == v.shape == (2, 3, 2, 4)
    assert np.array_equal(k, qkv[:, :, 4:6]) and np.array_equal(v, qkv[:, :, 6:8])
    k[...] = -1.0  # views: what a write in place needs
    assert (qkv[:, :, 4:6] == -1.0).all() and (qkv[:, :, :4] >= 0).all() and (qkv[:, :, 6:] >= 0).all()


def test_check_x_at_the_helper():
    from array_api_compat import numpy as xp
    from rope_ref.backends._array_api_kernel_shapes import _check_x

    cfg = rope_ref.RopeConfig(8, layout="half", rotary_dim=4)
    assert _check_x(xp, np.zeros((3, 2, 8)), cfg, "thd", "q") == "thd"
    with pytest.raises(ValueError, match=r"^q.shape\[-1\] must equal head_dim=8, got q.shape=\(3, 2, 4\)$"):
        _check_x(xp, np.zeros((3, 2, 4)), cfg, "thd", "q")
    with pytest.raises(ValueError, match=r"^k must have a real floating dtype, got complex128$"):
        _check_x(xp, np.zeros((3, 2, 8), dtype=complex), cfg, "thd", "k")


def test_out_of_place_needs_neither_in_place_support_nor_a_writeable_array():
    """The in-place checks are for inplace=True only: a read-only array on a backend without in-place
    operations (JAX-like) is rotated out of place."""
    b, cfg = make_backend("fp64", namespace="numpy"), CFGS["half"]
    b.inplace_ops = frozenset()
    x = rng(43).standard_normal((2, 3, 3, 8))
    frozen = x.copy()
    frozen.flags.writeable = False
    pos = np.arange(6).reshape(2, 3) + 2
    check(b, b.apply_axes(frozen, cfg, axes="bshd", positions=pos), x, pos, cfg, "bshd")
    q, k = b.apply_qk(frozen, frozen[:, :, :1], cfg, axes="bshd", positions=pos)
    check(b, k, x[:, :, :1], pos, cfg, "bshd")
    out = b.apply_qkv(frozen, cfg, axes="bshd", num_heads_q=1, num_heads_kv=1, positions=pos)
    check(b, out[:, :, :1], x[:, :, :1], pos, cfg, "bshd")


def test_mutable_namespace_probes_on_the_given_device():
    import array_api_compat.numpy as xnp

    seen = []

    class Recording:
        def __getattr__(self, name):
            return getattr(xnp, name)

        def zeros(self, shape, device=None):
            seen.append(("zeros", device))
            return xnp.zeros(shape, device=device)

        def ones(self, shape, device=None):
            seen.append(("ones", device))
            return xnp.ones(shape, device=device)

    assert mutable_namespace(Recording(), "cpu")
    assert seen == [("zeros", "cpu"), ("ones", "cpu")]


def test_q_and_k_on_different_devices_are_refused():
    """Same dtype, another device (torch's ``meta``): refused up front, naming both devices."""
    torch = pytest.importorskip("torch")
    b = make_backend("fp64", namespace="torch")
    q = torch.zeros((2, 5, 4, 8), dtype=torch.float64)
    k = torch.zeros((2, 5, 2, 8), dtype=torch.float64, device="meta")
    with pytest.raises(
        ValueError, match=r"^q and k must share dtype and device, got .*float64/cpu and .*float64/meta$"
    ):
        b.apply_qk(q, k, CFGS["half"], axes="bshd", positions=0)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_as_array_keeps_an_array_of_the_namespace_as_it_is(ns):
    """No host round trip (and no copy) for ids already in the namespace."""
    import array_api_compat
    from rope_ref.backends._array_api_kernel_shapes import _as_array

    b = backend(ns)
    ids = b.from_numpy(np.array([3, 1, 4]))
    xp = array_api_compat.array_namespace(ids)
    assert _as_array(xp, array_api_compat.device(ids), ids, "positions") is ids
