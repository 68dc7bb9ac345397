"""The CuPy backend's host-side launch planning (``backends/_cupy_plan.py``), each helper called directly
with hand-worked shapes and strides (no GPU, no compiler): stride conversion, broadcasting, collapsing,
blocks and grids, the channel split, the apply and qkv plans, position-id placement."""

from __future__ import annotations

import pytest
from rope_ref.backends import _cupy_plan as plan


def test_kernel_names():
    assert [plan.kernel_name(d) for d in ("float32", "float16", "bfloat16")] == [
        "rope_apply_f32",
        "rope_apply_f16",
        "rope_apply_bf16",
    ]
    for bad in ("float64", None):
        with pytest.raises(TypeError, match=f"got {bad!r}"):
            plan.kernel_name(bad)


def test_element_strides():
    assert plan.element_strides((48, -12, 4), 4, "x") == (12, -3, 1)
    with pytest.raises(ValueError, match="q has a stride of 6 bytes, not a multiple of its itemsize 4"):
        plan.element_strides((12, 6), 4, "q")


def test_broadcast_strides():
    assert plan.broadcast_strides((5,), (1,), (3, 5)) == (0, 1)
    assert plan.broadcast_strides((3, 1), (7, 7), (3, 5)) == (7, 0)
    assert plan.broadcast_strides((1, 5), (9, 2), (1, 5)) == (0, 2)  # a size-1 axis never steps
    assert plan.broadcast_strides((), (), (2, 3)) == (0, 0)
    for shape in ((4,), (2, 3, 5), (3, 5, 1), (1, 3, 5)):  # (1, 3, 5) would broadcast, but enlarges x
        with pytest.raises(
            ValueError, match=r"ids of shape .* does not broadcast against x.shape\[:-1\] = \(3, 5\)"
        ):
            plan.broadcast_strides(shape, (1,) * len(shape), (3, 5), "ids")


def test_collapse_dims():
    # C-contiguous in both arrays: one axis of 2 * 3 * 4 = 24
    assert plan.collapse_dims((2, 3, 4), ((12, 4, 1), (12, 4, 1))) == ((24,), ((1,), (1,)))
    # the second array is transposed on the last two axes: nothing merges in it, so nothing merges
    got = plan.collapse_dims((2, 3, 4), ((12, 4, 1), (12, 1, 3)))
    assert got == ((2, 3, 4), ((12, 4, 1), (12, 1, 3)))
    # size-1 axes are dropped, whatever their stride
    assert plan.collapse_dims((1, 5, 1), ((99, 2, 77),)) == ((5,), ((2,),))


@pytest.mark.parametrize(
    ("lanes", "n_outer", "block", "grid"),
    [
        (1, 1, (32, 8, 1), (1, 1, 1)),
        (33, 100, (64, 4, 1), (25, 1, 1)),
        (64, 9, (64, 4, 1), (3, 1, 1)),
        (300, 2, (256, 1, 1), (2, 1, 1)),
    ],
)
def test_block_and_grid_round_up_to_warps_and_rows(lanes, n_outer, block, grid):
    assert plan._block_and_grid(lanes, n_outer) == (block, grid)


def test_channels():
    assert plan._channels(10, 6, "half", False) == {
        "n_pairs": 3,
        "n_pass": 4,
        "half_layout": True,
        "copy_pass": True,
    }
    assert plan._channels(10, 6, "interleaved", True)["copy_pass"] is False  # in place: nothing to copy
    assert plan._channels(6, 6, "half", False)["copy_pass"] is False
    with pytest.raises(ValueError, match="layout must be 'half' or 'interleaved', got 'neox'"):
        plan._channels(8, 8, "neox", False)
    for rd in (0, 5, 10):
        with pytest.raises(ValueError, match=f"rotary_dim must be even and in 2..head_dim=8, got {rd}"):
            plan._channels(8, rd, "half", False)


