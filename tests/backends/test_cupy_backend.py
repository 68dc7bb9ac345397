"""The CuPy backend: host-side logic without a GPU, and (marked ``gpu``) the kernels against the oracle.

The host tests drive :mod:`rope_ref.backends._cupy_plan` and then run a plain-Python *emulator* of
``rope_kernels.cu`` over the planned launch (the same loops: outer rows, lanes, inner axes, 64-bit
offsets from the packed ``RopeShape``). The emulator's output is compared with the oracle
``rope_ref.apply`` and every output element must be written exactly once, so a wrong stride, a wrong
broadcast, a lost pass-through channel or a doubly covered row fails here, without a GPU.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rope_ref.backends import _cupy_plan as plan_mod
from rope_ref.backends._cupy_bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from rope_ref.backends._cupy_plan import (
    MAX_OUTER,
    SHAPE_FIELDS,
    broadcast_strides,
    collapse_dims,
    kernel_name,
    pack_shape,
    plan_apply,
)

import rope_ref
from rope_ref import RopeConfig

HAS_CUPY = importlib.util.find_spec("cupy") is not None


# -- import and registry ---------------------------------------------------------------------------


def test_import_never_needs_cupy_and_available_explains() -> None:
    import rope_ref.backends.cupy as cb

    ok, reason = cb.available()
    assert isinstance(ok, bool) and isinstance(reason, str)
    if not ok:
        assert "cupy" in reason.lower() or "cuda" in reason.lower()
    if not HAS_CUPY:
        assert not ok and "not importable" in reason


@pytest.mark.skipif(HAS_CUPY, reason="cupy is installed here; this checks the no-cupy path")
def test_registry_reports_unavailable_with_reason() -> None:
    from rope_ref.conformance.registry import BackendUnavailable, get_backend

    with pytest.raises(BackendUnavailable, match="cupy"):
        get_backend("cupy")


@pytest.mark.parametrize("precision", ["fp64", "float64", "int8"])
def test_make_backend_rejects_unsupported_precision(precision: str) -> None:
    import rope_ref.backends.cupy as cb

    with pytest.raises(ValueError, match="precision"):
        cb.make_backend(precision=precision)


# -- dtype dispatch and small helpers --------------------------------------------------------------


def test_kernel_dispatch() -> None:
    assert kernel_name("float32") == "rope_apply_f32"
    assert kernel_name("float16") == "rope_apply_f16"
    assert kernel_name("bfloat16") == "rope_apply_bf16"
    for bad in ("float64", "int32", "uint16", None):
        with pytest.raises(TypeError, match="dtype"):
            kernel_name(bad)


@settings(max_examples=60, deadline=None)
@given(
    target=st.lists(st.integers(1, 4), min_size=0, max_size=4),
    data=st.data(),
)
def test_broadcast_strides_match_numpy(target: list[int], data) -> None:
    ndim = data.draw(st.integers(0, len(target)))
    shape = [data.draw(st.sampled_from([1, n])) for n in target[len(target) - ndim :]]
    a = np.zeros(shape, dtype=np.float64)
    got = broadcast_strides(a.shape, [s // 8 for s in a.strides], target)
    expected = np.broadcast_to(a, target).strides
    # NumPy may keep any stride on a size-1 axis; only axes of size > 1 are meaningful.
    for n, g, e in zip(target, got, expected, strict=True):
        if n > 1:
            assert g == e // 8


def test_broadcast_strides_reject_non_broadcasting() -> None:
    with pytest.raises(ValueError, match="positions"):
        broadcast_strides((3,), (1,), (2, 4))
    with pytest.raises(ValueError, match="positions"):
        broadcast_strides((2, 2, 4), (8, 4, 1), (2, 4))


def _offsets(sizes, strides) -> list[int]:
    out = [0]
    for n, s in zip(sizes, strides, strict=True):
        out = [o + k * s for o in out for k in range(n)]
    return out


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=0, max_size=5), data=st.data())
def test_collapse_keeps_every_offset_in_order(sizes: list[int], data) -> None:
    arrays = []
    for _ in range(3):
        # C-contiguous strides of a random enclosing shape, with some axes broadcast (stride 0).
        pad = [data.draw(st.integers(0, 2)) for _ in sizes]
        st_ = []
        acc = 1
        for n, p in zip(reversed(sizes), reversed(pad), strict=True):
            st_.append(0 if data.draw(st.booleans()) and n > 1 and p == 0 else acc)
            acc *= n + p
        arrays.append(tuple(reversed(st_)))
    new_sizes, new_strides = collapse_dims(sizes, arrays)
    assert math.prod(new_sizes) == math.prod(sizes)
    assert 1 not in new_sizes
    for before, after in zip(arrays, new_strides, strict=True):
        assert _offsets(new_sizes, after) == _offsets(sizes, before)


# -- the kernel emulator ---------------------------------------------------------------------------


def _emulate(plan, base_x, x_off, base_out, out_off, pos_flat, inv_freq, factor, sign=1.0):
    """Execute the planned launch like rope_kernels.cu does (float64 arithmetic); count writes."""
    v = dict(zip(SHAPE_FIELDS, plan.shape_values(), strict=True))
    size = [v[f"o_size{d}"] for d in range(MAX_OUTER)]
    xs = [v[f"o_xs{d}"] for d in range(MAX_OUTER)]
    os_ = [v[f"o_os{d}"] for d in range(MAX_OUTER)]
    ps = [v[f"o_ps{d}"] for d in range(MAX_OUTER)]
    writes = np.zeros(base_out.size, dtype=np.int64)
    x_flat = base_x.reshape(-1)
    src = x_flat.copy()  # reads see the input even in place (each element is read before its write)
    o_flat = base_out.reshape(-1)
    lanes = plan.lanes
    bx, by, _ = plan.block
    assert bx % 32 == 0 and bx * by <= 1024
    assert plan.grid[0] * by >= min(plan.n_outer, plan_mod.MAX_GRID_X)
    for t in range(v["n_outer"]):
        r, xo, oo, po = t, x_off, out_off, 0
        for d in range(MAX_OUTER - 1, -1, -1):
            k = r % size[d]
            r //= size[d]
            xo, oo, po = xo + k * xs[d], oo + k * os_[d], po + k * ps[d]
        m = pos_flat[po]
        for lane in range(lanes):
            for i0 in range(v["i_size0"]):
                for i1 in range(v["i_size1"]):
                    bxo = xo + i0 * v["i_xs0"] + i1 * v["i_xs1"]
                    boo = oo + i0 * v["i_os0"] + i1 * v["i_os1"]
                    if lane < plan.n_pairs:
                        ia = lane if plan.half_layout else 2 * lane
                        ib = lane + plan.n_pairs if plan.half_layout else 2 * lane + 1
                        ang = m * inv_freq[lane]
                        c, s = math.cos(ang) * factor, math.sin(ang) * factor * sign
                        a, b = src[bxo + ia], src[bxo + ib]
                        o_flat[boo + ia] = a * c - b * s
                        o_flat[boo + ib] = b * c + a * s
                        writes[boo + ia] += 1
                        writes[boo + ib] += 1
                    else:
                        ch = 2 * plan.n_pairs + (lane - plan.n_pairs)
                        o_flat[boo + ch] = src[bxo + ch]
                        writes[boo + ch] += 1
    return writes


def _element_offset(view: np.ndarray, base: np.ndarray) -> int:
    delta = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert delta % view.itemsize == 0
    return delta // view.itemsize


@st.composite
def _apply_cases(draw):
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=4))
    head_dim = draw(st.sampled_from([2, 4, 6, 8, 12]))
    rotary_dim = draw(st.sampled_from([r for r in range(2, head_dim + 1, 2)]))
    layout = draw(st.sampled_from(["half", "interleaved"]))
    steps = [draw(st.integers(1, 2)) for _ in lead]
    extra = draw(st.integers(0, 3))  # channels of padding after head_dim (strided rows)
    pos_shape = [draw(st.sampled_from([1, n])) for n in lead]
    pos_shape = pos_shape[draw(st.integers(0, len(lead))) :]
    inplace = draw(st.booleans())
    decode = draw(st.booleans())
    return lead, head_dim, rotary_dim, layout, steps, extra, pos_shape, inplace, decode


@settings(max_examples=80, deadline=None)
@given(case=_apply_cases(), seed=st.integers(0, 2**32 - 1))
def test_planned_launch_matches_the_oracle(case, seed) -> None:
    lead, head_dim, rotary_dim, layout, steps, extra, pos_shape, inplace, decode = case
    rng = np.random.default_rng(seed)
    base_shape = [n * s for n, s in zip(lead, steps, strict=True)] + [head_dim + extra]
    base = rng.standard_normal(base_shape)
    x = base[tuple(slice(None, None, s) for s in steps) + (slice(0, head_dim),)]
    pos = rng.integers(-40, 4000, size=pos_shape).astype(np.float64)
    cfg = RopeConfig(head_dim, layout=layout, rotary_dim=rotary_dim, base=500.0)
    expected = rope_ref.apply(x, pos, cfg)
    if inplace:
        base_out, out_view = base, x
    else:
        base_out = np.full(x.shape, np.nan)
        out_view = base_out
    old = plan_mod.MIN_PARALLEL_THREADS
    plan_mod.MIN_PARALLEL_THREADS = 1 << 40 if decode else 0
    try:
        plan = plan_apply(
            dtype_name="float32",
            x_shape=x.shape,
            x_strides=[s // 8 for s in x.strides],
            out_strides=[s // 8 for s in out_view.strides],
            pos_shape=pos.shape,
            pos_strides=[s // 8 for s in pos.strides],
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            layout=layout,
            inplace=inplace,
        )
    finally:
        plan_mod.MIN_PARALLEL_THREADS = old
    assert plan.copy_pass == (rotary_dim < head_dim and not inplace)
    writes = _emulate(
        plan,
        base,
        _element_offset(x, base),
        base_out,
        _element_offset(out_view, base_out),
        pos.reshape(-1),
        rope_ref.inv_freq(cfg),
        1.0,
    )
    np.testing.assert_allclose(out_view, expected, rtol=1e-12, atol=1e-12)
    # Exactly the output view is written, each element once (in place: pass-through is left alone).
    w = writes.reshape(base_out.shape)
    mask = np.zeros(base_out.shape, dtype=bool)
    if inplace:
        mask[tuple(slice(None, None, s) for s in steps) + (slice(0, rotary_dim),)] = True
    else:
        mask[...] = True
    assert np.array_equal(w, mask.astype(np.int64))


def test_vjp_sign_emulated_is_the_transpose() -> None:
    cfg = RopeConfig(8, layout="interleaved", rotary_dim=6)
    x = np.random.default_rng(1).standard_normal((3, 8))
    pos = np.array([0.0, 7.0, 123.0])
    plan = plan_apply(
        dtype_name="float16", x_shape=x.shape, x_strides=(8, 1), out_strides=(8, 1), pos_shape=(3,),
        pos_strides=(1,), head_dim=8, rotary_dim=6, layout="interleaved", inplace=False,
    )  # fmt: skip
    out = np.empty_like(x)
    _emulate(plan, x, 0, out, 0, pos, rope_ref.inv_freq(cfg), 1.0, sign=-1.0)
    np.testing.assert_allclose(out, rope_ref.apply(x, -pos, cfg), rtol=1e-12, atol=1e-12)


# -- planning rules --------------------------------------------------------------------------------


def _plan(shape, pos_shape, *, x_strides=None, inplace=False, head_dim=None, rotary_dim=None, layout="half"):
    shape = tuple(shape)
    contiguous = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    pos_contig = tuple(int(np.prod(pos_shape[i + 1 :])) for i in range(len(pos_shape)))
    hd = head_dim or shape[-1]
    return plan_apply(
        dtype_name="bfloat16",
        x_shape=shape,
        x_strides=x_strides or contiguous,
        out_strides=x_strides if inplace and x_strides else contiguous,
        pos_shape=tuple(pos_shape),
        pos_strides=pos_contig,
        head_dim=hd,
        rotary_dim=rotary_dim or hd,
        layout=layout,
        inplace=inplace,
    )


def test_bshd_positions_per_token_loop_over_heads() -> None:
    p = _plan((4, 4096, 32, 128), (4, 4096, 1))
    assert p.n_outer == 4 * 4096 and p.inner_sizes == (1, 32)
    assert p.inner_x == (0, 128) and p.outer_sizes == (4 * 4096,) and p.outer_pos == (1,)
    assert p.block == (64, 4, 1) and p.grid == (4096, 1, 1)
    assert p.kernel == "rope_apply_bf16"


def test_bhsd_shared_positions_loop_over_batch_and_heads() -> None:
    p = _plan((4, 32, 4096, 128), (4096,))
    assert p.n_outer == 4096 and p.inner_sizes == (1, 4 * 32)  # batch and heads merge into one loop
    assert p.inner_x == (0, 4096 * 128)


def test_decode_moves_the_head_loop_to_the_grid() -> None:
    p = _plan((8, 1, 32, 128), (8, 1, 1))
    assert p.n_outer == 8 * 32 and p.inner_sizes == (1, 1)


def test_partial_rotary_lanes_and_inplace_skips_pass_through() -> None:
    p = _plan((2, 16, 128), (2, 16), rotary_dim=32)
    assert (p.n_pairs, p.n_pass, p.copy_pass, p.lanes) == (16, 96, True, 112)
    assert p.block == (128, 2, 1)
    q = _plan((2, 16, 128), (2, 16), rotary_dim=32, inplace=True)
    assert not q.copy_pass and q.lanes == 16 and q.block == (32, 8, 1)


def test_pack_shape_is_the_int64_field_sequence() -> None:
    p = _plan((3, 5, 7, 64), (3, 5, 7))
    packed = pack_shape(p)
    assert packed.dtype.itemsize == 8 * len(SHAPE_FIELDS)
    values = np.frombuffer(packed.tobytes(), dtype=np.int64)
    assert tuple(values) == p.shape_values()
    assert values[0] == 3 * 5 * 7
    # Front padding: unused leading outer axes have size 1 (the kernel peels from the last one).
    assert tuple(values[1 : 1 + MAX_OUTER]) == (1, 1, 1, 3 * 5 * 7)


def test_sixty_four_bit_sizes_are_planned_exactly() -> None:
    p = _plan((3, 2**20, 8, 128), (3, 2**20, 1))  # 3.2e9 elements > 2**31
    assert p.n_outer == 3 * 2**20 and p.inner_sizes == (1, 8)
    assert p.shape_values()[MAX_OUTER] == 3 * 2**20
    big = _plan((2**33, 2), (2**33,))  # more than 2**32 rows: the kernel's 64-bit division path
    assert big.n_outer == 2**33 and big.grid[0] <= plan_mod.MAX_GRID_X


def test_validation_messages() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        _plan((4, 64), (4,), head_dim=128)
    with pytest.raises(ValueError, match="last axis"):
        _plan((4, 8), (4,), x_strides=(1, 4))
    with pytest.raises(ValueError, match="positions"):
        _plan((4, 8), (5,))
    with pytest.raises(ValueError, match="zero strides"):
        _plan((4, 3, 8), (4, 1), x_strides=(8, 0, 1), inplace=True)
    with pytest.raises(ValueError, match="at most"):
        # Six non-mergeable axes (every stride padded), positions varying along all of them.
        _plan((2, 2, 2, 2, 2, 4), (2, 2, 2, 2, 2), x_strides=(1280, 320, 80, 20, 5, 1))
    with pytest.raises(ValueError, match="layout"):
        _plan((4, 8), (4,), layout="neox")


# -- kernel-shape planning (issue 16): axes, placed ids, q/k/v launches ---------------------------------


@settings(max_examples=80, deadline=None)
@given(
    axes=st.sampled_from(["bshd", "bhsd", "sbhd", "thd", "shd", "hsd", "hbsd", "sd"]),
    sizes=st.fixed_dictionaries({c: st.integers(1, 4) for c in "bsht"}),
    form=st.sampled_from(["scalar", "per-token", "hf", "full"]),
    data=st.data(),
)
def test_place_ids_addresses_what_the_oracle_places(axes, sizes, form, data) -> None:
    from rope_ref.axes import positions_for_axes

    shape = tuple(sizes.get(c, 3) for c in axes[:-1]) + (3,)
    seq = shape[axes.index("s" if "s" in axes else "t")]
    if form == "hf" and "b" not in axes:
        form = "per-token"
    ids_shape = {
        "scalar": (),
        "per-token": (data.draw(st.sampled_from([1, seq])),),
        "hf": (data.draw(st.sampled_from([1, shape[axes.index("b")] if "b" in axes else 1])), seq),
        "full": tuple(data.draw(st.sampled_from([1, n])) for n in shape[:-1]),
    }[form]
    if form == "full" and "h" in axes:
        ids_shape = tuple(1 if c == "h" else n for c, n in zip(axes, ids_shape, strict=False))
    if form == "full" and len(ids_shape) == 2 and "b" in axes:
        return  # two axes with a batch axis read as HF (B, S): covered by "hf"
    buf = np.arange(1.0, 1.0 + 2 * math.prod(ids_shape))
    ids = buf[::2].reshape(ids_shape)  # a view with stride 2: the strides must be honoured
    assert np.shares_memory(ids, buf)
    p_b, p_s, heads = plan_mod.place_ids(ids.shape, [st_ // 8 for st_ in ids.strides], axes, shape)
    assert not heads
    placed = np.broadcast_to(positions_for_axes(ids, axes, shape), shape[:-1])
    for index in np.ndindex(*shape[:-1]):
        b = index[axes.index("b")] if "b" in axes else 0
        s_ = index[axes.index("s" if "s" in axes else "t")]
        assert buf[b * p_b + s_ * p_s] == placed[index]  # ids[0, ..] is buf[0]


def test_place_ids_flags_ids_varying_over_heads_and_rejects_misfits() -> None:
    assert plan_mod.place_ids((2, 5, 3), (15, 3, 1), "bshd", (2, 5, 3, 8)) == (15, 3, True)
    assert plan_mod.place_ids((2, 5, 1), (5, 1, 1), "bshd", (2, 5, 3, 8)) == (5, 1, False)
    assert plan_mod.place_ids((7, 2), (2, 1), "thd", (7, 2, 8)) == (0, 2, True)
    misfits = [
        ((4,), "bshd", (2, 5, 3, 8)),
        ((5, 2), "bshd", (2, 5, 3, 8)),
        ((2, 5, 3, 1), "bshd", (2, 5, 3, 8)),
        ((3,), "thd", (7, 2, 8)),
    ]
    for ids_shape, axes, x_shape in misfits:
        with pytest.raises(ValueError, match=r"positions of shape .* do not fit x of shape"):
            plan_mod.place_ids(ids_shape, (1,) * len(ids_shape), axes, x_shape)


def test_canonical_axes_maps_every_convention_to_b_s_h_d() -> None:
    x = np.zeros((2, 3, 5, 8), dtype=np.float32)
    el = [s // 4 for s in x.strides]
    assert plan_mod.canonical_axes("bshd", x.shape, el) == ((2, 3, 5, 8), (120, 40, 8, 1))
    assert plan_mod.canonical_axes("bhsd", x.shape, el) == ((2, 5, 3, 8), (120, 8, 40, 1))
    assert plan_mod.canonical_axes("sbhd", x.shape, el) == ((3, 2, 5, 8), (40, 120, 8, 1))
    assert plan_mod.canonical_axes("thd", (7, 1, 8), (8, 8, 1)) == ((1, 7, 1, 8), (0, 8, 0, 1))


def test_plan_qkv_validation_and_packing() -> None:
    part = plan_mod.QkvPart((2, 3, 4, 16), (192, 64, 16, 1), (192, 64, 16, 1))
    p = plan_mod.plan_qkv(dtype_name="float16", parts=[part], head_dim=16, rotary_dim=8, layout="interleaved",
                          inplace=False)  # fmt: skip
    assert p.kernel == "rope_qkv_apply_f16" and p.heads == (4, 0, 0) and (p.n_pairs, p.n_pass) == (4, 8)
    assert p.copy_pass and p.lanes == 12 and p.n_chunks * p.chunk_heads >= 4
    pos = plan_mod.PositionPlan(plan_mod.POS_VARLEN, n_seq=3, off_at=4, base=7)
    packed = plan_mod.pack_qkv_shape(p, pos)
    values = np.frombuffer(packed.tobytes(), dtype=np.int64)
    assert values.size == len(plan_mod.QKV_SHAPE_FIELDS) and tuple(values) == p.shape_values(pos)
    assert tuple(values[-6:]) == (plan_mod.POS_VARLEN, 0, 0, 3, 4, 7)
    inplace = plan_mod.plan_qkv(dtype_name="float32", parts=[part, part], head_dim=16, rotary_dim=8,
                                layout="half", inplace=True)  # fmt: skip
    assert not inplace.copy_pass and inplace.lanes == 4 and inplace.heads == (4, 4, 0)
    kwargs = dict(head_dim=16, rotary_dim=16, layout="half", inplace=False)
    with pytest.raises(TypeError, match="dtype"):
        plan_mod.plan_qkv(dtype_name="float64", parts=[part], **kwargs)
    with pytest.raises(ValueError, match="same batch and tokens"):
        other = plan_mod.QkvPart((2, 4, 4, 16), (256, 64, 16, 1), (256, 64, 16, 1))
        plan_mod.plan_qkv(dtype_name="float32", parts=[part, other], **kwargs)
    with pytest.raises(ValueError, match="zero strides"):
        bcast = plan_mod.QkvPart((2, 3, 4, 16), (0, 64, 16, 1), (0, 64, 16, 1))
        plan_mod.plan_qkv(dtype_name="float32", parts=[bcast], **{**kwargs, "inplace": True})
    with pytest.raises(ValueError, match="head_dim=32"):
        plan_mod.plan_qkv(dtype_name="float32", parts=[part], **{**kwargs, "head_dim": 32, "rotary_dim": 32})


# -- bfloat16 host conversion ----------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_bf16_rounding_matches_torch(bits: list[int]) -> None:
    torch = pytest.importorskip("torch")
    f = np.array(bits, dtype=np.uint32).view(np.float32)
    got = float32_to_bf16_bits(f)
    ref = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    finite = np.isfinite(f)
    assert np.array_equal(got[finite], ref[finite])
    back = bf16_bits_to_float32(got)
    assert np.array_equal(np.isnan(back), np.isnan(f))
    # Normal values move by at most half a bf16 ulp (2^-8 relative), or overflow to inf.
    ok = finite & np.isfinite(back) & (np.abs(f) >= 2.0**-126)  # normal range
    assert np.all(np.abs(back[ok].astype(np.float64) / f[ok] - 1) <= 2.0**-8)


def test_bf16_round_trip_and_ties() -> None:
    # 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
    vals = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -0.0, np.inf], dtype=np.float32)
    out = bf16_bits_to_float32(float32_to_bf16_bits(vals))
    assert out.tolist() == [1.0, 1.0, 1 + 2**-6, 0.0, np.inf]
    assert np.signbit(out[3])


# -- on a GPU --------------------------------------------------------------------------------------


def _gpu_ready() -> tuple[bool, str]:
    import rope_ref.backends.cupy as cb

    return cb.available()


_GPU_OK, _GPU_REASON = _gpu_ready()
gpu = pytest.mark.skipif(not _GPU_OK, reason=f"needs a CUDA GPU with cupy: {_GPU_REASON}")

_TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _f32_angle_bound(x: np.ndarray, pos: np.ndarray, cfg: RopeConfig) -> np.ndarray:
    """Per-token bound on a float32 output of the kernel (docs/backends/cupy.md): the angle is rounded once,
    fl32(m * theta), so it is off by at most |m| * theta * 2**-24; sincosf adds 2 ulp and the rotation a few
    more. Each moves an output by at most the pair's norm (<= sqrt(2) * max |x| of the row) times that; twice
    the sum. At |m| = 5000 this is ~1e-3 of the pair norm, far above rtol 2e-5 (why a fixed rtol failed on a
    GPU), and far below what a wrong position (an error ~ theta, 0.1 to 1) or a wrong pair gives."""
    u = 2.0**-24
    theta = float(np.max(rope_ref.inv_freq(cfg)))
    r = math.sqrt(2) * np.max(np.abs(x), axis=-1, keepdims=True)
    m = np.abs(np.broadcast_to(np.asarray(pos, dtype=np.float64), x.shape[:-1]))[..., None]
    return 2 * r * (m * theta + 8) * u


def _assert_within(got: np.ndarray, expected: np.ndarray, rtol: float, atol) -> None:
    """|got - expected| <= atol + rtol * |expected| elementwise, ``atol`` an array broadcasting against them
    (``np.testing.assert_allclose`` takes only a scalar atol)."""
    bound = np.broadcast_to(atol, expected.shape) + rtol * np.abs(expected)
    ratio = np.abs(got - expected) / bound
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    assert np.all(ratio <= 1), (
        f"{int(np.sum(ratio > 1))} of {ratio.size} elements out of tolerance; worst at {worst}: "
        f"got {got[worst]!r}, expected {expected[worst]!r}, |err| / bound {ratio[worst]:.3g}"
    )


def _to_device(x: np.ndarray, dtype: str):
    import cupy as cp
    import rope_ref.backends.cupy as cb

    if dtype == "bfloat16":
        return cb.Bf16Array.from_numpy(x)
    return cp.asarray(x.astype(dtype))


def _to_host(y) -> np.ndarray:
    import cupy as cp
    import rope_ref.backends.cupy as cb

    return (
        y.to_numpy().astype(np.float64) if isinstance(y, cb.Bf16Array) else cp.asnumpy(y).astype(np.float64)
    )


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 24])
@pytest.mark.parametrize("inplace", [False, True])
def test_gpu_apply_matches_oracle(dtype, layout, rotary_dim, inplace) -> None:
    import rope_ref.backends.cupy as cb

    rng = np.random.default_rng(0)
    cfg = RopeConfig(64, layout=layout, rotary_dim=rotary_dim)
    x = rng.standard_normal((2, 37, 5, 64)).astype(np.float32)
    pos = rng.integers(0, 5000, size=(2, 37, 1))
    pos[0, 0, 0] = 0
    xd = _to_device(x, dtype)
    x_q = _to_host(xd)  # the quantised input the kernel sees
    y = cb.apply(xd, pos, cfg, inplace=inplace)
    got = _to_host(y)
    expected = rope_ref.apply(x_q, pos, cfg)
    atol = _TOL[dtype] * 4
    if dtype == "float32":  # float32 angles: the error grows with |position| (positions here reach 5000)
        atol = np.maximum(atol, _f32_angle_bound(x_q, pos, cfg))
    _assert_within(got, expected, _TOL[dtype], atol)
    assert np.array_equal(got[..., rotary_dim:], x_q[..., rotary_dim:])  # bit for bit
    assert np.array_equal(got[0, 0], x_q[0, 0])  # position 0 is the identity
    if inplace:
        assert np.array_equal(_to_host(xd), got)


@pytest.mark.gpu
@gpu
def test_gpu_strided_views_vjp_and_cos_sin() -> None:
    import cupy as cp
    import rope_ref.backends.cupy as cb

    rng = np.random.default_rng(1)
    cfg = RopeConfig(32, layout="half")
    big = cp.asarray(rng.standard_normal((6, 9, 48)).astype(np.float32))
    x = big[::2, 1:, :32]  # non-contiguous leading axes, last axis contiguous
    pos = cp.asarray(rng.standard_normal(8) * 1000)
    x_h, pos_h = cp.asnumpy(x), cp.asnumpy(pos)
    atol = np.maximum(1e-4, _f32_angle_bound(x_h, pos_h, cfg))  # positions reach ~2000
    got = cp.asnumpy(cb.apply(x, pos, cfg))
    _assert_within(got, rope_ref.apply(x_h, pos_h, cfg), 3e-5, atol)
    g = cp.asnumpy(cb.apply_vjp(x, pos, cfg))
    _assert_within(g, rope_ref.apply(x_h, -pos_h, cfg), 3e-5, atol)
    c, s = cb.cos_sin(pos, cfg)
    rc, rs = rope_ref.cos_sin(cp.asnumpy(pos), cfg)
    np.testing.assert_allclose(cp.asnumpy(c), rc, atol=2e-4)
    np.testing.assert_allclose(cp.asnumpy(s), rs, atol=2e-4)


@pytest.mark.gpu
@pytest.mark.slow
@gpu
def test_gpu_more_than_2_31_elements() -> None:
    import cupy as cp
    import rope_ref.backends.cupy as cb

    n_tok = (2**31) // 128 + 1024  # (n_tok, 1, 128) fp16 elements: past 2**31 (about 4.3 GB)
    x = cp.ones((n_tok, 1, 128), dtype=cp.float16)
    pos = cp.arange(n_tok, dtype=cp.int64) % 4096
    cfg = RopeConfig(128, layout="half", rotary_dim=64)
    cb.apply(x, pos[:, None], cfg, inplace=True)
    tail = cp.asnumpy(x[-4:]).astype(np.float64)
    expected = rope_ref.apply(np.ones((4, 1, 128)), cp.asnumpy(pos[-4:, None]), cfg)
    np.testing.assert_allclose(tail, expected, rtol=2e-3, atol=2e-3)


# -- the whole host path on an emulated device (NumPy standing in for CuPy) ------------------------
#
# ``fake_cupy`` puts a NumPy-backed stand-in for ``cupy`` into ``sys.modules``: arrays are NumPy arrays,
# and ``RawModule`` returns vectorised emulations of the .cu kernels (float32 angles and arithmetic, the
# same storage formats). This executes every line of rope_ref.backends.cupy (validation, planning,
# argument packing, bf16 wrapping, ChatGLM and decay code) without a GPU.


def _flat_view(a: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A 1-D view of the memory of ``a`` starting at its first element, long enough for ``offsets``."""
    span = int(offsets.max()) + 1 if offsets.size else 1
    return np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(a.itemsize,))


