"""``kernel=`` of the torch adapter: validation, lazy import of triton, and the Triton kernel's tests
run under Triton's interpreter on machines without a GPU (a subprocess, since the interpreter must be
switched on before ``triton`` is imported)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fresh_interpreter import modules_loaded_by

import rope_ref

torch = pytest.importorskip("torch")
rt = pytest.importorskip("rope_ref.backends.torch")
from rope_ref.backends import _torch_triton as tt  # noqa: E402

HAVE_TRITON = importlib.util.find_spec("triton") is not None
KERNEL_TESTS = Path(__file__).with_name("test_torch_triton_kernel.py")
CFG = rope_ref.RopeConfig(8, layout="half")


def _interpreting() -> bool:
    return HAVE_TRITON and tt._interpreting()


def test_unknown_kernel_is_refused_everywhere():
    x = torch.randn(2, 8)
    msg = r"kernel must be one of \('torch', 'triton', 'cpp'\), got 'cuda'"
    with pytest.raises(ValueError, match=msg):
        rt.apply(x, torch.arange(2), CFG, kernel="cuda")
    with pytest.raises(ValueError, match=msg):
        rt.rotate(x, torch.ones(2, 4), torch.zeros(2, 4), layout="half", kernel="cuda")
    with pytest.raises(ValueError, match=msg):
        rt.RotaryEmbedding(CFG, kernel="cuda")
    ok, reason = rt.available("cpu", kernel="cuda")
    assert not ok and "'cuda'" in reason


@pytest.mark.skipif(_interpreting() or torch.cuda.is_available(), reason="the Triton kernel can run here")
def test_triton_kernel_on_cpu_tensors_says_why_it_cannot_run():
    x = torch.randn(2, 8)
    expected = "CUDA tensors" if HAVE_TRITON else "needs the triton package"
    with pytest.raises(RuntimeError, match=expected):
        rt.apply(x, torch.arange(2), CFG, kernel="triton")
    ok, reason = rt.available("cpu", kernel="triton")
    assert not ok and expected in reason
    from rope_ref.conformance.registry import BackendUnavailable, get_backend

    with pytest.raises(BackendUnavailable):
        get_backend("torch:triton")


@pytest.mark.slow
def test_eager_kernel_never_loads_the_triton_kernels():
    """Our kernels (and the JIT) load on first use only. (``torch._dynamo`` itself imports ``triton``
    when it is installed, so ``triton`` in ``sys.modules`` says nothing about this adapter.)"""
    code = (
        "import torch, rope_ref, rope_ref.backends.torch as rt; cfg = rope_ref.RopeConfig(8, layout='half')\n"
        "rt.apply(torch.randn(3, 8), torch.arange(3), cfg)\n"
        "rt.RotaryEmbedding(cfg)(torch.randn(3, 8), torch.arange(3))"
    )
    assert modules_loaded_by(code, ["rope_ref.backends._triton_kernels"]) == []


@pytest.mark.parametrize(
    "shape,strides,sizes,merged",
    [
        # contiguous (B, S, H) rows of x and out, tables broadcast over heads: B and S merge everywhere
        ((2, 5, 3), [(120, 24, 8), (5 * 4, 4, 0), (15 * 8, 24, 8)], [10, 3], [[24, 8], [4, 0], [24, 8]]),
        # unit axes vanish; a transposed view does not merge
        ((1, 4, 1, 6), [(999, 8, 7, 32)], [4, 6], [[8, 32]]),
        # broadcast runs merge (stride 0 == 0 * size)
        ((3, 4), [(0, 0), (4, 1)], [12], [[0], [1]]),
    ],
)
def test_row_axes_merge_only_common_runs(shape, strides, sizes, merged):
    assert tt._row_axes(shape, strides) == (sizes, merged)


@pytest.mark.parametrize(
    "rd,head_dim,interpreted,rows",
    [
        # (pairs, pass-through) padded to powers of two: (64, 0); 1024 / 64 = 16 rows compiled, 4096 / 64 = 64
        (128, 128, False, 16),
        (128, 128, True, 64),
        # (16, 64): the pass-through block is the wider; 1024 / 64 and 4096 / 64 (capped at 64)
        (32, 96, False, 16),
        (32, 96, True, 64),
        # (4, 0): 1024 / 4 = 256 and 4096 / 4 = 1024, both capped at 64 rows
        (8, 8, False, 64),
        # (256, 0): 1024 / 256 = 4 compiled, 4096 / 256 = 16 interpreted
        (512, 512, False, 4),
        (512, 512, True, 16),
    ],
)
def test_tile_rows_follow_the_tile_size_of_the_mode(monkeypatch, rd, head_dim, interpreted, rows):
    """Compiled tiles hold about 1024 pairs (measured fastest on an H100), interpreted ones about 4096."""
    monkeypatch.setattr(tt, "_interpreting", lambda: interpreted)
    assert tt.TILE_PAIRS == {"compiled": 1024, "interpreted": 4096}
    meta = tt.kernel_meta("half", rd, head_dim, torch.float32)
    assert meta["ROWS"] == rows
    assert (meta["BLOCK_N"], meta["BLOCK_P"]) == (
        1 << (rd // 2 - 1).bit_length(),
        0 if rd == head_dim else 1 << (head_dim - rd - 1).bit_length(),
    )


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install 'rope-ref[triton]')")
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the kernel tests run compiled, in-process")
@pytest.mark.skipif(_interpreting(), reason="already under the interpreter: the kernel tests run in-process")
def test_kernel_tests_pass_under_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(KERNEL_TESTS)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    tail = "\n".join((out.stdout + out.stderr).splitlines()[-30:])
    assert out.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail, tail


_PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64"}


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install 'rope-ref[triton]')")
@pytest.mark.skipif(_interpreting(), reason="under TRITON_INTERPRET=1 the kernel is not a JIT function")
@pytest.mark.parametrize(
    "arch,layout,x_dtype",
    # every dtype and layout for Hopper (sm_90); Ampere (sm_80) once, bf16 (about 2-4 s per compile)
    [(90, layout, dt) for layout in ("half", "interleaved") for dt in _PTR] + [(80, "half", torch.bfloat16)],
    ids=lambda v: str(v).replace("torch.", ""),
)
def test_kernel_compiles_to_cuda_without_a_gpu(arch, layout, x_dtype):
    """Ahead-of-time compile of the kernel (Triton -> PTX -> cubin with the wheel's ptxas) for sm_80 and
    sm_90, with the launch's own options: this needs no GPU, so compile errors show up in CI.

    No fused multiply-add may appear: the launch disables FP fusion so that the compiled kernel rounds
    ``a*c - b*s`` as written (the interpreter's bits).
    """
    import triton
    from rope_ref.backends._triton_kernels import rope_rows
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    compute = torch.float64 if x_dtype == torch.float64 else torch.float32
    meta = tt.kernel_meta(layout, 96, 128, compute)  # partial rotary: the pass-through copy is compiled too
    table = _PTR[compute]
    pointers = {"x_ptr": _PTR[x_dtype], "out_ptr": _PTR[x_dtype], "cos_ptr": table, "sin_ptr": table}
    signature = {
        name: pointers.get(name, "constexpr" if name in meta else "i64") for name in rope_rows.arg_names
    }
    constexprs = {(rope_rows.arg_names.index(k),): v for k, v in meta.items()}
    options = {k: v for k, v in tt.LAUNCH_OPTIONS.items()}
    compiled = triton.compile(
        ASTSource(rope_rows, signature, constexprs=constexprs),
        target=GPUTarget("cuda", arch, 32),
        options=options,
    )
    ptx = compiled.asm["ptx"]
    assert compiled.asm["cubin"], "ptxas produced no cubin"
    assert "fma.rn" not in ptx
    assert f".target sm_{arch}" in ptx
