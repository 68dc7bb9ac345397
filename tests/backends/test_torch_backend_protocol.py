"""The torch adapter behind the conformance protocol (``backends/_torch_backend.py``): its declared
policies, names, conversions and the options each operation passes on. Expected values are written out
(policies, dtypes, the dynamic-NTK base by its formula) or come from a rotation by the negated angle."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rope_ref
from rope_ref.scaling import DynamicNTK

torch = pytest.importorskip("torch")
from rope_ref.backends._torch_backend import POLICIES, TorchBackend  # noqa: E402

DYN = rope_ref.RopeConfig(8, layout="half", base=10000.0, scaling=DynamicNTK(2.0, 16))


def dyn_inv_freq(length: int) -> list[float]:
    """Dynamic NTK at L > 16: base' = 1e4 (1 + 2 (L - 16) / 16)^(8/6), inv_freq_i = base'^(-2i/8)."""
    base = 10000.0 * (1 + 2.0 * (length - 16) / 16) ** (8 / 6)
    return [base ** (-2.0 * i / 8) for i in range(4)]


def test_policies_are_the_documented_ones():
    got = {k: (p.io_dtype, p.angle_dtype, p.compute_dtype) for k, p in POLICIES.items()}
    assert got == {
        "float64": ("float64", "float64", "float64"),
        "float32": ("float32", "float32", "float32"),
        "float16": ("float16", "float32", "float32"),
        "bfloat16": ("bfloat16", "float32", "float32"),
    }
    assert TorchBackend().precision == POLICIES["float32"]  # the default
    assert TorchBackend("bf16")._angle == torch.float32 and TorchBackend("fp64")._angle == torch.float64


def test_names_and_options():
    assert TorchBackend().name == "torch"
    assert TorchBackend(kernel="triton").name == "torch+triton"  # named at construction; runs need CUDA
    assert TorchBackend(device="meta").name == "torch:meta"
    assert TorchBackend(kernel="cpp").name == "torch:cpp"  # the registry's name; nothing is built here
    with pytest.raises(ValueError, match="autograd must be 'function' or 'native', got 'fast'"):
        TorchBackend(autograd="fast")
    assert TorchBackend(autograd="native").autograd == "native"


def test_conversions_copy_and_keep_bfloat16_exact():
    b = TorchBackend("bf16")
    host = np.array([1.0, 2.0, 3.0])
    t = b.from_numpy(host)
    host[0] = 99.0
    assert t.tolist() == [1.0, 2.0, 3.0]  # a copy, not a view of the caller's array
    wide = 2.0**20 * (1 + 2.0**-7)  # exact in bfloat16 and float32, above float16's range
    bf = b.from_numpy(np.array([wide, 3e38]), "bfloat16")
    back = b.to_numpy(bf)
    assert back.dtype == np.float32 and back[0] == wide and back[1] == float(torch.tensor(3e38).bfloat16())


@pytest.mark.parametrize(("precision", "dtype"), [("fp64", torch.float64), ("fp16", torch.float32)])
def test_tables_in_the_angle_dtype_and_seq_len_passed_on(precision, dtype):
    b = TorchBackend(precision)
    inv = b.inv_freq(DYN, 40)
    assert inv.dtype == dtype
    np.testing.assert_allclose(
        inv.double().numpy(), dyn_inv_freq(40), rtol=1e-6 if dtype == torch.float32 else 1e-14
    )
    cos, _ = b.cos_sin(torch.tensor([3, 1]), DYN, seq_len=40)  # max + 1 would be 4: unscaled
    assert cos.dtype == dtype
    want = [[math.cos(p * f) for f in dyn_inv_freq(40)] for p in (3, 1)]
    np.testing.assert_allclose(
        cos.double().numpy(), want, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-14
    )


def test_apply_and_vjp_pass_the_length_on():
    b = TorchBackend("fp64")
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    pos = torch.tensor([3, 1])
    y = b.apply(x, pos, DYN, seq_len=40)
    np.testing.assert_allclose(y.numpy(), rope_ref.apply(x.numpy(), pos.numpy(), DYN, seq_len=40), atol=1e-14)
    # VJP without seq_len: the length is max(positions) + 1 = 41 (not last + 1 = 4); the VJP of a rotation
    # is the rotation by the negated angle at that length
    pos = torch.tensor([40, 3])
    g = torch.randn(2, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = b.apply_vjp(x, pos, DYN, g)
    want = rope_ref.apply(g.numpy(), -pos.numpy(), DYN, seq_len=41)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-14)
    # a float64 gradient handed to a float32 backend: cast to the output dtype
    b32 = TorchBackend("fp32")
    got32 = b32.apply_vjp(x.float(), pos, DYN, g)
    assert got32.dtype == torch.float32


def test_other_operations_use_the_policy_angle_dtype():
    b = TorchBackend("fp64")
    cfg = rope_ref.RopeConfig(8, layout="half")
    d = b.decay_upper_bound(torch.tensor([0.0, 5.0]), cfg)
    assert d.dtype == torch.float64
    # ChatGLM's float64 path: angles in float64 at 2**24 + 1 (float32 would round the position)
    x = torch.ones(1, 16, dtype=torch.float64)
    far = torch.tensor([2**24 + 1])
    y = b.chatglm_apply_2d(x, far, torch.tensor([0]), base=10000.0, precision="float64")
    assert y[0, 0].item() == pytest.approx(math.cos(2**24 + 1) - math.sin(2**24 + 1), abs=1e-9)
    spec = rope_ref.mrope.mrope(rope_ref.RopeConfig(16, layout="half"), (2, 3, 3))
    xm = torch.ones(1, 16, dtype=torch.float64)
    ym = b.multiaxis_apply(xm, torch.tensor([[2**24 + 1], [0], [0]]), spec)
    assert ym[0, 0].item() == pytest.approx(math.cos(2**24 + 1) - math.sin(2**24 + 1), abs=1e-9)


def test_vision_ids_follow_the_convention():
    """Qwen2-VL takes (t, h, w) grids and merges 2x2 patches; Pixtral takes (h, w) grids."""
    from rope_ref import vision_rope

    b = TorchBackend()
    thw, hw = np.array([[1, 4, 6]]), np.array([[4, 6]])
    q = b.vision_ids(torch.from_numpy(thw), convention="qwen2-vl", spatial_merge_size=2)
    assert q.tolist() == vision_rope.qwen2_vl_ids(thw, 2).tolist()
    p = b.vision_ids(torch.from_numpy(hw), convention="pixtral", spatial_merge_size=2)
    assert p.tolist() == vision_rope.pixtral_ids(hw).tolist()
