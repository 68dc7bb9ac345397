"""The torch adapter's fused Triton kernel (``kernel="triton"``), where it can run.

On a CUDA machine with ``triton`` these run compiled on the GPU. Elsewhere they need Triton's
interpreter (``TRITON_INTERPRET=1`` before ``triton`` is imported), which runs the same kernel source on
CPU tensors; ``tests/backends/test_torch_triton.py`` launches this file that way in a subprocess.
Expected values come from the float64 oracle (the golden set) and from the eager kernel, never from the
Triton kernel itself.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import rope_ref

torch = pytest.importorskip("torch")
rt = pytest.importorskip("rope_ref.backends.torch")
from rope_ref.backends import _torch_triton as tt  # noqa: E402

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (pip install 'rope-ref[triton]')", allow_module_level=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_ok, _reason = tt.triton_status(torch.device(DEVICE))
if not _ok:
    pytest.skip(_reason, allow_module_level=True)


@pytest.fixture
def launches(monkeypatch):
    """Count the Triton kernel's launches (so a test knows the kernel, not the eager path, ran)."""
    triton, kernel = tt._kernel()
    grids: list = []

    class Counting:
        def __getitem__(self, grid):
            grids.append(grid)
            return kernel[grid]

    monkeypatch.setattr(tt, "_kernel", lambda: (triton, Counting()))
    return grids


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "fp64"])
def test_suite_passes_with_the_triton_kernel(precision, launches):
    from rope_ref.conformance.runner import Runner
    from shipped_golden import shipped_cases

    backend = rt.make_backend(precision=precision, device=DEVICE, kernel="triton")
    report = Runner(backend, precision=precision).run(shipped_cases())
    counts = report.counts()
    assert counts["passed"] > 50
    assert counts["unsupported"] == 0
    failed = {r.case_id: f"{r.kind}: {r.message}" for r in report.failures}
    assert not failed, failed
    assert len(launches) > 40  # apply, apply_vjp and ChatGLM's 2D cases went through the kernel


def _oracle(x: torch.Tensor, pos, cfg) -> np.ndarray:
    return rope_ref.apply(x.double().cpu().numpy(), np.asarray(pos), cfg)


# (x shape, positions shape, a view to take) covering row broadcasting and strides the kernel merges or not
LAYOUT_CASES = [
    ((2, 37, 3, 16), (37, 1), None),  # (B, S, H, D), positions per sequence index
    ((2, 3, 37, 16), (2, 1, 37), None),  # (B, H, S, D), positions per row
    ((2, 37, 3, 16), (2, 1, 37), "transpose"),  # a non-contiguous view (B, H, S, D) of (B, S, H, D)
    ((4, 37, 3, 32), (37, 1), "every-other-channel"),  # last-axis stride 2
    ((2, 2, 5, 3, 2, 16), (2, 1, 5, 1, 2), None),  # 5 leading axes that do not merge
    ((16,), (), None),  # one row
    ((0, 3, 16), (0, 1), None),  # empty
]


def _view(x: torch.Tensor, how: str | None) -> torch.Tensor:
    if how == "transpose":
        return x.transpose(1, 2)
    if how == "every-other-channel":
        return x[..., ::2]
    return x


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape,pos_shape,view", LAYOUT_CASES)
def test_triton_matches_eager_and_oracle(layout, rotary_dim, dtype, shape, pos_shape, view):
    gen = torch.Generator().manual_seed(7)
    x = _view(torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE), view)
    cfg = rope_ref.RopeConfig(x.shape[-1], layout=layout, rotary_dim=min(rotary_dim, x.shape[-1]))
    pos = torch.randint(0, 3000, pos_shape, generator=gen)
    lead = tuple(x.shape[:-1])
    assert torch.broadcast_shapes(tuple(pos.shape), lead) == lead
    y = rt.apply(x, pos.to(DEVICE), cfg, kernel="triton")
    y_eager = rt.apply(x, pos.to(DEVICE), cfg, kernel="torch")
    assert y.dtype == x.dtype and y.shape == x.shape and y.is_contiguous()
    rd = cfg.rotary_dim
    assert torch.equal(y[..., rd:], x[..., rd:]), "pass-through channels must be bit-identical"
    # one rounding at the output from float32 (float64) arithmetic: within 1 ulp of the output dtype
    # of the eager kernel (FMA contraction on a GPU may move the float32 result by an ulp or two)
    eps = torch.finfo(dtype).eps
    scale = x.double().abs().amax().item() if x.numel() else 0.0
    diff = (y.double() - y_eager.double()).abs().amax().item() if x.numel() else 0.0
    assert diff <= 2 * eps * max(scale, 1e-30) * 2, (diff, scale)
    want = _oracle(x, pos, cfg)
    got = y.double().cpu().numpy()
    # float32 angles at positions < 3000: |angle error| <= 3000 * 2^-24 rad, plus the output rounding
    bound = (3000 * 2.0**-24 * 2 + 4 * max(eps, 2.0**-24)) * max(scale, 1e-30) * 2
    assert np.all(np.abs(got - want) <= bound), float(np.abs(got - want).max(initial=0.0))


