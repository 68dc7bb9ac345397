"""An opt-in C++ CPU kernel for the torch adapter's rotation (``kernel="cpp"``).

One pass per element: each row of ``x`` (any float dtype, any strides) is read once, every channel pair
is rotated by RoFormer (arXiv 2104.09864) eq. 34 (``y_a = x_a cos - x_b sin``, ``y_b = x_b cos + x_a
sin``) in float32 or float64 in registers, and the result is rounded once to ``x``'s dtype and written;
channels ``rotary_dim:`` are copied unchanged (out of place). Pairs follow the layout (``"half"``:
(i, i + rd/2), HF ``rotate_half``; ``"interleaved"``: (2i, 2i+1), GPT-J). All rows run in ONE
``at::parallel_for`` region per call, so a call pays one OpenMP barrier, not one per eager op. The
structure is that of vLLM's CPU kernel (vllm-project/vllm, ``csrc/cpu/pos_encoding.cpp``) and
flash-attn's ``rotary_kernel``; the code is ours.

Bits: compiled with ``-O3 -ffp-contract=off`` and no ``-march``, so the compiler never fuses a multiply
and an add: each product is rounded, then the sum, in the compute dtype (the formula as written, as
:func:`~rope_ref.backends._torch_core.rotate_reference` rounds it). On x86-64 the row loops are built
twice, for the baseline and for AVX2 (chosen at run time; no FMA either way), with the same bits.
Conversions are c10's (round to nearest even; float64 to bfloat16/float16 through float32, as
``Tensor.to`` does).

The extension is built on first use with ``torch.utils.cpp_extension.load_inline`` (a C++ compiler and
ninja are needed; tens of seconds once, then cached in torch's extension directory under a name that
carries the hash of the source and flags). No silent fallback: without a compiler the call raises.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from typing import Any

import torch

__all__ = ["CPP_COMPUTE_DTYPES", "CPP_IO_DTYPES", "check_cpp", "extension", "missing_tools", "rotate_cpp"]

#: The dtypes ``x`` may have, and the arithmetic dtypes of the kernel.
CPP_IO_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
CPP_COMPUTE_DTYPES = (torch.float32, torch.float64)

_CFLAGS = ["-O3", "-ffp-contract=off", "-fopenmp"]
_LDFLAGS = ["-fopenmp"]

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#define ROPE_X86 1
#endif

namespace {

constexpr int64_t kChunk = 64;  // pairs per chunk held in L1 between the two loops of a row

// One row: pairs j of the first n = rd/2 channels, a at channel ia, b at ib. The first loop reads a
// chunk of x and computes in C into local arrays, the second rounds to T and writes, so out may be x
// (in place). Each product is rounded, then the difference or sum (-ffp-contract=off).
template <typename T, typename C, bool Inter, bool Unit>
__attribute__((always_inline)) inline void rotate_row(const T* x, T* o, const C* c, const C* s, int64_t n,
                                                      int64_t xs, int64_t os, int64_t cs, int64_t ss) {
  C ya[kChunk], yb[kChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t m = std::min(kChunk, n - j0);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t j = j0 + i;
      const int64_t ia = Inter ? 2 * j : j;
      const int64_t ib = Inter ? 2 * j + 1 : j + n;
      const C a = static_cast<C>(x[Unit ? ia : ia * xs]);
      const C b = static_cast<C>(x[Unit ? ib : ib * xs]);
      const C cj = c[Unit ? j : j * cs];
      const C sj = s[Unit ? j : j * ss];
      const C a_c = a * cj;
      const C b_s = b * sj;
      const C b_c = b * cj;
      const C a_s = a * sj;
      ya[i] = a_c - b_s;
      yb[i] = b_c + a_s;
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t j = j0 + i;
      const int64_t ia = Inter ? 2 * j : j;
      const int64_t ib = Inter ? 2 * j + 1 : j + n;
      o[Unit ? ia : ia * os] = static_cast<T>(ya[i]);
      o[Unit ? ib : ib * os] = static_cast<T>(yb[i]);
    }
  }
}

// What every row needs: the leading axes (sizes, strides of x, out, cos, sin) and the last-axis layout.
template <typename T, typename C>
struct Plan {
  int64_t lead, d, rd, n, xs, os, cs, ss;
  bool unit, inter, copy_rest;
  std::vector<int64_t> size, xst, ost, cst, sst;
  const T* xp;
  T* op;
  const C* cp;
  const C* sp;
};

// Rows [begin, end): the offsets of the first row, then an odometer over the leading axes.
template <typename T, typename C>
__attribute__((always_inline)) inline void rows_body(const Plan<T, C>& p, int64_t begin, int64_t end) {
  std::vector<int64_t> idx(p.lead);
  int64_t xo = 0, oo = 0, co = 0, so = 0;
  int64_t r = begin;
  for (int64_t k = p.lead - 1; k >= 0; --k) {
    idx[k] = r % p.size[k];
    r /= p.size[k];
    xo += idx[k] * p.xst[k];
    oo += idx[k] * p.ost[k];
    co += idx[k] * p.cst[k];
    so += idx[k] * p.sst[k];
  }
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = p.xp + xo;
    T* orow = p.op + oo;
    const C* cr = p.cp + co;
    const C* sr = p.sp + so;
    if (p.unit) {
      if (p.inter) rotate_row<T, C, true, true>(xr, orow, cr, sr, p.n, 1, 1, 1, 1);
      else rotate_row<T, C, false, true>(xr, orow, cr, sr, p.n, 1, 1, 1, 1);
    } else {
      if (p.inter) rotate_row<T, C, true, false>(xr, orow, cr, sr, p.n, p.xs, p.os, p.cs, p.ss);
      else rotate_row<T, C, false, false>(xr, orow, cr, sr, p.n, p.xs, p.os, p.cs, p.ss);
    }
    if (p.copy_rest) {
      for (int64_t j = p.rd; j < p.d; ++j) orow[j * p.os] = xr[j * p.xs];
    }
    for (int64_t k = p.lead - 1; k >= 0; --k) {
      xo += p.xst[k];
      oo += p.ost[k];
      co += p.cst[k];
      so += p.sst[k];
      if (++idx[k] < p.size[k]) break;
      xo -= p.xst[k] * p.size[k];
      oo -= p.ost[k] * p.size[k];
      co -= p.cst[k] * p.size[k];
      so -= p.sst[k] * p.size[k];
      idx[k] = 0;
    }
  }
}

// The same code compiled twice: for the x86-64 baseline (SSE2) and, chosen at run time, for AVX2.
// Neither enables FMA and contraction is off, so both give the same bits (IEEE operations are
// correctly rounded whatever the vector width; the conversions are integer operations).
template <typename T, typename C>
void rows_baseline(const Plan<T, C>& p, int64_t begin, int64_t end) {
  rows_body(p, begin, end);
}

#ifdef ROPE_X86
template <typename T, typename C>
__attribute__((target("avx2"))) void rows_avx2(const Plan<T, C>& p, int64_t begin, int64_t end) {
  rows_body(p, begin, end);
}
#endif

bool avx2_available() {
#ifdef ROPE_X86
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

template <typename T, typename C>
void rotate_rows(const at::Tensor& x, const at::Tensor& out, const at::Tensor& cos, const at::Tensor& sin,
                 int64_t rd, bool inter, bool wide) {
  Plan<T, C> p;
  p.lead = x.dim() - 1;
  p.d = x.size(-1);
  p.rd = rd;
  p.n = rd / 2;
  int64_t rows = 1;
  for (int64_t k = 0; k < p.lead; ++k) {
    p.size.push_back(x.size(k));
    p.xst.push_back(x.stride(k));
    p.ost.push_back(out.stride(k));
    p.cst.push_back(cos.stride(k));
    p.sst.push_back(sin.stride(k));
    rows *= x.size(k);
  }
  if (rows == 0 || p.d == 0) return;
  p.xs = x.stride(-1);
  p.os = out.stride(-1);
  p.cs = cos.stride(-1);
  p.ss = sin.stride(-1);
  p.unit = p.xs == 1 && p.os == 1 && p.cs == 1 && p.ss == 1;
  p.inter = inter;
  p.copy_rest = rd < p.d && !x.is_same(out);
  p.xp = x.data_ptr<T>();
  p.op = out.data_ptr<T>();
  p.cp = cos.data_ptr<C>();
  p.sp = sin.data_ptr<C>();
  void (*body)(const Plan<T, C>&, int64_t, int64_t) = rows_baseline<T, C>;
#ifdef ROPE_X86
  if (wide && avx2_available()) body = rows_avx2<T, C>;
#endif
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(p.d, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { body(p, begin, end); });
}

// out = rotation of x (out may be x itself); cos/sin: (x.shape[:-1], rd/2) in the compute dtype,
// stride 0 where they broadcast. ``wide``: allow the AVX2 build of the loops (same bits). The Python
// side checks the arguments; these checks are a safety net.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& out, const at::Tensor& cos, const at::Tensor& sin,
                  int64_t rd, bool interleaved, bool wide) {
  TORCH_CHECK(x.device().is_cpu() && out.device().is_cpu() && cos.device().is_cpu() && sin.device().is_cpu(),
              "rope_ref cpp kernel: CPU tensors only");
  TORCH_CHECK(x.dim() >= 1 && out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type(),
              "rope_ref cpp kernel: out must have x's shape and dtype");
  TORCH_CHECK(rd >= 0 && rd % 2 == 0 && rd <= x.size(-1), "rope_ref cpp kernel: bad rotary_dim ", rd);
  TORCH_CHECK(cos.dim() == x.dim() && sin.dim() == x.dim() && cos.size(-1) == rd / 2 &&
                  sin.size(-1) == rd / 2 && cos.scalar_type() == sin.scalar_type(),
              "rope_ref cpp kernel: cos/sin must be (x.shape[:-1], rd/2) of one dtype");
  for (int64_t k = 0; k + 1 < x.dim(); ++k) {
    TORCH_CHECK(cos.size(k) == x.size(k) && sin.size(k) == x.size(k),
                "rope_ref cpp kernel: cos/sin not expanded");
  }
  at::assert_no_internal_overlap(out);
  const bool dbl = cos.scalar_type() == at::kDouble;
  TORCH_CHECK(dbl || cos.scalar_type() == at::kFloat,
              "rope_ref cpp kernel: cos/sin must be float32 or float64");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rope_ref_cpp_rotate", [&] {
    if (dbl) rotate_rows<scalar_t, double>(x, out, cos, sin, rd, interleaved, wide);
    else rotate_rows<scalar_t, float>(x, out, cos, sin, rd, interleaved, wide);
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rotate", &rotate, "RoPE eq. 34 in one pass (rope_ref kernel='cpp')",
        py::call_guard<py::gil_scoped_release>());
  m.def("avx2_available", &avx2_available, "whether the AVX2 build of the loops runs on this CPU");
}
"""

