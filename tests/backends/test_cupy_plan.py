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
    # 8192 tokens x 4 lanes: 2**17 threads need 4 chunks of the 7 heads, 2 heads each: 4 chunks, not 3
    p = qkv_plan([part(1, 8192, 7)])
    assert (p.chunk_heads, p.n_chunks) == (2, 4)
    with pytest.raises(ValueError, match="a launch takes 1 to 3 tensors, got 4"):
        qkv_plan([part(1, 2, 1)] * 4)
    with pytest.raises(ValueError, match="every tensor needs the same batch and tokens"):
        qkv_plan([part(1, 2, 1), part(1, 3, 1)])
    with pytest.raises(TypeError, match="got 'float64'"):
        qkv_plan([part(1, 2, 1)], "float64")
