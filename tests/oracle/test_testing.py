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
from rope_ref.precision import PrecisionPolicy
from rope_ref.testing import (
    assert_cos_sin_close,
    assert_inv_freq_close,
    assert_rope_close,
    assert_rope_vjp_close,
    precision_policy,
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


# -- the precision policy a check judges by ---------------------------------------------------------------


def _policy(p):
    return (p.io_dtype, p.angle_dtype, p.compute_dtype)


def test_precision_policy_defaults_and_names():
    assert _policy(precision_policy()) == ("float64", "float64", "float64")
    assert _policy(precision_policy(like=([1.0, 2.0], np.arange(3)))) == ("float64",) * 3  # no float dtype
    f32, f64 = np.zeros(2, F32), np.zeros(2)
    # The narrowest float dtype among the arrays, whichever comes first.
    assert _policy(precision_policy(like=(f64, f32))) == ("float32",) * 3
    assert _policy(precision_policy(like=(f32, f64))) == ("float32",) * 3
    assert _policy(precision_policy(like=(f64, np.zeros(2, np.float16)))) == ("float16", "float32", "float16")
    assert _policy(precision_policy("bf16")) == ("bfloat16", "float32", "bfloat16")
    assert _policy(precision_policy("fp64", like=(f32,))) == ("float64",) * 3


def test_explicit_dtypes_override_each_in_its_own_field():
    p = precision_policy("float16", angle_dtype="float64", compute_dtype="float32")
    assert _policy(p) == ("float16", "float64", "float32")
    p = precision_policy(PrecisionPolicy("bfloat16", "float32", "float16"), io_dtype="float32")
    assert _policy(p) == ("float32", "float32", "float16")
    p = precision_policy(like=(np.zeros(2, F32),), compute_dtype="float64")
    assert _policy(p) == ("float32", "float32", "float64")


def test_precision_of_another_type_is_refused():
    for bad in (32, np.dtype("float32"), ["float32"]):
        with pytest.raises(
            TypeError,
            match=f"precision must be None, a dtype name or a PrecisionPolicy, got {type(bad).__name__}",
        ):  # noqa: E501
            precision_policy(bad)


def test_torch_dtypes_count_in_the_narrowest():
    torch = pytest.importorskip("torch")
    like = (torch.zeros(2, dtype=torch.bfloat16), np.zeros(2, np.float16), torch.zeros(2))
    assert _policy(precision_policy(like=like)) == ("bfloat16", "float32", "bfloat16")
    assert _policy(precision_policy(like=(torch.zeros(2, dtype=torch.int64),))) == ("float64",) * 3


def test_a_float32_output_of_float64_inputs_is_judged_as_float32(q, ids):
    """The output's dtype counts: a correct float32 port fed float64 x passes, and fails at float64."""
    y, x64 = hf_apply(q, ids), q.astype(np.float64)
    assert_rope_close(y, x64, ids, HALF, axes="bhsd")
    with pytest.raises(AssertionError, match="io=float64"):
        assert_rope_close(y.astype(np.float64), x64, ids, HALF, axes="bhsd")
    g = np.random.default_rng(5).standard_normal(q.shape).astype(F32)
    grad = hf_apply(g, ids, sign=-1.0).astype(np.float64)
    # grad_out's float32 sets the policy, not x's float64 nor the upcast gradient's.
    assert_rope_vjp_close(grad, x64, ids, HALF, g, axes="bhsd")
    with pytest.raises(AssertionError, match="io=float64"):
        assert_rope_vjp_close(grad, x64, ids, HALF, g.astype(np.float64), axes="bhsd")


@pytest.mark.parametrize("which", ["apply", "vjp", "cos_sin", "inv_freq"])
def test_cfg_must_be_a_rope_config(q, ids, which):
    cfg = {"head_dim": D, "layout": "half"}
    call = {
        "apply": lambda: assert_rope_close(q, q, ids, cfg, axes="bhsd"),
        "vjp": lambda: assert_rope_vjp_close(q, q, ids, cfg, q, axes="bhsd"),
        "cos_sin": lambda: assert_cos_sin_close(*hf_tables(ids, D), ids, cfg),
        "inv_freq": lambda: assert_inv_freq_close(np.ones(D // 2), cfg),
    }[which]
    with pytest.raises(TypeError, match="^cfg must be a rope_ref.RopeConfig, got dict$"):
        call()


def test_positions_broadcasting_to_more_than_x_are_refused(q, ids):
    """ids of batch 2 against an x of batch 1: broadcasting would silently judge a larger tensor."""
    x1 = q[:1]
    with pytest.raises(ValueError, match=r"positions \(2, 1, 16\) vs x \(1, 4, 16, 128\)"):
        assert_rope_close(hf_apply(x1, ids[:1]), x1, ids[:, None, :], HALF)
    with pytest.raises(ValueError, match="positions must broadcast"):
        assert_rope_vjp_close(x1, x1, ids[:, None, :], HALF, x1)
    # At the helper itself, before rope_ref.apply could object.
    with pytest.raises(ValueError, match=r"positions \(2, 1, 16\) vs x \(1, 4, 16, 128\)"):
        rope_ref.testing._positions(ids[:, None, :], None, x1.shape)
    assert rope_ref.testing._positions(ids[:1, None, :], None, x1.shape).shape == (1, 1, 16)


def test_vjp_grad_out_shape_is_checked(q, ids):
    g = np.random.default_rng(3).standard_normal(q.shape).astype(F32)
    with pytest.raises(
        AssertionError, match=r"^grad_out has shape \(2, 1, 16, 128\), expected \(2, 4, 16, 128\)$"
    ):  # noqa: E501
        assert_rope_vjp_close(hf_apply(g, ids, sign=-1.0), q, ids, HALF, g[:, :1], axes="bhsd")
    with pytest.raises(AssertionError, match=r"^actual_grad_x has shape \(2, 4, 16, 64\)"):
        assert_rope_vjp_close(hf_apply(g, ids, sign=-1.0)[..., :64], q, ids, HALF, g, axes="bhsd")


def test_vjp_rotates_grad_out_not_x(q, ids):
    g = np.random.default_rng(3).standard_normal(q.shape).astype(F32)
    with pytest.raises(AssertionError, match="differs from the oracle's VJP"):
        assert_rope_vjp_close(hf_apply(q, ids, sign=-1.0), q, ids, HALF, g, axes="bhsd")


# -- tables: layouts and shapes ---------------------------------------------------------------------------


def test_interleaved_duplicated_tables_are_read_pairwise(ids):
    cfg = rope_ref.RopeConfig(D, layout="interleaved")
    cos, sin = hf_tables(ids, D)
    half_cos, half_sin = cos[..., : D // 2], sin[..., : D // 2]
    rep_cos, rep_sin = np.repeat(half_cos, 2, axis=-1), np.repeat(half_sin, 2, axis=-1)
    assert_cos_sin_close(rep_cos, rep_sin, ids, cfg)  # GPT-J repeat_interleave
    assert_cos_sin_close(half_cos, half_sin, ids, cfg)
    with pytest.raises(AssertionError, match=r"cos\[\.\.\., 1::2\]"):
        assert_cos_sin_close(cos, sin, ids, cfg)  # cat(freqs, freqs) where pairs are adjacent
    with pytest.raises(AssertionError, match=rf"cos\[\.\.\., {D // 2}:\]"):
        assert_cos_sin_close(rep_cos, rep_sin, ids, HALF)


def test_a_table_of_other_rows_is_refused_not_broadcast(ids):
    """Row 0's table where there are two rows (equal rows here, so only the shape check can tell)."""
    cos, sin = hf_tables(ids, D)
    with pytest.raises(AssertionError, match=r"^cos has shape \(1, 16, 128\); expected \(2, 16, 64\)"):
        assert_cos_sin_close(cos[:1], sin[:1], ids, HALF)
    with pytest.raises(AssertionError, match=r"^sin has shape \(2, 16, 96\)"):
        assert_cos_sin_close(cos, sin[..., :96], ids, HALF)


# -- an explicit seq_len reaches every oracle call --------------------------------------------------------

L0, FACTOR, SEQ = 4096, 2.0, 8192
DYN = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.DynamicNTK(FACTOR, L0))


def _dynamic_base(seq_len: int) -> float:
    """HF ``_compute_dynamic_ntk_parameters``: base * ((factor * L / L0) - (factor - 1)) ** (d / (d - 2))."""
    return 10000.0 * ((FACTOR * seq_len / L0) - (FACTOR - 1)) ** (D / (D - 2))


def test_explicit_seq_len_sets_the_dynamic_base_of_every_check(q, ids, rope_assert):  # noqa: F811
    """positions end at 5015 (default length 5016); a seq_len of 8192 gives another base."""
    base = _dynamic_base(SEQ)
    y = hf_apply(q, ids, base=base)
    assert_rope_close(y, q, ids, DYN, axes="bhsd", seq_len=SEQ)
    with pytest.raises(AssertionError):
        assert_rope_close(y, q, ids, DYN, axes="bhsd")
    assert_rope_close(hf_apply(q, ids, base=_dynamic_base(5016)), q, ids, DYN, axes="bhsd")
    g = np.random.default_rng(3).standard_normal(q.shape).astype(F32)
    assert_rope_vjp_close(hf_apply(g, ids, base=base, sign=-1.0), q, ids, DYN, g, axes="bhsd", seq_len=SEQ)
    rope_assert.vjp(hf_apply(g, ids, base=base, sign=-1.0), q, ids, DYN, g, axes="bhsd", seq_len=SEQ)
    cos, sin = hf_tables(ids, D, base)
    assert_cos_sin_close(cos, sin, ids, DYN, seq_len=SEQ)
    rope_assert.cos_sin(cos, sin, ids, DYN, seq_len=SEQ)
    with pytest.raises(AssertionError):
        assert_cos_sin_close(cos, sin, ids, DYN)
    inv = (1.0 / (base ** (np.arange(0, D, 2) / D))).astype(F32)
    assert_inv_freq_close(inv, DYN, seq_len=SEQ)
    rope_assert.inv_freq(inv, DYN, seq_len=SEQ)
    with pytest.raises(AssertionError, match="inverse frequencies differ"):
        assert_inv_freq_close(inv, DYN)  # no length: the unscaled table
    with pytest.raises(AssertionError, match="inverse frequencies differ"):
        rope_assert.inv_freq(inv, DYN)


def test_fixture_companions_pass_their_arguments_through(rope_assert, q, ids):  # noqa: F811
    g = np.random.default_rng(3).standard_normal(q.shape).astype(F32)
    rope_assert.vjp(hf_apply(g, ids, sign=-1.0), q, ids, HALF, g, axes="bhsd")
    with pytest.raises(AssertionError, match="forward rotation used in the backward"):
        rope_assert.vjp(hf_apply(g, ids), q, ids, HALF, g, axes="bhsd")
    cos, sin = hf_tables(ids, D)
    with pytest.raises(AssertionError, match="cos/sin table differs"):
        rope_assert.cos_sin(sin, cos, ids, HALF)
    inv = (1.0 / (10000.0 ** (np.arange(0, D, 2).astype(F32) / D))).astype(F32)
    rope_assert.inv_freq(inv, HALF, attention_factor=1.0)
    with pytest.raises(AssertionError, match="attention_factor"):
        rope_assert.inv_freq(inv, HALF, attention_factor=1.1)
    with pytest.raises(AssertionError, match="io=float64"):
        rope_assert(hf_apply(q, ids), q, ids, HALF, axes="bhsd", precision="float64")


def test_inv_freq_without_a_dtype_is_judged_in_float64():
    """A list of float32-rounded values is no float32 array: it is judged as float64 and fails."""
    inv = (1.0 / (10000.0 ** (np.arange(0, D, 2).astype(F32) / D))).astype(F32)
    with pytest.raises(AssertionError, match="angles=float64"):
        assert_inv_freq_close(inv.astype(np.float64).tolist(), HALF)
    assert_inv_freq_close(inv.astype(np.float64).tolist(), HALF, angle_dtype="float32")


def test_importing_the_plugin_loads_neither_the_assertions_nor_the_suite():
    code = (
        "import sys, rope_ref.testing_plugin; "
        "print(sorted(m for m in ('torch', 'rope_ref.testing', 'rope_ref.conformance') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- what a failure message says besides the verdict ------------------------------------------------------


def _failure(check, *args, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args, **kw)
    return str(info.value)


def test_inv_freq_of_the_full_head_under_partial_rotary_is_named():
    cfg = rope_ref.RopeConfig(D, layout="half", rotary_dim=32)
    full = (1.0 / 10000.0 ** (np.arange(0, D, 2) / D))[:16].astype(F32)  # exponent over head_dim, not 32
    assert_inv_freq_close((1.0 / 10000.0 ** (np.arange(0, 32, 2) / 32)).astype(F32), cfg)
    msg = _failure(assert_inv_freq_close, full, cfg)
    assert "most resembles: frequencies of the full head where the config rotates part of it" in msg
    assert repr(cfg) in msg and "angles=float32" in msg


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_inv_freq_rounded_to_half_precision_is_named(dtype):
    inv = 1.0 / 10000.0 ** (np.arange(0, D, 2) / D)
    rounded = inv.astype(np.float16).astype(F32) if dtype == "float16" else _bf16(inv.astype(F32))
    msg = _failure(assert_inv_freq_close, rounded, HALF)
    assert f"most resembles: inv_freq computed in {dtype} (rounded to {dtype})" in msg


def test_table_failures_name_the_sign_and_the_attention_factor(ids):
    cos, sin = hf_tables(ids, D)
    msg = _failure(assert_cos_sin_close, cos, -sin, ids, HALF)
    assert "most resembles: rotation direction reversed (sin negated)" in msg
    yarn = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(1.0, 4096, attention_factor=1.25))
    assert_cos_sin_close(*hf_tables(ids, D, scale=1.25), ids, yarn)
    msg = _failure(assert_cos_sin_close, cos, sin, ids, yarn)
    assert "most resembles: attention factor missing (not multiplied by 1.25)" in msg


def test_messages_give_the_config_positions_and_seq_len(q, ids):
    y = hf_apply(q, ids, base=_dynamic_base(SEQ))
    msg = _failure(assert_rope_close, y, q, ids, DYN, axes="bhsd", seq_len=SEQ + 1)
    assert msg.startswith(
        "RoPE output differs from rope_ref.apply (tolerance model of docs/tolerance.md, "
        "io=float32, angles=float32, compute=float32)"
    )
    assert (
        f"{DYN!r}; x (2, 4, 16, 128) with axes='bhsd'; positions (2, 1, 16) in [5000, 5015]; seq_len=8193"
        in msg
    )
    cos, sin = hf_tables(ids, D)
    msg = _failure(assert_cos_sin_close, cos, sin, ids, DYN, seq_len=SEQ)
    assert f"{DYN!r}; positions (2, 16) in [5000, 5015]; seq_len=8192" in msg
