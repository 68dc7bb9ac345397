"""Host-side launch planning for the CuPy kernels in ``rope_kernels.cu`` (pure Python, no cupy).

Everything that decides *how* the fused kernel runs lives here so it can be unit-tested on a
machine without a GPU: which kernel a dtype selects, how the leading axes of ``x`` are collapsed
and split into per-thread "outer" rows and in-thread "inner" loops, the packed ``RopeShape``
struct, and the grid and block sizes. :mod:`rope_ref.backends.cupy` only turns a plan into a launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MAX_OUTER",
    "MAX_INNER",
    "KERNEL_FOR_DTYPE",
    "MULTIAXIS_KERNEL_FOR_DTYPE",
    "MULTIAXIS_DEFINE",
    "SHAPE_FIELDS",
    "ApplyPlan",
    "kernel_name",
    "element_strides",
    "broadcast_strides",
    "collapse_dims",
    "plan_apply",
    "shape_struct_dtype",
    "pack_shape",
    "cos_sin_launch",
    "QKV_KERNEL_FOR_DTYPE",
    "QKV_PARTS",
    "QKV_SHAPE_FIELDS",
    "POS_IDS",
    "POS_OFFSET",
    "POS_VARLEN",
    "PositionPlan",
    "QkvPart",
    "QkvPlan",
    "canonical_axes",
    "place_ids",
    "plan_qkv",
    "qkv_shape_struct_dtype",
    "pack_qkv_shape",
]

#: Outer axes the kernel decomposes per thread row (``ROPE_MAX_OUTER`` in the .cu file).
MAX_OUTER = 4
#: Inner axes the kernel loops over inside a thread (``i_size0`` and ``i_size1``).
MAX_INNER = 2
#: Threads per block the planner aims for.
BLOCK_THREADS = 256
#: Below this many threads the planner moves inner axes to the grid (decode-sized inputs).
MIN_PARALLEL_THREADS = 1 << 17
#: Largest grid.x the planner asks for; rows beyond it are covered by the grid-stride loop.
MAX_GRID_X = (1 << 31) - 1

#: Activation dtype name -> kernel in rope_kernels.cu.
KERNEL_FOR_DTYPE = {
    "float32": "rope_apply_f32",
    "float16": "rope_apply_f16",
    "bfloat16": "rope_apply_bf16",
}

#: Activation dtype name -> multi-axis kernel (``rope_multiaxis_apply_*``, same ``RopeShape`` plan).
MULTIAXIS_KERNEL_FOR_DTYPE = {
    "float32": "rope_multiaxis_apply_f32",
    "float16": "rope_multiaxis_apply_f16",
    "bfloat16": "rope_multiaxis_apply_bf16",
}
#: The preprocessor flag that compiles the multi-axis kernels of ``rope_kernels.cu``.
MULTIAXIS_DEFINE = "-DROPE_WITH_MULTIAXIS"

#: Activation dtype name -> kernel-shape kernel (``rope_qkv_apply_*``: q, k and v through their strides).
QKV_KERNEL_FOR_DTYPE = {
    "float32": "rope_qkv_apply_f32",
    "float16": "rope_qkv_apply_f16",
    "bfloat16": "rope_qkv_apply_bf16",
}

#: Fields of ``struct RopeShape`` in declaration order, each int64 (arrays expanded).
SHAPE_FIELDS: tuple[str, ...] = (
    ("n_outer",)
    + tuple(f"o_size{d}" for d in range(MAX_OUTER))
    + tuple(f"o_xs{d}" for d in range(MAX_OUTER))
    + tuple(f"o_os{d}" for d in range(MAX_OUTER))
    + tuple(f"o_ps{d}" for d in range(MAX_OUTER))
    + ("i_size0", "i_size1", "i_xs0", "i_xs1", "i_os0", "i_os1")
)


def kernel_name(dtype_name: str) -> str:
    """The apply kernel for an activation dtype name; ``TypeError`` for anything else."""
    try:
        return KERNEL_FOR_DTYPE[dtype_name]
    except (KeyError, TypeError):
        raise TypeError(
            f"x must have dtype float32, float16 or bfloat16 for the cupy backend, got {dtype_name!r}"
        ) from None


def element_strides(strides_bytes: Sequence[int], itemsize: int, name: str) -> tuple[int, ...]:
    """Byte strides to element strides; ``ValueError`` if a stride is not a whole number of elements."""
    out = []
    for s in strides_bytes:
        if s % itemsize:
            raise ValueError(f"{name} has a stride of {s} bytes, not a multiple of its itemsize {itemsize}")
        out.append(s // itemsize)
    return tuple(out)


def broadcast_strides(
    shape: Sequence[int], strides: Sequence[int], target: Sequence[int], name: str = "positions"
) -> tuple[int, ...]:
    """Strides of an array of ``shape`` broadcast (NumPy rules) *to* ``target``: 0 on broadcast axes.

    Raises ``ValueError`` naming ``name`` if it does not broadcast to exactly ``target``.
    """
    shape, strides, target = tuple(shape), tuple(strides), tuple(target)
    if len(shape) > len(target):
        raise ValueError(f"{name} of shape {shape} does not broadcast against x.shape[:-1] = {target}")
    pad = len(target) - len(shape)
    out = [0] * pad
    for n, s, t in zip(shape, strides, target[pad:], strict=True):
        if n == t:
            out.append(s if n != 1 else 0)
        elif n == 1:
            out.append(0)
        else:
            raise ValueError(f"{name} of shape {shape} does not broadcast against x.shape[:-1] = {target}")
    return tuple(out)


def collapse_dims(
    sizes: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 axes and merge neighbours that are contiguous in every array.

    ``strides[k]`` are the element strides of array k over ``sizes``. Axes i and i+1 merge when
    ``strides[k][i] == strides[k][i+1] * sizes[i+1]`` for every k (the C-order rule). Returns the
    new sizes and per-array strides; the set of element offsets is unchanged.
    """
    keep = [i for i, n in enumerate(sizes) if n != 1]
    out_sizes: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for i in keep:
        if out_sizes and all(
            st[-1] == arr[i] * sizes[i] for st, arr in zip(out_strides, strides, strict=True)
        ):
            out_sizes[-1] *= sizes[i]
            for st, arr in zip(out_strides, strides, strict=True):
                st[-1] = arr[i]
            continue
        out_sizes.append(sizes[i])
        for st, arr in zip(out_strides, strides, strict=True):
            st.append(arr[i])
    return tuple(out_sizes), tuple(tuple(s) for s in out_strides)