def _io_load(v: np.ndarray, kind: str) -> np.ndarray:
    return bf16_bits_to_float32(v) if kind == "bf16" else v.astype(np.float32)


def _io_store(f: np.ndarray, kind: str, dtype) -> np.ndarray:
    return float32_to_bf16_bits(f) if kind == "bf16" else f.astype(dtype)


def _emulated_apply(kind: str):
    def launch(grid, block, args) -> None:
        x, out, pos, inv, shape, n_pairs, n_pass, half, copy_pass, factor, sign = args
        v = {name: int(shape[name]) for name in SHAPE_FIELDS}
        n_pairs, n_pass = int(n_pairs), int(n_pass)
        t = np.arange(v["n_outer"], dtype=np.int64)
        xo = np.zeros_like(t)
        oo = np.zeros_like(t)
        po = np.zeros_like(t)
        for d in range(MAX_OUTER - 1, -1, -1):
            k = t % v[f"o_size{d}"]
            t = t // v[f"o_size{d}"]
            xo, oo, po = xo + k * v[f"o_xs{d}"], oo + k * v[f"o_os{d}"], po + k * v[f"o_ps{d}"]
        i0, i1 = np.meshgrid(np.arange(v["i_size0"]), np.arange(v["i_size1"]), indexing="ij")
        ix = (i0 * v["i_xs0"] + i1 * v["i_xs1"]).reshape(-1)
        io = (i0 * v["i_os0"] + i1 * v["i_os1"]).reshape(-1)
        lane = np.arange(n_pairs)
        ia = lane if half else 2 * lane
        ib = lane + n_pairs if half else 2 * lane + 1
        src_a = xo[:, None, None] + ix[None, :, None] + ia
        src_b = xo[:, None, None] + ix[None, :, None] + ib
        dst_a = oo[:, None, None] + io[None, :, None] + ia
        dst_b = oo[:, None, None] + io[None, :, None] + ib
        chans = 2 * n_pairs + np.arange(n_pass if copy_pass else 0)
        src_c = xo[:, None, None] + ix[None, :, None] + chans
        dst_c = oo[:, None, None] + io[None, :, None] + chans
        all_src = np.concatenate([src_a.ravel(), src_b.ravel(), src_c.ravel(), [0]])
        all_dst = np.concatenate([dst_a.ravel(), dst_b.ravel(), dst_c.ravel(), [0]])
        xf, of = _flat_view(x, all_src), _flat_view(out, all_dst)
        m = pos.reshape(-1)[po] if pos.size else np.zeros(0)
        angle = (m[:, None] * inv[None, :]).astype(np.float32)[:, None, :]
        cs = np.cos(angle) * np.float32(factor)
        sn = np.sin(angle) * np.float32(factor) * np.float32(sign)
        ra, rb, rc = xf[src_a].copy(), xf[src_b].copy(), xf[src_c].copy()
        a, b = _io_load(ra, kind), _io_load(rb, kind)
        ya, yb = _io_store(a * cs - b * sn, kind, x.dtype), _io_store(b * cs + a * sn, kind, x.dtype)
        ident = np.broadcast_to(((m == 0) & (np.float32(factor) == 1))[:, None, None], ya.shape)
        of[dst_a] = np.where(ident, ra, ya)
        of[dst_b] = np.where(ident, rb, yb)
        of[dst_c] = rc

    return launch


