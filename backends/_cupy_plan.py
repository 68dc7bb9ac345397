"""Host-side launch planning for the CuPy kernels in ``rope_kernels.cu`` (pure Python, no cupy).

Everything that decides *how* the fused kernel runs lives here so it can be unit-tested on a
machine without a GPU: which kernel a dtype selects, how the leading axes of ``x`` are collapsed
and split into per-thread "outer" rows and in-thread "inner" loops, the packed ``RopeShape``
struct, and the grid and block sizes. :mod:`rope_ref.backends.cupy` only turns a plan into a launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
class ApplyPlan:
    """One launch of an apply kernel: the packed shape, the scalar parameters, grid and block."""

    kernel: str
    n_outer: int
    outer_sizes: tuple[int, ...]
    outer_x: tuple[int, ...]
    outer_out: tuple[int, ...]
    outer_pos: tuple[int, ...]
    inner_sizes: tuple[int, int]
    inner_x: tuple[int, int]
    inner_out: tuple[int, int]
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
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be even and in 2..head_dim={head_dim}, got {rotary_dim}")
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
    n_pairs = rotary_dim // 2
    n_pass = head_dim - rotary_dim
    copy_pass = n_pass > 0 and not inplace
    lanes = n_pairs + (n_pass if copy_pass else 0)

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
        n_pairs=n_pairs,
        n_pass=n_pass,
        half_layout=layout == "half",
        copy_pass=copy_pass,
        block=block,
        grid=grid,
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