@dataclass(frozen=True)
class _Launch:
    """What every launch plan holds: the kernel, the channel split (pairs rotated, channels passed
    through, layout, whether the launch copies the pass-through channels), block and grid."""

    kernel: str
    n_pairs: int
    n_pass: int
    half_layout: bool
    copy_pass: bool
    block: tuple[int, int, int]
    grid: tuple[int, int, int]

    @property
    def lanes(self) -> int:
        """Threads' work items per row: one per rotated pair, plus one per copied channel."""
        return self.n_pairs + (self.n_pass if self.copy_pass else 0)


@dataclass(frozen=True)
class ApplyPlan(_Launch):
    """One launch of an apply kernel: the packed shape, the scalar parameters, grid and block."""

    n_outer: int
    outer_sizes: tuple[int, ...]
    outer_x: tuple[int, ...]
    outer_out: tuple[int, ...]
    outer_pos: tuple[int, ...]
    inner_sizes: tuple[int, int]
    inner_x: tuple[int, int]
    inner_out: tuple[int, int]

    def shape_values(self) -> tuple[int, ...]:
        """The ``RopeShape`` fields in declaration order (see :data:`SHAPE_FIELDS`)."""
        pad = MAX_OUTER - len(self.outer_sizes)
        # Pad at the front: the kernel peels axes from the last one, so leading size-1 axes are free.
        sizes = (1,) * pad + self.outer_sizes
        xs = (0,) * pad + self.outer_x
        os_ = (0,) * pad + self.outer_out
        ps = (0,) * pad + self.outer_pos
        return (self.n_outer,) + sizes + xs + os_ + ps + self.inner_sizes + self.inner_x + self.inner_out