def apply_plan(**kw):
    args = dict(
        dtype_name="float32",
        x_shape=(3, 5, 8),
        x_strides=(40, 8, 1),
        out_strides=(40, 8, 1),
        pos_shape=(5,),
        pos_strides=(1,),
        head_dim=8,
        rotary_dim=6,
        layout="half",
        inplace=False,
    )
    args.update(kw)
    return plan.plan_apply(**args)


def test_plan_apply_keeps_broadcast_axes_inside_the_thread():
    p = apply_plan()
    assert p.kernel == "rope_apply_f32" and (p.n_pairs, p.n_pass, p.copy_pass) == (3, 2, True)
    # few rows: every axis goes to the grid (decode-like), none inside the thread
    assert p.n_outer == 15 and p.outer_sizes == (3, 5) and p.outer_pos == (0, 1)
    assert p.inner_sizes == (1, 1)
    assert plan.pack_shape(p)["n_outer"] == 15


def test_plan_apply_refuses():
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=8, got x.shape=\(3, 5, 6\)"):
        apply_plan(x_shape=(3, 5, 6))
    with pytest.raises(ValueError, match="x must be contiguous along its last axis"):
        apply_plan(x_strides=(80, 16, 2))
    with pytest.raises(ValueError, match="out must be contiguous along its last axis"):
        apply_plan(out_strides=(80, 16, 2))
    with pytest.raises(ValueError, match="in-place apply needs x without zero strides"):
        apply_plan(x_strides=(0, 8, 1), out_strides=(0, 8, 1), inplace=True)
    apply_plan(x_strides=(0, 8, 1), inplace=False)  # out of place, reading a broadcast x is fine
    with pytest.raises(ValueError, match="does not broadcast"):
        apply_plan(pos_shape=(4,))


def test_cos_sin_launch_rounds_up():
    assert plan.cos_sin_launch(1, 1) == ((1, 1, 1), (256, 1, 1))
    assert plan.cos_sin_launch(3, 100) == ((2, 1, 1), (256, 1, 1))  # 300 work items: 2 blocks
    assert plan.cos_sin_launch(256, 1) == ((1, 1, 1), (256, 1, 1))


def test_canonical_axes():
    assert plan.canonical_axes("bshd", (2, 7, 3, 8), (168, 24, 8, 1)) == ((2, 7, 3, 8), (168, 24, 8, 1))
    assert plan.canonical_axes("sbhd", (7, 1, 3, 8), (24, 999, 8, 1)) == ((1, 7, 3, 8), (0, 24, 8, 1))
    assert plan.canonical_axes("thd", (9, 2, 4), (8, 4, 1)) == ((1, 9, 2, 4), (0, 8, 4, 1))
    with pytest.raises(ValueError, match="does not name the 3 axes"):
        plan.canonical_axes("bshd", (2, 7, 8), (56, 8, 1))


def test_place_ids():
    x = (2, 7, 3, 8)  # bshd, B != S
    assert plan.place_ids((), (), "bshd", x) == (0, 0, False)
    assert plan.place_ids((7,), (1,), "bshd", x) == (0, 1, False)
    assert plan.place_ids((2, 7), (7, 1), "bshd", x) == (7, 1, False)
    assert plan.place_ids((2, 7), (7, 1), "sbhd", (7, 2, 3, 8)) == (7, 1, False)  # (B, S) ids either way
    assert plan.place_ids((2, 1), (1, 1), "bshd", x) == (1, 0, False)
    assert plan.place_ids((2, 7, 3), (21, 3, 1), "bshd", x) == (21, 3, True)
    assert plan.place_ids((1, 7, 1), (7, 1, 1), "bshd", x) == (0, 1, False)
    # size-1 (broadcasting) axes in every form: accepted, and never stepped along
    assert plan.place_ids((1,), (5,), "bshd", x) == (0, 0, False)
    assert plan.place_ids((1, 7), (9, 1), "bshd", x) == (0, 1, False)
    assert plan.place_ids((2, 1), (3, 5), "sbhd", (7, 2, 3, 8)) == (3, 0, False)
    assert plan.place_ids((2, 1, 3), (3, 9, 1), "bshd", x) == (3, 0, True)
    with pytest.raises(ValueError, match=r"positions of shape \(5,\) do not fit x of shape \(2, 7, 3, 8\)"):
        plan.place_ids((5,), (1,), "bshd", x)