def test_triton_kernel_rounds_bf16_to_nearest_even():
    """The float32 result is rounded to bfloat16 to nearest even, as torch's ``.to`` does.

    With ``sin = 0`` each output is one float32 product ``x * cos`` (FMA contraction cannot change it),
    so the expected bits are exactly torch's conversion of that product. About half of the products
    fall between two bfloat16 numbers, where truncation (Triton's interpreter's own conversion) differs.
    """
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4096, 8, generator=gen).to(torch.bfloat16)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=torch.bfloat16)
    x[1, 0] = torch.finfo(torch.bfloat16).max  # rounds up to inf when cos is close to 1
    cos = torch.rand(4096, 4, generator=gen) * 2 - 1
    cos[1, 0] = 1.0 - 2.0**-20
    # a NaN whose payload fills the mantissa: adding the rounding bias must not carry it into -0.0
    cos[2, 0] = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32)
    sin = torch.zeros(4096, 4)
    y = rt.rotate(x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), layout="half", kernel="triton")
    xa, xb = x[:, :4].float(), x[:, 4:].float()
    # eq. 34 in float32 (inf * 0 = nan reaches the partner channel, as in every form of the formula)
    want = torch.cat((xa * cos - xb * sin, xb * cos + xa * sin), dim=-1).to(torch.bfloat16)
    torch.testing.assert_close(y.cpu(), want, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(y[2, 0]) and torch.isnan(y[2, 4])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_triton_gradients(layout, launches):
    """gradcheck in float64 through RotateFunction whose forward and backward use the Triton kernel."""
    cfg = rope_ref.RopeConfig(8, layout=layout, rotary_dim=6)
    x = torch.randn(2, 3, 8, dtype=torch.float64, device=DEVICE, requires_grad=True)
    pos = torch.arange(3, device=DEVICE) * 3 - 2
    fn = lambda t: rt.apply(t, pos, cfg, angle_dtype=torch.float64, kernel="triton")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))  # the backward is itself a RotateFunction
    n_forward_backward = len(launches)
    assert n_forward_backward > 0
    y = fn(x)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    y_e = rt.apply(x, pos, cfg, angle_dtype=torch.float64, autograd="native")
    (g_e,) = torch.autograd.grad(y_e, x, torch.ones_like(y_e))
    torch.testing.assert_close(g, g_e, rtol=0, atol=1e-14)


def test_tables_on_another_device_or_not_floating_are_refused():
    x = torch.randn(2, 8, device=DEVICE)
    other = "cpu" if DEVICE == "cuda" else "meta"
    with pytest.raises(ValueError, match=f"cos is on {other}"):
        rt.rotate(x, torch.ones(2, 4, device=other), torch.zeros(2, 4, device=DEVICE), layout="half",
                  kernel="triton")  # fmt: skip
    with pytest.raises(TypeError, match="sin must be a floating tensor"):
        rt.rotate(x, torch.ones(2, 4, device=DEVICE), torch.zeros(2, 4, dtype=torch.long, device=DEVICE),
                  layout="half", kernel="triton")  # fmt: skip


def test_float16_and_bfloat16_arithmetic_are_refused():
    x = torch.randn(2, 8, dtype=torch.float16, device=DEVICE)
    cfg = rope_ref.RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="compute_dtype=torch.float16"):
        rt.apply(x, torch.arange(2), cfg, kernel="triton", compute_dtype="input")
    with pytest.raises(ValueError, match="round twice"):
        rt.apply(x.bfloat16(), torch.arange(2), cfg, kernel="triton", compute_dtype=torch.float64)


def test_module_and_chatglm_use_the_kernel(launches):
    cfg = rope_ref.preset("llama-2-7b") if "llama-2-7b" in rope_ref.preset_names() else None
    cfg = cfg or rope_ref.RopeConfig(128, layout="half")
    module = rt.RotaryEmbedding(cfg, kernel="triton", max_position=64)
    x = torch.randn(1, 64, 2, cfg.head_dim, device=DEVICE)
    pos = torch.arange(64, device=DEVICE)[:, None]
    torch.testing.assert_close(module(x, pos), rt.apply(x, pos, cfg))
    assert "kernel='triton'" in repr(module)
    ids = torch.tensor([[0, 1, 2, 3]], device=DEVICE)
    blk = torch.tensor([[0, 0, 1, 2]], device=DEVICE)
    xq = torch.randn(1, 4, 2, 16, device=DEVICE)
    two_d = rt.chatglm_apply_2d(xq, ids[..., None], blk[..., None], base=10000.0, precision="float64",
                                kernel="triton")  # fmt: skip
    eager = rt.chatglm_apply_2d(xq, ids[..., None], blk[..., None], base=10000.0, precision="float64")
    torch.testing.assert_close(two_d, eager)
    assert len(launches) == 3


@pytest.mark.slow
def test_compile_with_the_triton_kernel_traces_the_functional_form():
    """``torch.compile(fullgraph=True)`` with ``kernel="triton"``: no graph break, eager results."""
    cfg = rope_ref.RopeConfig(16, layout="half", rotary_dim=12)
    fn = torch.compile(lambda t, p: rt.apply(t, p, cfg, kernel="triton"), fullgraph=True)
    x = torch.randn(2, 6, 3, 16, device=DEVICE)
    pos = torch.arange(6, device=DEVICE)[:, None]
    torch.testing.assert_close(fn(x, pos), rt.apply(x, pos, cfg))