def _emulated_cos_sin(grid, block, args) -> None:
    pos, inv, n, n_pairs, factor, cos, sin = args
    angle = (pos.reshape(-1)[:, None] * inv[None, :]).astype(np.float32)
    cos.reshape(-1)[:] = (np.cos(angle) * np.float32(factor)).reshape(-1)
    sin.reshape(-1)[:] = (np.sin(angle) * np.float32(factor)).reshape(-1)


class _FakeRawModule:
    def __init__(self, code: str, options=()) -> None:
        assert "rope_apply_bf16" in code and "--std=c++14" in options

    def get_function(self, name: str):
        kinds = {"rope_apply_f32": "f32", "rope_apply_f16": "f16", "rope_apply_bf16": "bf16"}
        return _emulated_cos_sin if name == "rope_cos_sin_f32" else _emulated_apply(kinds[name])


@pytest.fixture
def fake_cupy(monkeypatch):
    import sys

    import rope_ref.backends.cupy as cb
    from cupy_host import fake_cupy as fake_cupy_module

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy_module(np.empty, _FakeRawModule, name=b"emulated"))
    cb._module.cache_clear()
    cb._freq_table_cached.cache_clear()
    yield cb
    cb._module.cache_clear()
    cb._freq_table_cached.cache_clear()


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_emulated_backend_ops_match_the_oracle(fake_cupy, precision) -> None:
    cb = fake_cupy
    backend = cb.make_backend(precision)
    assert backend.precision.angle_dtype == "float32" and backend.device == "cuda:0 (emulated)"
    rng = np.random.default_rng(3)
    cfg = RopeConfig(16, layout="interleaved", rotary_dim=12, base=10000.0)
    x = rng.standard_normal((2, 6, 3, 16)).astype(np.float32)
    pos = rng.integers(0, 3000, size=(2, 6, 1))
    xd = backend.from_numpy(x, backend.precision.io_dtype)
    xq = backend.to_numpy(xd).astype(np.float64)
    tol = _TOL[backend.precision.io_dtype]
    y = backend.to_numpy(backend.apply(xd, backend.from_numpy(pos), cfg))
    np.testing.assert_allclose(y, rope_ref.apply(xq, pos, cfg), rtol=tol, atol=4 * tol)
    assert np.array_equal(y[..., 12:], xq[..., 12:])
    g = backend.to_numpy(backend.apply_vjp(xd, backend.from_numpy(pos), cfg, xd))
    np.testing.assert_allclose(g, rope_ref.apply(xq, -pos, cfg), rtol=tol, atol=4 * tol)
    c, s = backend.cos_sin(backend.from_numpy(pos[..., 0]), cfg)
    rc, rs = rope_ref.cos_sin(pos[..., 0], cfg)
    np.testing.assert_allclose(backend.to_numpy(c), rc, atol=5e-4)
    np.testing.assert_allclose(backend.to_numpy(s), rs, atol=5e-4)
    np.testing.assert_allclose(backend.to_numpy(backend.inv_freq(cfg)), rope_ref.inv_freq(cfg))