_LOCK = threading.Lock()
_MODULE: Any = None


def missing_tools() -> str | None:
    """What the build needs and this machine lacks (a C++ compiler, ninja), or ``None``."""
    from torch.utils import cpp_extension

    cxx = cpp_extension.get_cxx_compiler()
    if shutil.which(cxx) is None:
        return f"a C++ compiler ({cxx!r} is not on PATH; set CXX to one)"
    if not cpp_extension.is_ninja_available():
        return "ninja (pip install ninja)"
    return None


def _build() -> Any:
    """Compile and import the extension (torch caches the build under a name carrying the source hash)."""
    from torch.utils import cpp_extension

    digest = hashlib.sha256((_SOURCE + " ".join(_CFLAGS + _LDFLAGS)).encode()).hexdigest()[:16]
    return cpp_extension.load_inline(
        name=f"rope_ref_cpp_{digest}",
        cpp_sources=_SOURCE,
        extra_cflags=_CFLAGS,
        extra_ldflags=_LDFLAGS,
        verbose=False,
    )


def extension() -> Any:
    """The compiled extension, built on first use (once per process; thread-safe).

    Raises a one-line ``RuntimeError`` naming ``kernel='cpp'`` when a tool is missing or the build fails.
    """
    global _MODULE
    if _MODULE is None:
        with _LOCK:
            if _MODULE is None:
                missing = missing_tools()
                if missing is not None:
                    raise RuntimeError(f"kernel='cpp' needs {missing} to build its C++ extension")
                try:
                    _MODULE = _build()
                except Exception as exc:
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise RuntimeError(f"kernel='cpp' could not build its C++ extension: {first}") from exc
    return _MODULE


