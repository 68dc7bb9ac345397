"""The torch adapter's module and table-taking functions (``backends/_torch_module.py``): ``rotate``,
``apply_rotary_pos_emb``, ``RotaryEmbedding``'s arguments, its cache (growth, cap, eviction, copies).
Expected values: an explicit float64 rotation written here, sizes worked out by hand."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import rope_ref
from rope_ref.scaling import DynamicNTK

torch = pytest.importorskip("torch")
import rope_ref.backends.torch as rt  # noqa: E402  (after the torch availability check)
from rope_ref.backends._torch_tables import freq_constants  # noqa: E402


def randn(*shape: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def half_tables(pos, rd: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Half-width float64 cos/sin of pos * base^(-2i/rd), written out."""
    ang = torch.tensor(
        [[p * base ** (-2.0 * i / rd) for i in range(rd // 2)] for p in pos], dtype=torch.float64
    )
    return torch.cos(ang), torch.sin(ang)


def loop(x: torch.Tensor, pos, rd: int, layout: str, base: float = 10000.0) -> np.ndarray:
    """RoFormer eq. 34 pair by pair (x: (rows, D)); channels rd: pass through."""
    out = x.numpy().copy()
    for r, p in enumerate(pos):
        for i in range(rd // 2):
            t = p * base ** (-2.0 * i / rd)
            a, b = (i, i + rd // 2) if layout == "half" else (2 * i, 2 * i + 1)
            xa, xb = float(x[r, a]), float(x[r, b])
            out[r, a] = xa * math.cos(t) - xb * math.sin(t)
            out[r, b] = xb * math.cos(t) + xa * math.sin(t)
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotate_partial_width_from_the_tables(layout):
    pos = [0, 3, 11, 40, 7]
    x = randn(5, 10, seed=1)
    cos, sin = half_tables(pos, 6)
    y = rt.rotate(x, cos, sin, layout=layout)
    np.testing.assert_allclose(y.numpy(), loop(x, pos, 6, layout), rtol=0, atol=1e-14)
    assert torch.equal(y[:, 6:], x[:, 6:])


def test_rotate_refuses_bad_tables_and_layouts():
    x = randn(5, 8)
    cos, sin = half_tables(range(5), 6)
    with pytest.raises(ValueError, match="layout must be 'half' or 'interleaved', got 'neox'"):
        rt.rotate(x, cos, sin, layout="neox")
    with pytest.raises(ValueError, match=r"cos and sin must have the same shape, got \(5, 3\) and \(5, 2\)"):
        rt.rotate(x, cos, sin[:, :2], layout="half")
    with pytest.raises(ValueError, match=r"cos and sin must have the same shape, got \(5, 3\) and \(1, 3\)"):
        rt.rotate(x, cos, sin[:1], layout="half")
    wide_c, wide_s = half_tables(range(5), 10)
    with pytest.raises(ValueError, match=r"2 \* cos.shape\[-1\] = 10 must be in 2..x.shape\[-1\] = 8"):
        rt.rotate(x, wide_c, wide_s, layout="half")
    with pytest.raises(ValueError, match=r"2 \* cos.shape\[-1\] = 0 must be in 2..x.shape\[-1\] = 8"):
        rt.rotate(x, cos[:, :0], sin[:, :0], layout="half")


def test_hf_drop_in_unsqueeze_dim_and_compute_dtype_reach_q_and_k():
    """bshd q (Hq = 6) and k (Hk = 2) with S = 5 != H: the tables (B, S, D/2) go in at unsqueeze_dim=2."""
    q, k = randn(2, 5, 6, 8, seed=2, dtype=torch.bfloat16), randn(2, 5, 2, 8, seed=3, dtype=torch.bfloat16)
    pos = [[0, 1, 2, 3, 4], [9, 10, 11, 12, 13]]  # a different offset per batch row
    cs = [half_tables(row, 8) for row in pos]
    cos, sin = torch.stack([c for c, _ in cs]).float(), torch.stack([s for _, s in cs]).float()
    qr, kr = rt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2, compute_dtype="input")
    for t, got in ((q, qr), (k, kr)):
        want = rt.rotate(t, cos.unsqueeze(2), sin.unsqueeze(2), layout="half", compute_dtype="input")
        assert torch.equal(got, want)
        default = rt.rotate(t, cos.unsqueeze(2), sin.unsqueeze(2), layout="half")
        assert not torch.equal(want, default)  # bf16 arithmetic really differs from float32 arithmetic
        ref = np.stack(
            [
                loop(t[b].reshape(-1, 8).double(), [p for p in row for _ in range(t.shape[2])], 8, "half")
                for b, row in enumerate(pos)
            ]
        )
        np.testing.assert_allclose(default.double().reshape(ref.shape).numpy(), ref, rtol=0, atol=2e-2)


def test_max_position_limit_counts_bytes():
    """cos + sin of rotary_dim 128: 2 * N * 64 * itemsize bytes <= 2**32, so N <= 2**23 in float32 and
    2**22 in float64."""
    cfg = rope_ref.RopeConfig(128, layout="half")
    assert rt.RotaryEmbedding(cfg, max_position=2**23).max_position == 2**23
    with pytest.raises(ValueError, match=r"max_position=8388609 needs a 4 GiB .* max_position <= 8388608"):
        rt.RotaryEmbedding(cfg, max_position=2**23 + 1)
    with pytest.raises(ValueError, match=r"max_position <= 4194304"):
        rt.RotaryEmbedding(cfg, max_position=2**22 + 1, angle_dtype=torch.float64)
    assert rt.RotaryEmbedding(cfg, max_position=1).max_position == 1
    with pytest.raises(ValueError, match="max_position must be >= 1, got 0"):
        rt.RotaryEmbedding(cfg, max_position=0)


def test_constructor_refuses_bad_arguments():
    cfg = rope_ref.RopeConfig(8, layout="half")
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match=f"max_cached_tables must be an int >= 1, got {bad!r}"):
            rt.RotaryEmbedding(cfg, max_cached_tables=bad)
    with pytest.raises(ValueError, match="max_cached_positions must be >= 1, got 0"):
        rt.RotaryEmbedding(cfg, max_cached_positions=0)
    for bad in ("5", True):
        with pytest.raises(TypeError, match="max_cached_positions must be an int"):
            rt.RotaryEmbedding(cfg, max_cached_positions=bad)
    with pytest.raises(ValueError, match="compute_dtype must be None"):
        rt.RotaryEmbedding(cfg, compute_dtype="float32")
    with pytest.raises(ValueError, match="angle_dtype"):
        rt.RotaryEmbedding(cfg, angle_dtype=torch.float16)
    with pytest.raises(TypeError, match="RopeConfig"):
        rt.RotaryEmbedding({"head_dim": 8})


def test_cache_is_capped_at_max_cached_positions():
    cfg = rope_ref.RopeConfig(8, layout="half")
    m = rt.RotaryEmbedding(cfg, max_cached_positions=100)
    m.tables(torch.arange(100))
    assert list(m.cached_lengths().values()) == [100]  # not the usual 256
    c, _ = m.tables(torch.tensor([100, 3]))  # 100 is past the cap: computed directly, the cache is kept
    assert list(m.cached_lengths().values()) == [100]
    np.testing.assert_allclose(c.double().numpy(), half_tables([100, 3], 8)[0].numpy(), atol=1e-6)


def test_cache_evicts_the_least_recently_used_table():
    cfg = rope_ref.RopeConfig(8, layout="half", scaling=DynamicNTK(2.0, 16))
    m = rt.RotaryEmbedding(cfg, max_cached_tables=2)
    pos = torch.arange(10)
    for n in (100, 200, 100, 300):  # 100 is used again after 200, so 200 is the one to go
        m.tables(pos, seq_len=n)
    freqs = [key[1] for key in m.cached_lengths()]
    assert freqs == [freq_constants(cfg, 100)[0], freq_constants(cfg, 300)[0]]


def test_copies_start_with_an_empty_cache():
    m = rt.RotaryEmbedding(rope_ref.RopeConfig(8, layout="half"))
    m.tables(torch.arange(4))
    for other in (copy.deepcopy(m), copy.copy(m)):
        assert other.cached_lengths() == {} and len(m.cached_lengths()) == 1
        other.tables(torch.arange(600))
        assert list(m.cached_lengths().values()) == [256]


def test_forward_uses_the_module_options_and_checks_positions():
    cfg = rope_ref.RopeConfig(8, layout="interleaved", rotary_dim=6)
    x = randn(3, 4, 8, seed=4, dtype=torch.bfloat16)
    pos = torch.tensor([0, 5, 9, 2])
    m = rt.RotaryEmbedding(cfg, compute_dtype="input")
    assert torch.equal(m(x, pos), rt.apply(x, pos, cfg, compute_dtype="input"))
    assert not torch.equal(m(x, pos), rt.apply(x, pos, cfg))
    with pytest.raises(
        ValueError, match=r"positions of shape \(5,\) does not broadcast against x.shape\[:-1\] = \(3, 4\)"
    ):
        m(x, torch.arange(5))
    with pytest.raises(ValueError, match=r"positions of shape \(2, 3, 4\) does not broadcast"):
        m(x, torch.zeros(2, 3, 4, dtype=torch.int64))