def test_emulated_inplace_noncontiguous_and_errors(fake_cupy) -> None:
    cb = fake_cupy
    cfg = RopeConfig(8, layout="half")
    big = np.random.default_rng(4).standard_normal((5, 4, 12)).astype(np.float32)
    view = big[::2, :, 2:10]
    expected = rope_ref.apply(view.astype(np.float64), np.arange(4), cfg)
    out = cb.apply(view, np.arange(4), cfg, inplace=True)
    assert out is view
    np.testing.assert_allclose(view, expected, rtol=2e-5, atol=1e-5)
    with pytest.raises(TypeError, match="dtype"):
        cb.apply(np.zeros((2, 8)), [0, 1], cfg)
    with pytest.raises(ValueError, match="finite"):
        cb.apply(np.zeros((2, 8), np.float32), [0.0, np.nan], cfg)
    with pytest.raises(TypeError, match="cfg"):
        cb.apply(np.zeros((2, 8), np.float32), [0, 1], {"head_dim": 8})


def test_emulated_chatglm_and_decay(fake_cupy) -> None:
    from rope_ref import chatglm
    from rope_ref.decay import relative_upper_bound

    cb = fake_cupy
    backend = cb.make_backend("fp32")
    ids = np.array([[5, 6, chatglm.GMASK_TOKEN_ID, chatglm.BOS_TOKEN_ID, 7, 8],
                    [chatglm.MASK_TOKEN_ID, 5, chatglm.BOS_TOKEN_ID, 9, 9, 9]])  # fmt: skip
    for two_d in (True, False):
        kw = dict(
            bos_token_id=chatglm.BOS_TOKEN_ID,
            mask_token_id=chatglm.MASK_TOKEN_ID,
            gmask_token_id=chatglm.GMASK_TOKEN_ID,
            position_encoding_2d=two_d,
        )
        got = backend.chatglm_position_ids(ids, **kw)
        assert np.array_equal(got, chatglm.position_ids(ids, **kw))
    x = np.random.default_rng(5).standard_normal((6, 2, 16)).astype(np.float32)
    p, blk = np.arange(6)[:, None], (np.arange(6) % 3)[:, None]
    for precision, tol in (("float64", 2e-5), ("chatglm-6b-fp16", 4e-3)):
        got = backend.chatglm_apply_2d(x, p, blk, base=10000.0, precision=precision)
        want = chatglm.apply_2d(x, p, blk, base=10000.0, precision=precision)
        np.testing.assert_allclose(backend.to_numpy(got), want, rtol=tol, atol=tol)
    cfg = RopeConfig(128, layout="half")
    r = np.array([0.0, 1.0, 50.0, 250.0])
    np.testing.assert_allclose(backend.decay_upper_bound(r, cfg), relative_upper_bound(r, cfg), rtol=1e-12)
