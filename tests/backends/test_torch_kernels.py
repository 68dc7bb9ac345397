"""The torch adapter's kernel-shape functions (``backends/_torch_kernels.py``): q and k merged into one view
only when they really are neighbours in one buffer, the option checks of every path, GQA defaults.
Expected values: the float64 oracle (``rope_ref.apply`` with ``axes=``, tested on its own against
explicit rotations in ``tests/oracle``)."""

from __future__ import annotations

import numpy as np
import pytest

import rope_ref

torch = pytest.importorskip("torch")
import rope_ref.backends.torch as rt  # noqa: E402  (after the torch availability check)

F64 = torch.float64

CFG = rope_ref.RopeConfig(8, layout="half", rotary_dim=6)
POS = np.array([[0, 3, 7, 1, 12], [5, 9, 2, 30, 4]])  # (B, S) = (2, 5), a different row each


def randn(*shape: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def oracle(t: torch.Tensor) -> np.ndarray:
    return rope_ref.apply(t.double().numpy(), POS, CFG, axes="bshd")


@pytest.mark.parametrize("inplace", [False, True])
def test_q_and_k_from_two_buffers_whose_offsets_line_up(inplace):
    """q is heads 0..5 of one (B, S, 8, D) buffer, k heads 6..7 of ANOTHER such buffer: same strides, and k's
    offset is exactly where q's heads end, but the memory is not q's neighbour."""
    one, two = randn(2, 5, 8, 8, seed=1), randn(2, 5, 8, 8, seed=2)
    q, k = one[:, :, :6], two[:, :, 6:]
    want_q, want_k = oracle(q), oracle(k)
    qr, kr = rt.apply_qk(q, k, torch.from_numpy(POS), CFG, axes="bshd", inplace=inplace, angle_dtype=F64)
    np.testing.assert_allclose(qr.numpy(), want_q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(kr.numpy(), want_k, rtol=0, atol=1e-13)


@pytest.mark.parametrize("inplace", [False, True])
def test_q_and_k_with_a_gap_between_them(inplace):
    """q heads 0..3 and k heads 5..6 of one buffer: head 4 (and 7) lie between or after and stay untouched."""
    buf = randn(2, 5, 8, 8, seed=3)
    before = buf.clone()
    q, k = buf[:, :, :4], buf[:, :, 5:7]
    want_q, want_k = oracle(q), oracle(k)
    qr, kr = rt.apply_qk(q, k, torch.from_numpy(POS), CFG, axes="bshd", inplace=inplace, angle_dtype=F64)
    np.testing.assert_allclose(qr.numpy(), want_q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(kr.numpy(), want_k, rtol=0, atol=1e-13)
    assert torch.equal(buf[:, :, 4], before[:, :, 4]) and torch.equal(buf[:, :, 7], before[:, :, 7])


def test_q_and_k_with_different_strides_are_not_merged():
    """k is heads 6..7 of a buffer with a different (padded) layout that happens to start where q ends."""
    big = randn(2 * 5 * 8 * 8 + 200, seed=4)
    q = big[: 2 * 5 * 8 * 8].view(2, 5, 8, 8)[:, :, :6]
    k = big.as_strided((2, 5, 2, 8), (80, 16, 8, 1), q.storage_offset() + 6 * 8)
    want_q, want_k = oracle(q), oracle(k)
    qr, kr = rt.apply_qk(q, k, torch.from_numpy(POS), CFG, axes="bshd", angle_dtype=F64)
    np.testing.assert_allclose(qr.numpy(), want_q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(kr.numpy(), want_k, rtol=0, atol=1e-13)


def test_every_path_checks_its_options():
    x = randn(2, 5, 3, 8)
    pos = torch.from_numpy(POS)
    for fn in (
        lambda **kw: rt.apply(x, pos, CFG, axes="bshd", **kw),
        lambda **kw: rt.apply_qk(x, x[:, :, :1], pos, CFG, axes="bshd", **kw),
        lambda **kw: rt.apply_qkv(
            torch.cat((x, x[:, :, :2]), 2), pos, CFG, axes="bshd", num_heads_q=3, num_heads_kv=1, **kw
        ),
    ):
        with pytest.raises(ValueError, match="angle_dtype must be torch.float32 or torch.float64"):
            fn(angle_dtype=torch.float16)
        with pytest.raises(TypeError, match="inplace must be a bool, got int"):
            fn(inplace=1)
        with pytest.raises(TypeError, match="inverse must be a bool, got str"):
            fn(inverse="yes")
        with pytest.raises(ValueError, match="compute_dtype must be None"):
            fn(compute_dtype="float32")
    with pytest.raises(
        ValueError, match="q and k must share dtype and device, got torch.float64/cpu and torch.float32/cpu"
    ):
        rt.apply_qk(x, x[:, :, :1].float(), pos, CFG, axes="bshd")


def test_kernel_shape_path_uses_the_compute_dtype():
    x = randn(2, 5, 3, 8, seed=5, dtype=torch.bfloat16)
    pos = torch.from_numpy(POS)
    narrow = rt.apply(x, pos, CFG, axes="bshd", compute_dtype="input")
    assert not torch.equal(narrow, rt.apply(x, pos, CFG, axes="bshd"))
    assert torch.equal(narrow, rt.apply(x, pos[:, :, None], CFG, compute_dtype="input"))


def test_per_head_positions_are_refused_for_q_and_k():
    x = randn(2, 5, 6, 8)
    per_head = torch.zeros(2, 5, 6, dtype=torch.int64)
    with pytest.raises(ValueError, match="positions"):
        rt.apply_qk(x, x[:, :, :2], per_head, CFG, axes="bshd")


def test_qkv_defaults_to_as_many_kv_heads_as_q_heads():
    qkv = randn(2, 5, 9, 8, seed=6)  # 3 q, 3 k, 3 v heads
    out = rt.apply_qkv(qkv, torch.from_numpy(POS), CFG, axes="bshd", num_heads_q=3, angle_dtype=F64)
    np.testing.assert_allclose(out[:, :, :6].numpy(), oracle(qkv[:, :, :6]), rtol=0, atol=1e-13)
    assert torch.equal(out[:, :, 6:], qkv[:, :, 6:])
    with pytest.raises(ValueError, match="apply_qkv needs axes="):
        rt.apply_qkv(qkv, torch.from_numpy(POS), CFG, num_heads_q=3)
