"""``rope_ref.testing``: a correct float32 HF-style RoPE passes, planted bugs fail naming their class.

The implementation under check is written out here in float32 NumPy after HF's
``LlamaRotaryEmbedding`` / ``apply_rotary_pos_emb`` (huggingface/transformers
``src/transformers/models/llama/modeling_llama.py``): fp32 ``inv_freq = 1 / base ** (arange(0, d, 2) / d)``,
fp32 ``position_ids * inv_freq``, ``emb = cat(freqs, freqs)``, ``q * cos + rotate_half(q) * sin``.
It shares no code with the oracle, so a pass is not the oracle agreeing with itself.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import rope_ref
from rope_ref.testing import (
    assert_cos_sin_close,
    assert_inv_freq_close,
    assert_rope_close,
    assert_rope_vjp_close,
)
from rope_ref.testing_plugin import rope_assert  # noqa: F401  (the fixture, as the pytest11 entry point gives it)

F32 = np.float32
B, H, S, D = 2, 4, 16, 128


def _bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (ties to even), independently of rope_ref."""
    bits = values.astype(F32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(F32)


def hf_tables(position_ids, dim, base=10000.0, *, quantise=None, scale=1.0):
    """HF ``LlamaRotaryEmbedding.forward`` in float32: cos, sin of shape (B, S, dim), attention factor in."""
    inv_freq = (F32(1.0) / (F32(base) ** (np.arange(0, dim, 2).astype(F32) / F32(dim)))).astype(F32)
    pos = np.asarray(position_ids).astype(F32)
    if quantise == "bf16":
        pos = _bf16(pos)
    elif quantise == "fp16":
        pos = pos.astype(np.float16).astype(F32)
    freqs = pos[..., None] * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    return (np.cos(emb) * F32(scale)).astype(F32), (np.sin(emb) * F32(scale)).astype(F32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotate_every_two(x):
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return out


def hf_apply(
    q, position_ids, *, rotary_dim=D, base=10000.0, quantise=None, sign=1.0, scale=1.0, pairs="half"
):
    """q (B, H, S, D) float32, ids (B, S): HF apply_rotary_pos_emb with unsqueeze_dim=1 and partial rotary."""
    cos, sin = hf_tables(position_ids, rotary_dim, base, quantise=quantise, scale=scale)
    cos, sin = cos[:, None], sign * sin[:, None]
    if pairs == "interleaved":  # GPT-J: each frequency on two adjacent channels
        h = rotary_dim // 2
        cos, sin = np.repeat(cos[..., :h], 2, axis=-1), np.repeat(sin[..., :h], 2, axis=-1)
        rot = rotate_every_two
    else:
        rot = rotate_half
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    return np.concatenate([q_rot * cos + rot(q_rot) * sin, q_pass], axis=-1).astype(F32)


@pytest.fixture
def q():
    return np.random.default_rng(7).standard_normal((B, H, S, D)).astype(F32)


@pytest.fixture
def ids():
    return np.broadcast_to(np.arange(5000, 5000 + S), (B, S)).copy()


HALF = rope_ref.RopeConfig(D, layout="half")


def test_correct_fp32_passes_near_position_5000(q, ids):
    y = hf_apply(q, ids)
    # It is a fair test: a fixed atol that a user would guess fails this correct implementation.
    err = np.abs(y - rope_ref.apply(q, ids[:, None, :], HALF)).max()
    assert err > 1e-5
    assert_rope_close(y, q, ids, HALF, axes="bhsd")
    assert_rope_close(y, q, ids[:, None, :], HALF)  # pre-broadcast ids, no axes
    assert_rope_close(y.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3), ids, HALF, axes="bshd")


def test_correct_partial_and_interleaved_pass(q, ids):
    cfg = rope_ref.RopeConfig(D, layout="interleaved", rotary_dim=32)
    assert_rope_close(hf_apply(q, ids, rotary_dim=32, pairs="interleaved"), q, ids, cfg, axes="bhsd")


def _message(actual, q, ids, cfg, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        assert_rope_close(actual, q, ids, cfg, axes="bhsd", **kw)
    return str(info.value)


@pytest.mark.parametrize(
    "bug,kwargs,cfg,named",
    [
        ("bf16 positions", {"quantise": "bf16"}, HALF, "positions quantised to bfloat16"),
        ("fp16 positions", {"quantise": "fp16"}, HALF, "positions quantised to float16"),
        ("sin negated", {"sign": -1.0}, HALF, "rotation direction reversed"),
        ("wrong pairs", {"pairs": "half"}, rope_ref.RopeConfig(D, layout="interleaved"), "layout swapped"),
        ("wrong pairs", {"pairs": "interleaved"}, HALF, "layout swapped"),
        (
            "partial ignored",
            {},
            rope_ref.RopeConfig(D, layout="half", rotary_dim=32),
            "partial rotary ignored",
        ),
    ],
)
def test_planted_bug_is_named(q, ids, bug, kwargs, cfg, named):
    msg = _message(hf_apply(q, ids, **kwargs), q, ids, cfg)
    assert f"most resembles: {named}" in msg, msg
    assert "elements out of tolerance" in msg and "err/tol" in msg and "expected" in msg and "got" in msg
    assert "y[" in msg  # the worst element's index


def test_attention_factor_missing_is_named(q, ids):
    cfg = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(1.0, 4096, attention_factor=1.25))
    assert_rope_close(hf_apply(q, ids, scale=1.25), q, ids, cfg, axes="bhsd")
    msg = _message(hf_apply(q, ids), q, ids, cfg)
    assert "most resembles: attention factor missing" in msg, msg


def test_unexplained_error_names_no_class(q, ids):
    y = hf_apply(q, ids)
    y[1, 2, 3, 4] += 0.5
    msg = _message(y, q, ids, HALF)
    assert "y[1, 2, 3, 4]" in msg and "1 of 16384 elements" in msg
    assert "most resembles" not in msg


def test_precision_declared_lower_is_looser_and_float64_is_strict(q, ids):
    y = hf_apply(q, ids)
    with pytest.raises(AssertionError, match="io=float64"):
        assert_rope_close(y, q, ids, HALF, axes="bhsd", precision="float64")
    yb = _bf16(y)
    assert_rope_close(yb, q, ids, HALF, axes="bhsd", io_dtype="bfloat16", compute_dtype="bfloat16")
    with pytest.raises(AssertionError):
        assert_rope_close(yb, q, ids, HALF, axes="bhsd")  # judged as float32 output


def test_shape_errors(q, ids):
    with pytest.raises(AssertionError, match="shape"):
        assert_rope_close(hf_apply(q, ids)[..., :64], q, ids, HALF, axes="bhsd")
    with pytest.raises(ValueError, match="axes='bhsd'"):
        assert_rope_close(hf_apply(q, ids), q, ids, HALF)


def test_silently_broadcast_hf_ids_get_a_note():
    q = np.random.default_rng(1).standard_normal((8, 8, 16, 128)).astype(F32)
    ids = np.broadcast_to(np.arange(16), (8, 16)) + np.arange(8)[:, None] * 16
    y = hf_apply(q, ids)
    assert_rope_close(y, q, ids, HALF, axes="bhsd")
    with pytest.raises(AssertionError, match="look like HF-style"):
        assert_rope_close(y, q, ids, HALF)


def test_vjp(q, ids):
    g = np.random.default_rng(3).standard_normal(q.shape).astype(F32)
    grad = hf_apply(g, ids, sign=-1.0)  # R^T g: rotate by minus the angle
    assert_rope_vjp_close(grad, q, ids, HALF, g, axes="bhsd")
    with pytest.raises(AssertionError, match="forward rotation used in the backward"):
        assert_rope_vjp_close(hf_apply(g, ids), q, ids, HALF, g, axes="bhsd")


def test_cos_sin_tables(ids):
    cos, sin = hf_tables(ids, D)
    assert_cos_sin_close(cos, sin, ids, HALF)
    assert_cos_sin_close(cos[:, None], sin[:, None], ids, HALF)  # unsqueeze(1) form
    assert_cos_sin_close(cos[..., : D // 2], sin[..., : D // 2], ids, HALF)
    bad_cos, bad_sin = hf_tables(ids, D, quantise="bf16")
    with pytest.raises(AssertionError, match="positions quantised to bfloat16"):
        assert_cos_sin_close(bad_cos, bad_sin, ids, HALF)
    with pytest.raises(AssertionError, match="shape"):
        assert_cos_sin_close(cos[..., :10], sin[..., :10], ids, HALF)


def test_inv_freq():
    inv = (1.0 / (10000.0 ** (np.arange(0, D, 2).astype(F32) / D))).astype(F32)
    assert_inv_freq_close(inv, HALF)
    assert_inv_freq_close(inv.astype(np.float64), HALF, attention_factor=1.0, precision="float32")
    with pytest.raises(AssertionError, match="inv_freq"):
        assert_inv_freq_close(inv.astype(np.float16), HALF)
    with pytest.raises(AssertionError, match="attention_factor"):
        assert_inv_freq_close(inv, HALF, attention_factor=1.1)
    with pytest.raises(AssertionError, match="reverse order"):
        assert_inv_freq_close(inv[::-1], HALF)


def test_fixture_is_one_line(rope_assert, q, ids):  # noqa: F811
    rope_assert(hf_apply(q, ids), q, ids, HALF, axes="bhsd")
    with pytest.raises(AssertionError, match="bfloat16"):
        rope_assert(hf_apply(q, ids, quantise="bf16"), q, ids, HALF, axes="bhsd")
    rope_assert.cos_sin(*hf_tables(ids, D), ids, HALF)


def test_torch_tensors_any_dtype(q, ids):
    torch = pytest.importorskip("torch")
    tq, tids = torch.from_numpy(q), torch.from_numpy(ids)
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = tids.float()[..., None] * inv
    emb = torch.cat([freqs, freqs], dim=-1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = tq.to(dtype)
        cos, sin = emb.cos()[:, None].to(dtype), emb.sin()[:, None].to(dtype)
        h = D // 2
        y = x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin
        assert_rope_close(y, x, tids, HALF, axes="bhsd")
    bad = torch.from_numpy(hf_apply(q, ids, quantise="bf16"))
    with pytest.raises(AssertionError, match="bfloat16"):
        assert_rope_close(bad, tq, tids, HALF, axes="bhsd")


def test_importing_does_not_import_torch():
    code = "import sys, rope_ref.testing, rope_ref.testing_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