def _block_and_grid(lanes: int, n_outer: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    bx = min(-(-lanes // 32) * 32, BLOCK_THREADS)
    by = max(1, BLOCK_THREADS // bx)
    gx = max(1, min(-(-n_outer // by), MAX_GRID_X))
    return (bx, by, 1), (gx, 1, 1)


def _channels(head_dim: int, rotary_dim: int, layout: str, inplace: bool) -> dict[str, Any]:
    """The channel fields of a plan (pairs rotated, channels passed through, layout, whether the launch
    copies the pass-through channels); ``ValueError`` for a bad ``layout`` or ``rotary_dim``."""
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be even and in 2..head_dim={head_dim}, got {rotary_dim}")
    n_pass = head_dim - rotary_dim
    return {
        "n_pairs": rotary_dim // 2,
        "n_pass": n_pass,
        "half_layout": layout == "half",
        "copy_pass": n_pass > 0 and not inplace,
    }


def plan_apply(
    *,
    dtype_name: str,
    x_shape: Sequence[int],
    x_strides: Sequence[int],
    out_strides: Sequence[int],
    pos_shape: Sequence[int],
    pos_strides: Sequence[int],
    head_dim: int,
    rotary_dim: int,
    layout: str,
    inplace: bool,
) -> ApplyPlan:
    """Plan a fused apply over ``x`` (all strides in elements).

    Requirements, each a ``ValueError`` naming the argument: ``x.shape[-1] == head_dim``; the last
    axis of x and of the output has stride 1; positions broadcast to ``x.shape[:-1]``; at most
    :data:`MAX_OUTER` outer axes remain after collapsing; an in-place x has no zero stride on an axis
    of size > 1 (two rows would alias).
    """
    kernel = kernel_name(dtype_name)
    x_shape = tuple(int(n) for n in x_shape)
    if len(x_shape) == 0 or x_shape[-1] != head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={head_dim}, got x.shape={x_shape}")
    channels = _channels(head_dim, rotary_dim, layout, inplace)
    if x_shape[-1] > 1 and x_strides[-1] != 1:
        raise ValueError(f"x must be contiguous along its last axis, got element strides {tuple(x_strides)}")
    if x_shape[-1] > 1 and out_strides[-1] != 1:
        raise ValueError(
            f"out must be contiguous along its last axis, got element strides {tuple(out_strides)}"
        )
    lead = x_shape[:-1]
    if inplace and any(n > 1 and s == 0 for n, s in zip(lead, x_strides[:-1], strict=True)):
        raise ValueError(
            f"in-place apply needs x without zero strides (aliased rows), got {tuple(x_strides)}"
        )
    ps = broadcast_strides(pos_shape, pos_strides, lead)
    sizes, (xs, os_, pss) = collapse_dims(lead, (tuple(x_strides[:-1]), tuple(out_strides[:-1]), ps))
    lanes = channels["n_pairs"] + (channels["n_pass"] if channels["copy_pass"] else 0)

    # Axes along which positions do not vary are looped inside the thread (angle reused).
    inner = [i for i in range(len(sizes)) if pss[i] == 0]
    inner.sort(key=lambda i: sizes[i], reverse=True)
    inner = inner[:MAX_INNER]

    def n_outer_of(inner_axes: list[int]) -> int:
        return int(np.prod([sizes[i] for i in range(len(sizes)) if i not in inner_axes], dtype=object))

    # Too little parallelism (decode): give the biggest inner axis to the grid instead.
    while inner and n_outer_of(inner) * lanes < MIN_PARALLEL_THREADS:
        if len(sizes) - len(inner) + 1 > MAX_OUTER:
            break
        inner = inner[1:]
    outer = [i for i in range(len(sizes)) if i not in inner]
    if len(outer) > MAX_OUTER:
        raise ValueError(
            f"x has {len(outer)} leading axes that cannot be merged (shape {x_shape}, element strides "
            f"{tuple(x_strides)}); the cupy kernel handles at most {MAX_OUTER}: make x contiguous first"
        )
    # Inner axes keep their array order; the last one (i1) is the unrolled loop.
    inner_sorted = sorted(inner)
    pad = MAX_INNER - len(inner_sorted)
    inner_sizes = (1,) * pad + tuple(sizes[i] for i in inner_sorted)
    inner_x = (0,) * pad + tuple(xs[i] for i in inner_sorted)
    inner_out = (0,) * pad + tuple(os_[i] for i in inner_sorted)
    n_outer = n_outer_of(inner)
    block, grid = _block_and_grid(lanes, n_outer)
    return ApplyPlan(
        kernel=kernel,
        n_outer=n_outer,
        outer_sizes=tuple(sizes[i] for i in outer),
        outer_x=tuple(xs[i] for i in outer),
        outer_out=tuple(os_[i] for i in outer),
        outer_pos=tuple(pss[i] for i in outer),
        inner_sizes=inner_sizes,  # type: ignore[arg-type]
        inner_x=inner_x,  # type: ignore[arg-type]
        inner_out=inner_out,  # type: ignore[arg-type]
        block=block,
        grid=grid,
        **channels,
    )


def shape_struct_dtype() -> np.dtype:
    """NumPy dtype laid out like ``struct RopeShape`` (all int64, so no padding)."""
    return np.dtype([(name, np.int64) for name in SHAPE_FIELDS])


def pack_shape(plan: ApplyPlan) -> np.void:
    """The ``RopeShape`` argument as a NumPy structured scalar (CuPy passes it by value)."""
    return np.array([plan.shape_values()], dtype=shape_struct_dtype())[0]


def cos_sin_launch(n_positions: int, n_pairs: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block of ``rope_cos_sin_f32`` (a grid-stride loop over positions x pairs)."""
    total = n_positions * n_pairs
    blocks = max(1, min(-(-total // BLOCK_THREADS), 1 << 20))
    return (blocks, 1, 1), (BLOCK_THREADS, 1, 1)


# -- the kernel-shape kernel (issue 16): q, k, v through their strides, positions as ids/offset/varlen ------

#: Tensors of one ``rope_qkv_apply_*`` launch (``ROPE_QKV_PARTS``: q, k, v) and axes per tensor (b, s, h, d).
QKV_PARTS = 3
QKV_AXES = 4
#: ``pos_mode`` values (``ROPE_POS_*`` in the .cu file).
POS_IDS, POS_OFFSET, POS_VARLEN = 0, 1, 2

#: Fields of ``struct RopeQkvShape`` in declaration order, each int64 (arrays expanded).
QKV_SHAPE_FIELDS: tuple[str, ...] = (
    ("n_b", "n_s", "n_chunks", "chunk_heads")
    + tuple(f"heads{p}" for p in range(QKV_PARTS))
    + tuple(f"x_st{i}" for i in range(QKV_PARTS * QKV_AXES))
    + tuple(f"o_st{i}" for i in range(QKV_PARTS * QKV_AXES))
    + ("pos_mode", "p_b", "p_s", "n_seq", "off_at", "base")
)

_CANONICAL = {"b": 0, "s": 1, "t": 1, "h": 2, "d": 3}


def canonical_axes(
    axes: str, shape: Sequence[int], strides: Sequence[int]
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """Sizes and element strides of an array named by ``axes`` on the kernel's axes (b, s, h, d).

    ``t`` (packed tokens) is the kernel's ``s`` with one batch row; an axis ``axes`` lacks has size 1 and
    stride 0, and so has every axis of size 1 (its stride is never multiplied by a non-zero index).
    ``axes`` must already be valid for ``len(shape)`` (:func:`rope_ref.axes.parse_axes`).
    """
    if len(axes) != len(shape) or len(shape) != len(strides):
        raise ValueError(
            f"axes={axes!r} does not name the {len(shape)} axes of an array of shape {tuple(shape)}"
        )
    sizes, steps = [1, 1, 1, 1], [0, 0, 0, 0]
    for letter, n, st in zip(axes, shape, strides, strict=True):
        i = _CANONICAL[letter]
        sizes[i], steps[i] = int(n), (int(st) if n != 1 else 0)
    return tuple(sizes), tuple(steps)  # type: ignore[return-value]


def place_ids(
    ids_shape: Sequence[int], ids_strides: Sequence[int], axes: str, x_shape: Sequence[int]
) -> tuple[int, int, bool]:
    """``(stride along b, stride along s, varies over heads)`` of position ids for an x named by ``axes``.

    The oracle's rules (:func:`rope_ref.axes.positions_for_axes`): a scalar; per-token ids ``(S,)``
    (``(T,)`` for ``thd``); HF-style ``(B, S)`` ids when ``axes`` has ``b``, whatever the order of ``b`` and
    ``s`` in x; or one entry (or 1) per leading axis of x. The third value is True when full-rank ids
    vary along the head axis (then the angle is not shared between heads). ``ValueError`` naming
    ``positions``, ``axes`` and the shapes when the ids do not fit.
    """
    shape, strides = tuple(int(n) for n in ids_shape), tuple(int(s) for s in ids_strides)
    x_shape = tuple(int(n) for n in x_shape)
    lead = x_shape[:-1]
    seq_axis = axes.index("s" if "s" in axes else "t")

    def fits(got: int, want: int) -> bool:
        return got == want or got == 1

    def along(i: int) -> int:
        return strides[i] if shape[i] != 1 else 0

    if len(shape) == 0:
        return 0, 0, False
    if len(shape) == 1 and fits(shape[0], lead[seq_axis]):
        return 0, along(0), False
    if len(shape) == 2 and "b" in axes:
        if fits(shape[0], lead[axes.index("b")]) and fits(shape[1], lead[seq_axis]):
            return along(0), along(1), False
    elif (
        len(shape) == len(lead)
        and len(shape) > 1
        and all(fits(p, n) for p, n in zip(shape, lead, strict=True))
    ):
        p_b = p_s = 0
        heads = False
        for i, letter in enumerate(axes[:-1]):
            if letter == "b":
                p_b = along(i)
            elif letter in "st":
                p_s = along(i)
            elif shape[i] != 1:
                heads = True
        return p_b, p_s, heads
    forms = [f"a scalar, ({lead[seq_axis]},) per-token ids"]
    if "b" in axes:
        forms.append(f"({lead[axes.index('b')]}, {lead[seq_axis]}) HF-style (B, S) ids")
    forms.append(f"an array with one axis per leading axis of x, broadcasting to {lead}")
    raise ValueError(
        f"positions of shape {shape} do not fit x of shape {x_shape} with axes={axes!r}: expected "
        + " or ".join(forms)
    )


@dataclass(frozen=True)
class PositionPlan:
    """How the kernel forms a token's position (``pos_mode`` and its fields of ``RopeQkvShape``)."""

    mode: int = POS_IDS
    p_b: int = 0
    p_s: int = 0
    n_seq: int = 0
    off_at: int = -1
    base: int = 0


@dataclass(frozen=True)
class QkvPart:
    """One tensor of a launch on the kernel's axes (b, s, h, d): sizes and element strides of x and out."""

    sizes: tuple[int, int, int, int]
    x_strides: tuple[int, int, int, int]
    out_strides: tuple[int, int, int, int]


@dataclass(frozen=True)
class QkvPlan(_Launch):
    """One launch of a ``rope_qkv_apply_*`` kernel."""

    n_b: int
    n_s: int
    heads: tuple[int, int, int]
    x_strides: tuple[int, ...]  # QKV_PARTS * QKV_AXES, part-major
    out_strides: tuple[int, ...]
    n_chunks: int
    chunk_heads: int

    @property
    def n_rows(self) -> int:
        return self.n_b * self.n_s * self.n_chunks

    def shape_values(self, pos: PositionPlan) -> tuple[int, ...]:
        """The ``RopeQkvShape`` fields in declaration order (see :data:`QKV_SHAPE_FIELDS`)."""
        return (
            (self.n_b, self.n_s, self.n_chunks, self.chunk_heads)
            + self.heads
            + self.x_strides
            + self.out_strides
            + (pos.mode, pos.p_b, pos.p_s, pos.n_seq, pos.off_at, pos.base)
        )


def plan_qkv(
    *,
    dtype_name: str,
    parts: Sequence[QkvPart],
    head_dim: int,
    rotary_dim: int,
    layout: str,
    inplace: bool,
) -> QkvPlan:
    """Plan one launch over up to three tensors (q, then k, then v; v is copied, never rotated).

    Every part has the same batch rows, tokens and channels (``head_dim``); any element strides,
    including negative ones and a non-unit channel stride. In place, no part may have a zero stride on
    an axis of size > 1 (two elements would alias). The heads of a token are split into chunks only
    when tokens times lanes fall short of :data:`MIN_PARALLEL_THREADS` (decode).
    """
    kernel = QKV_KERNEL_FOR_DTYPE.get(dtype_name) if isinstance(dtype_name, str) else None
    if kernel is None:
        raise TypeError(
            f"x must have dtype float32, float16 or bfloat16 for the cupy backend, got {dtype_name!r}"
        )
    if not 1 <= len(parts) <= QKV_PARTS:
        raise ValueError(f"a launch takes 1 to {QKV_PARTS} tensors, got {len(parts)}")
    channels = _channels(head_dim, rotary_dim, layout, inplace)
    n_b, n_s = parts[0].sizes[0], parts[0].sizes[1]
    for part in parts:
        if part.sizes[3] != head_dim:
            raise ValueError(f"x.shape[-1] must equal head_dim={head_dim}, got {part.sizes[3]}")
        if part.sizes[:2] != (n_b, n_s):
            raise ValueError(f"every tensor needs the same batch and tokens, got {[p.sizes for p in parts]}")
        if inplace and any(n > 1 and st == 0 for n, st in zip(part.sizes, part.x_strides, strict=True)):
            raise ValueError(
                "in-place apply needs x without zero strides (aliased elements), "
                f"got strides {part.x_strides}"
            )
    heads = tuple(p.sizes[2] for p in parts) + (0,) * (QKV_PARTS - len(parts))
    pad = ((0, 0, 0, 0),) * (QKV_PARTS - len(parts))
    x_st = sum((p.x_strides for p in parts), ()) + sum(pad, ())
    o_st = sum((p.out_strides for p in parts), ()) + sum(pad, ())
    lanes = channels["n_pairs"] + (channels["n_pass"] if channels["copy_pass"] else 0)
    total = sum(heads)
    tokens = n_b * n_s
    chunks = 1
    if total > 1 and 0 < tokens * lanes < MIN_PARALLEL_THREADS:
        chunks = min(total, -(-MIN_PARALLEL_THREADS // (tokens * lanes)))
    chunk_heads = max(1, -(-total // chunks))
    n_chunks = max(1, -(-total // chunk_heads))
    block, grid = _block_and_grid(lanes, tokens * n_chunks)
    return QkvPlan(
        kernel=kernel,
        n_b=n_b,
        n_s=n_s,
        heads=heads,  # type: ignore[arg-type]
        x_strides=x_st,
        out_strides=o_st,
        n_chunks=n_chunks,
        chunk_heads=chunk_heads,
        block=block,
        grid=grid,
        **channels,
    )


def qkv_shape_struct_dtype() -> np.dtype:
    """NumPy dtype laid out like ``struct RopeQkvShape`` (all int64, so no padding)."""
    return np.dtype([(name, np.int64) for name in QKV_SHAPE_FIELDS])


def pack_qkv_shape(plan: QkvPlan, pos: PositionPlan) -> np.void:
    """The ``RopeQkvShape`` argument as a NumPy structured scalar (CuPy passes it by value)."""
    return np.array([plan.shape_values(pos)], dtype=qkv_shape_struct_dtype())[0]