def check_cpp(x: torch.Tensor, compute: torch.dtype, name: str = "x") -> None:
    """Raise (one line naming the argument and value) unless the C++ kernel can rotate ``x`` in ``compute``.

    ``x``: a CPU tensor of a dtype in :data:`CPP_IO_DTYPES`; ``compute``: one of :data:`CPP_COMPUTE_DTYPES`.
    """
    if x.device.type != "cpu":
        raise ValueError(f"kernel='cpp' runs on CPU tensors, got {name} on {x.device}")
    if x.dtype not in CPP_IO_DTYPES:
        raise TypeError(f"kernel='cpp' rotates {CPP_IO_DTYPES}, got {name}.dtype={x.dtype}")
    if compute not in CPP_COMPUTE_DTYPES:
        raise ValueError(
            f"kernel='cpp' computes in float32 or float64, got compute_dtype={compute} "
            "(use kernel='torch' for arithmetic in the input's half precision)"
        )


def rotate_cpp(
    x: torch.Tensor,
    out: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rd: int,
    *,
    wide: bool = True,
) -> torch.Tensor:
    """Eq. 34 of ``x`` into ``out`` (``x`` itself for in place, else a tensor of x's shape and dtype).

    ``cos``/``sin``: half-width tables in the compute dtype (float32 or float64) that broadcast against
    ``x.shape[:-1]``; they are expanded (stride 0), never materialized. Reads and writes only the
    elements of the two views, through their strides; channels ``rd:`` are copied when out of place.
    ``wide``: on x86-64 CPUs with AVX2, run the loops' AVX2 build (same bits as the baseline build;
    ``False`` is for the tests that check so).
    """
    check_cpp(x, cos.dtype)
    if sin.dtype != cos.dtype:
        raise TypeError(f"kernel='cpp' needs cos and sin of one dtype, got sin.dtype={sin.dtype}")
    shape = tuple(x.shape[:-1]) + (rd // 2,)
    return extension().rotate(x, out, cos.expand(shape), sin.expand(shape), rd, layout == "interleaved", wide)