def part(b, s, h, d=8):
    st = (s * h * d, h * d, d, 1)
    return plan.QkvPart((b, s, h, d), st, st)


def qkv_plan(parts, dtype_name="float32", layout="half"):
    return plan.plan_qkv(
        dtype_name=dtype_name, parts=parts, head_dim=8, rotary_dim=8, layout=layout, inplace=False
    )


def test_plan_qkv():
    p = qkv_plan([part(2, 5, 6), part(2, 5, 2)], "bfloat16", "interleaved")
    assert p.kernel == "rope_qkv_apply_bf16" and p.heads == (6, 2, 0) and (p.n_b, p.n_s) == (2, 5)
    # decode-sized: 10 tokens x 4 lanes are far below 2**17 threads, so the 8 heads go one per chunk
    assert (p.chunk_heads, p.n_chunks) == (1, 8)
    # one row per (token, chunk): 10 x 8 = 80 rows, 8 rows per 32 x 8 block: 10 blocks
    assert (p.n_rows, p.block, p.grid) == (80, (32, 8, 1), (10, 1, 1))
    # 8192 tokens x 4 lanes: 2**17 threads need 4 chunks of the 7 heads, 2 heads each: 4 chunks, not 3
    p = qkv_plan([part(1, 8192, 7)])
    assert (p.chunk_heads, p.n_chunks) == (2, 4)
    assert (p.n_rows, p.block, p.grid) == (8192 * 4, (32, 8, 1), (8192 * 4 // 8, 1, 1))
    with pytest.raises(ValueError, match="a launch takes 1 to 3 tensors, got 4"):
        qkv_plan([part(1, 2, 1)] * 4)
    with pytest.raises(ValueError, match="every tensor needs the same batch and tokens"):
        qkv_plan([part(1, 2, 1), part(1, 3, 1)])
    with pytest.raises(TypeError, match="got 'float64'"):
        qkv_plan([part(1, 2, 1)], "float64")


def test_launch_caps_grid_and_cos_sin_blocks():
    """grid.x stops at 2**31 - 1 (the grid-stride loop covers the rest); cos/sin use at most 2**20 blocks."""
    assert plan._block_and_grid(32, 1 << 40) == ((32, 8, 1), ((1 << 31) - 1, 1, 1))
    assert plan._block_and_grid(32, 8 * ((1 << 31) - 1)) == ((32, 8, 1), ((1 << 31) - 1, 1, 1))
    assert plan.cos_sin_launch(1 << 20, 256) == ((1 << 20, 1, 1), (256, 1, 1))  # exactly the cap
    assert plan.cos_sin_launch(1 << 20, 257) == ((1 << 20, 1, 1), (256, 1, 1))
    assert plan.cos_sin_launch(0, 7) == ((1, 1, 1), (256, 1, 1))


def test_lanes_count_copied_channels_only_out_of_place():
    assert apply_plan().lanes == 3 + 2 and apply_plan().half_layout is True
    assert apply_plan(layout="interleaved").half_layout is False
    assert qkv_plan([part(1, 2, 1)], layout="interleaved").half_layout is False
    assert qkv_plan([part(1, 2, 1)]).half_layout is True
    assert apply_plan(inplace=True).lanes == 3
    assert apply_plan(rotary_dim=8).lanes == 4


def test_plan_apply_moves_inner_axes_to_the_grid_below_the_thread_target():
    """(S, H, 8) with ids (S, 1): heads share the angle, so H loops inside the thread unless S x 4 lanes
    falls short of 2**17 threads; at exactly 2**17 it stays inside."""

    def heads_plan(s):
        return apply_plan(x_shape=(s, 3, 8), x_strides=(24, 8, 1), out_strides=(24, 8, 1),
                          pos_shape=(s, 1), pos_strides=(1, 1), rotary_dim=8)  # fmt: skip

    p = heads_plan(1 << 15)
    assert (p.n_outer, p.outer_sizes, p.outer_x, p.outer_pos) == (1 << 15, (1 << 15,), (24,), (1,))
    assert (p.inner_sizes, p.inner_x, p.inner_out) == ((1, 3), (0, 8), (0, 8))
    assert p.grid == (-(-(1 << 15) // 8), 1, 1) and p.block == (32, 8, 1)
    q = heads_plan((1 << 15) - 1)
    assert (
        q.n_outer == 3 * ((1 << 15) - 1) and q.inner_sizes == (1, 1) and q.outer_sizes == ((1 << 15) - 1, 3)
    )


def test_plan_apply_keeps_at_most_two_inner_axes_in_array_order():
    """Three broadcast axes of sizes 3, 5, 2 (ids vary along the first axis only): the two largest (3, 5)
    loop inside, in array order, the last one (5) the unrolled loop; 2 joins the grid."""
    shape = (1 << 16, 3, 5, 2, 8)
    strides = (1024, 256, 40, 16, 1)  # padded rows: no two axes merge
    p = apply_plan(x_shape=shape, x_strides=strides, out_strides=strides, pos_shape=(1 << 16, 1, 1, 1),
                   pos_strides=(1, 1, 1, 1), rotary_dim=8)  # fmt: skip
    assert p.inner_sizes == (3, 5) and p.inner_x == (256, 40)
    assert p.outer_sizes == (1 << 16, 2) and p.outer_x == (1024, 16) and p.outer_pos == (1, 0)


def five_axes(pos_shape, pos_strides):
    """x of shape (2, 3, 2, 3, 2, 8) with every leading axis padded: no two axes merge."""
    shape = (2, 3, 2, 3, 2, 8)
    strides = (1000, 300, 128, 40, 16, 1)
    return apply_plan(x_shape=shape, x_strides=strides, out_strides=strides, pos_shape=pos_shape,
                      pos_strides=pos_strides)  # fmt: skip


def test_plan_apply_outer_axes_limit():
    """Four outer axes are the kernel's limit: a fifth one that ids do not vary along stays inside the
    thread even when the grid is small; five axes the ids vary along are refused."""
    p = five_axes((2, 3, 2, 3, 1), (18, 6, 3, 1, 1))
    assert len(p.outer_sizes) == 4 and p.outer_sizes == (2, 3, 2, 3) and p.inner_sizes == (1, 2)
    with pytest.raises(
        ValueError, match=r"x has 5 leading axes that cannot be merged \(shape \(2, 3, 2, 3, 2, 8\)"
    ):
        five_axes((2, 3, 2, 3, 2), (36, 12, 6, 2, 1))


def test_pack_shape_pads_outer_axes_at_the_front():
    p = apply_plan(x_shape=(3, 5, 8), x_strides=(80, 16, 1), out_strides=(40, 8, 1))
    packed = plan.pack_shape(p)
    assert packed.dtype == plan.shape_struct_dtype() and packed.dtype.itemsize == 8 * len(plan.SHAPE_FIELDS)
    assert [int(packed[f"o_size{d}"]) for d in range(4)] == [1, 1, 3, 5]
    assert [int(packed[f"o_xs{d}"]) for d in range(4)] == [0, 0, 80, 16]
    assert [int(packed[f"o_os{d}"]) for d in range(4)] == [0, 0, 40, 8]
    assert [int(packed[f"o_ps{d}"]) for d in range(4)] == [0, 0, 0, 1]
    assert p.shape_values() == tuple(int(packed[f]) for f in plan.SHAPE_FIELDS)


def test_place_ids_error_lists_the_forms_of_the_axes():
    forms = (
        r"expected a scalar, \(7,\) per-token ids or \(2, 7\) HF-style \(B, S\) ids or an array with one "
        r"axis per leading axis of x, broadcasting to \(2, 7, 3\)"
    )
    with pytest.raises(ValueError, match=forms):
        plan.place_ids((3, 7), (7, 1), "bshd", (2, 7, 3, 8))
    with pytest.raises(ValueError, match=r"axes='thd': expected a scalar, \(9,\) per-token ids or an array"):
        plan.place_ids((2, 9), (9, 1), "thd", (9, 2, 8))
    assert plan.place_ids((9, 2), (2, 1), "thd", (9, 2, 8)) == (0, 2, True)


def test_plan_qkv_strides_chunks_and_packing():
    q = plan.QkvPart((2, 5, 4, 8), (160, 32, 8, 1), (160, 32, 8, 1))
    k = plan.QkvPart((2, 5, 1, 8), (-40, 8, 0, 1), (40, 8, 8, 1))
    p = plan.plan_qkv(
        dtype_name="float16", parts=[q, k], head_dim=8, rotary_dim=6, layout="half", inplace=False
    )
    assert p.kernel == "rope_qkv_apply_f16" and p.heads == (4, 1, 0) and (p.n_pairs, p.n_pass) == (3, 2)
    assert p.x_strides == (160, 32, 8, 1, -40, 8, 0, 1, 0, 0, 0, 0)
    assert p.out_strides == (160, 32, 8, 1, 40, 8, 8, 1, 0, 0, 0, 0)
    assert (p.chunk_heads, p.n_chunks, p.n_rows) == (1, 5, 2 * 5 * 5) and p.lanes == 5
    # 5 lanes round up to one warp (32 x 8 threads); 50 rows at 8 per block: 7 blocks, the last one short
    assert (p.block, p.grid) == ((32, 8, 1), (7, 1, 1))
    pos = plan.PositionPlan(mode=plan.POS_VARLEN, p_b=3, p_s=1, n_seq=4, off_at=6, base=9)
    packed = plan.pack_qkv_shape(p, pos)
    assert packed.dtype == plan.qkv_shape_struct_dtype()
    assert packed.dtype.names == plan.QKV_SHAPE_FIELDS
    assert packed.dtype.itemsize == 8 * len(plan.QKV_SHAPE_FIELDS)
    assert tuple(int(packed[f]) for f in plan.QKV_SHAPE_FIELDS) == p.shape_values(pos)
    counts = ("n_b", "n_s", "n_chunks", "chunk_heads", "heads0", "heads1", "heads2")
    assert [int(packed[f]) for f in counts] == [2, 5, 5, 1, 4, 1, 0]
    assert [int(packed[f"x_st{i}"]) for i in (4, 6)] == [-40, 0] and int(packed["o_st6"]) == 8
    pos_fields = ("pos_mode", "p_b", "p_s", "n_seq", "off_at", "base")
    assert [int(packed[f]) for f in pos_fields] == [2, 3, 1, 4, 6, 9]
    inplace = plan.plan_qkv(
        dtype_name="float32", parts=[q], head_dim=8, rotary_dim=6, layout="half", inplace=True
    )
    assert inplace.lanes == 3 and inplace.copy_pass is False


def test_plan_qkv_single_head_or_enough_tokens_is_one_chunk():
    assert (qkv_plan([part(1, 3, 1)]).n_chunks, qkv_plan([part(1, 3, 1)]).chunk_heads) == (1, 1)
    big = qkv_plan([part(1, 1 << 15, 3)])  # 2**15 tokens x 4 lanes = 2**17 threads: enough
    assert (big.n_chunks, big.chunk_heads) == (1, 3)
    short = qkv_plan([part(1, (1 << 15) - 1, 3)])  # one token short: the heads split
    assert (short.n_chunks, short.chunk_heads) == (2, 2)
    # the grid covers both chunks of every token: 2 * (2**15 - 1) rows at 8 per block
    assert short.grid == (-(-2 * ((1 << 15) - 1) // 8), 1, 1) == ((1 << 13), 1, 1)
    assert big.grid == ((1 << 15) // 8, 1, 1)
    empty = qkv_plan([part(1, 0, 3)])
    assert (empty.n_chunks, empty.chunk_heads) == (1, 3)


def test_plan_qkv_refuses_each_part():
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=8, got 6"):
        qkv_plan([part(1, 2, 1), part(1, 2, 1, d=6)])
    with pytest.raises(ValueError, match="a launch takes 1 to 3 tensors, got 0"):
        qkv_plan([])
    aliased = plan.QkvPart((1, 4, 2, 8), (64, 16, 0, 1), (64, 16, 8, 1))
    kw = dict(dtype_name="float32", head_dim=8, rotary_dim=8, layout="half")
    with pytest.raises(
        ValueError, match=r"in-place apply needs x without zero strides .* got strides \(64, 16, 0, 1\)"
    ):
        plan.plan_qkv(parts=[part(1, 4, 2), aliased], inplace=True, **kw)
    # out of place, reading a broadcast is fine
    assert plan.plan_qkv(parts=[aliased], inplace=False, **kw).heads == (2, 0, 0)
    one = plan.QkvPart((1, 4, 1, 8), (32, 8, 0, 1), (32, 8, 0, 1))
    assert plan.plan_qkv(parts=[one], inplace=True, **kw).heads == (1, 0, 0)  # stride 0 on a size-1 axis


@pytest.mark.parametrize(
    ("sizes", "strides", "outer", "inner"),
    [
        # S = 2**14 tokens, heads (3) then a broadcast axis (5), rows padded so nothing merges
        ((1 << 14, 3, 5), (400, 96, 16), (1 << 14, 5), (1, 3)),
        ((1 << 14, 5, 3), (400, 64, 16), (1 << 14, 5), (1, 3)),  # the same sizes in the other order
    ],
)
def test_plan_apply_decode_gives_the_biggest_inner_axis_to_the_grid(sizes, strides, outer, inner):
    """Ids vary along the first axis only, so both other axes start inside the thread; 2**14 rows x 4 lanes
    are short of 2**17 threads, so the biggest inner axis (5, wherever it sits) joins the grid: 2**14 x 5
    x 4 = 327680 threads are enough and the 3 stays inside (moving the 3 would leave 196608 and keep 5)."""
    shape, st = (*sizes, 8), (*strides, 1)
    p = apply_plan(x_shape=shape, x_strides=st, out_strides=st, pos_shape=(sizes[0], 1, 1),
                   pos_strides=(1, 1, 1), rotary_dim=8)  # fmt: skip
    assert (p.outer_sizes, p.inner_sizes) == (outer, inner)
    big, small = (1, 2) if sizes[1] == 5 else (2, 1)
    assert p.outer_x == (strides[0], strides[big]) and p.outer_pos == (1, 0)
    assert p.inner_x == (0, strides[small]) and p.inner_out == (0, strides[small])
    assert p.n_outer == (1 << 14) * 5 and p.grid == ((1 << 14) * 5 // 8, 1, 1)


def test_plan_apply_decode_moves_both_inner_axes_when_one_is_not_enough():
    """2**13 rows x 4 lanes: moving the 5 gives 163840 >= 2**17 threads (stop); 2**12 rows: 81920 after the
    5, still short, so the 3 follows and nothing stays inside the thread."""
    st = (400, 96, 16, 1)
    kw = dict(x_strides=st, out_strides=st, pos_strides=(1, 1, 1), rotary_dim=8)
    p = apply_plan(x_shape=(1 << 13, 3, 5, 8), pos_shape=(1 << 13, 1, 1), **kw)
    assert (p.outer_sizes, p.inner_sizes) == ((1 << 13, 5), (1, 3))
    q = apply_plan(x_shape=(1 << 12, 3, 5, 8), pos_shape=(1 << 12, 1, 1), **kw)
    assert (q.outer_sizes, q.inner_sizes, q.n_outer) == ((1 << 12, 3, 5), (1, 1), (1 << 12) * 15)
