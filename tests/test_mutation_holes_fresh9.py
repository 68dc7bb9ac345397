"""Issue 21: survivors of the fresh "fresh9" mutation sample (decay, tolerance, runner)."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance import tolerance
from rope_ref.conformance.case import Case
from rope_ref.conformance.protocol import PrecisionPolicy

import rope_ref
from rope_ref import RopeConfig
from rope_ref.decay import score_curve

U16, U32 = 2.0**-11, 2.0**-24
TINY16, TINY32 = 2.0**-14, 2.0**-126
FP16_IO = PrecisionPolicy("float16", "float32", "float32")
FP32 = PrecisionPolicy("float32", "float32", "float32")


# -- decay: the pass-through channels of the sampled curve ------------------------------------------------


def test_sampled_curve_averages_the_pass_through_product():
    """k = q (correlation 1): the score at r = 0 is E|q|^2 = head_dim, 62 of its 64 from the channels
    that are not rotated. The mean over 4000 samples has a standard deviation of sqrt(2 * 64 / 4000)."""
    cfg = RopeConfig(64, layout="half", rotary_dim=2)
    curve = score_curve(np.array([0.0, 7.0]), cfg, samples=4000, seed=3, correlation=1.0)
    assert abs(curve[0] - 64.0) < 1.5
    # Only pair 0 rotates (theta_0 = 1): the score moves by at most its mean power, about 2.
    assert abs(curve[1] - curve[0]) < 5.0
    # Half the correlation halves every part, the pass-through included (expectation rho * head_dim).
    half = score_curve(np.array([0.0]), cfg, samples=4000, seed=3, correlation=0.5)
    assert abs(half[0] - 32.0) < 1.5


# -- tolerance ------------------------------------------------------------------------------------------


def _at_half_allowance(case: Case, name: str, tol: np.ndarray, policy: PrecisionPolicy) -> None:
    """Each element moved by half its documented allowance passes, with that ratio."""
    expected = case.expected[name]
    for flat in range(expected.size):
        idx = np.unravel_index(flat, expected.shape)
        got = {k: v.copy() for k, v in case.expected.items()}
        got[name][idx] += 0.5 * tol[idx]
        want = abs(got[name][idx] - expected[idx]) / tol[idx]
        result = tolerance.compare_output(case, name, got[name], policy)[0]
        assert result.passed and result.ratio == pytest.approx(want, rel=1e-9), (idx, result.describe())


def test_trig_allowance_adds_the_io_floor_at_float16():
    """trig rule: |A| (k_i |m theta_i| u_a + 8 u_r) + 4 tiny(io); with float16 I/O the floor, 4 * 2^-14,
    is a quarter of the whole allowance at m = 0 (docs/tolerance.md)."""
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0, "scaling": None}
    theta = 10000.0 ** (-np.arange(4) / 4)
    positions = np.array([0.0, 3.0])
    ang = positions[:, None] * theta
    case = Case("t-trig16", "cos_sin", cfg, {"positions": positions},
                {"cos": np.cos(ang), "sin": np.sin(ang)}, "tables", "trig")  # fmt: skip
    k = 8.0 + 2.0 * np.abs(np.log(theta))
    tol = k * np.abs(ang) * U32 + 8 * (U16 + 2 * U32) + 4 * TINY16
    _at_half_allowance(case, "cos", tol, FP16_IO)
    _at_half_allowance(case, "sin", tol, FP16_IO)


def test_a_flushed_subnormal_table_entry_passes():
    """table rule: |v| k u_a + 4 tiny of the table dtype, so a float32 table may flush 1e-40 to zero."""
    case = Case("t-flush", "inv_freq", None, {}, {"out": np.array([1.0, 1e-40])}, "tables", "table")
    flushed = np.array([1.0, 0.0])
    (result,) = tolerance.compare_output(case, "out", flushed, FP32)
    assert result.passed, result.describe()
    assert result.ratio == pytest.approx(1e-40 / (1e-40 * (8 + 2 * abs(np.log(1e-40))) * U32 + 4 * TINY32))
    (wrong,) = tolerance.compare_output(case, "out", np.array([1.0, 1e-36]), FP32)  # 20x the floor
    assert not wrong.passed


def test_exact_elements_accept_only_the_rounding_to_the_declared_compute_dtype():
    """float64 I/O computed in float32 (torchtune, MLX): a pass-through channel may come back as x
    rounded to float32, and as nothing else, not even a smaller value."""
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0, "scaling": None, "rotary_dim": 2}
    x = np.array([[0.3, -0.7, 0.1, 1.0 / 3.0]])
    pos = np.array([2.0])
    c, s = np.cos(2.0), np.sin(2.0)
    out = np.array([[0.3 * c + 0.7 * s, -0.7 * c + 0.3 * s, 0.1, 1.0 / 3.0]])
    case = Case("t-alt", "apply", cfg, {"x": x, "positions": pos}, {"out": out}, "tables", "rotation")
    policy = PrecisionPolicy("float64", "float32", "float32")
    rounded = out.copy()
    rounded[0, 3] = float(np.float32(1.0 / 3.0))
    assert rounded[0, 3] != out[0, 3]
    assert tolerance.compare_output(case, "out", rounded, policy)[0].passed
    for wrong in (rounded[0, 3] - 1e-6, rounded[0, 3] + 1e-6, np.nextafter(rounded[0, 3], 0.0)):
        got = rounded.copy()
        got[0, 3] = wrong
        result = tolerance.compare_output(case, "out", got, policy)[0]
        assert not result.passed and result.ratio == np.inf, (wrong, result.describe())


# -- hf_config ------------------------------------------------------------------------------------------


def test_rope_configs_from_hf_takes_layout_by_keyword_only():
    from rope_ref.hf_config import rope_configs_from_hf

    small = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "rope_theta": 1e4}
    assert rope_configs_from_hf(small, layout="half") == {"default": RopeConfig(64, layout="half")}
    with pytest.raises(TypeError):
        rope_configs_from_hf(small, "half")


def test_longrope_lists_longer_than_256_pairs_are_accepted():
    """600 channels: 300 pairs, past CPython's cache of small ints (the length check compares values)."""
    cfg = {"model_type": "phi3", "head_dim": 600, "hidden_size": 4800, "num_attention_heads": 8,
           "max_position_embeddings": 8192, "original_max_position_embeddings": 4096,
           "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 300, "long_factor": [2.0] * 300}}
    got = RopeConfig.from_hf(cfg)
    assert got.rotary_dim == 600 and len(got.scaling.long_factor) == 300


def test_zero_attention_heads_is_a_value_error_naming_the_key():
    cfg = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 0}
    with pytest.raises(ValueError, match="num_attention_heads"):
        RopeConfig.from_hf(cfg)


# -- fresh10 survivors -----------------------------------------------------------------------------------


def test_table_rule_reads_the_op_name_by_value():
    """An op name read from a manifest is an equal string, not the interned literal: the YaRN
    (truncate=False) ramp term of inv_freq must still be added."""
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
    cfg = {"head_dim": 32, "layout": "half", "base": 10000.0, "scaling": scaling}
    theta = np.ones(16)
    literal = Case("t", "inv_freq", cfg, {}, {"out": theta}, "scaling", "table")
    loaded = Case("t", "".join(["inv", "_freq"]), cfg, {}, {"out": theta}, "scaling", "table")
    plain = Case("t", "inv_freq", None, {}, {"out": theta}, "scaling", "table")
    want = tolerance.element_tolerance(literal, "out", FP32).tol
    assert np.any(want > tolerance.element_tolerance(plain, "out", FP32).tol)  # the ramp term is there
    np.testing.assert_array_equal(tolerance.element_tolerance(loaded, "out", FP32).tol, want)


def test_chatglm_apply_2d_options_are_keyword_only_and_scalars_are_refused():
    from rope_ref.chatglm import apply_2d

    x = np.ones((3, 8))
    ids = np.arange(3)
    assert apply_2d(x, ids, ids, base=500.0).shape == (3, 8)
    with pytest.raises(TypeError):
        apply_2d(x, ids, ids, 500.0)
    with pytest.raises(ValueError, match=r"head_dim\) must be a positive multiple of 4"):
        apply_2d(np.float64(1.0), 0, 0)


def test_interleaved_apply_reads_reversed_and_broadcast_channel_views():
    """Interleaved pairs are viewed as complex numbers, which needs a unit channel stride: a view with a
    negative or zero channel stride is copied first (its values, not its memory layout, count)."""
    import rope_ref

    cfg = RopeConfig(8, layout="interleaved")
    x = np.random.default_rng(9).standard_normal((3, 8))
    ids = np.array([0.0, 1.0, 70.0])
    for view in (x[:, ::-1], np.broadcast_to(x[:1, :1], (3, 8))):
        assert view.strides[-1] != view.itemsize
        want = rope_ref.apply(np.ascontiguousarray(view), ids, cfg)
        np.testing.assert_array_equal(rope_ref.apply(view, ids, cfg), want)


def test_suite_report_failures_compare_the_status_by_value():
    """Reports read back from JSON hold equal status strings, not the interned literals."""
    from rope_ref.conformance.runner import CaseResult, SuiteReport

    failed = CaseResult("c-1", "apply", "tables", "".join(["fail", "ed"]), kind="mismatch", message="m")
    passed = CaseResult("c-2", "apply", "tables", "passed")
    report = SuiteReport({"name": "x"}, [failed, passed], [], 0.0)
    assert report.failures == [failed] and not report.ok


def test_dynamic_ntk_sees_length_one_for_position_zero_and_below():
    """HF's rule seq_len = max(position) + 1, never below 1: with L0 = 1, position 0 is within the
    original context (theta unchanged), and so are negative positions; position 1 is past it."""
    import rope_ref
    from rope_ref.frequencies import resolve_seq_len

    cfg = rope_ref.RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 1))
    assert resolve_seq_len(np.array([0.0]), cfg, None) == 1
    assert resolve_seq_len(np.array([-3.0, -7.5]), cfg, None) == 1
    assert resolve_seq_len(np.array([0.0, 1.0]), cfg, None) == 2
    x = np.ones(8)
    plain = rope_ref.RopeConfig(8, layout="half")
    np.testing.assert_array_equal(rope_ref.apply(x, -2.0, cfg), rope_ref.apply(x, -2.0, plain))


def _fresh(text: str) -> str:
    """An equal string that is not the interned literal (as JSON-loaded configs give)."""
    return "".join(list(text))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_torch_kernels_compare_the_layout_by_value(layout):
    """Every torch path (blocked eager, autograd Function, the functional reference, in place, the complex
    view for interleaved float32) with a layout string that is equal to, not the same object as, the
    literal gives the same bits as with the literal."""
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    literal = RopeConfig(8, layout=layout)
    loaded = RopeConfig(8, layout=_fresh(layout))
    assert loaded.layout is not layout
    gen = torch.Generator().manual_seed(4)
    x = torch.randn((2, 5, 3, 8), generator=gen)
    ids = torch.arange(5) * 37
    want = rt.apply(x, ids, literal, axes="bshd")
    assert torch.equal(rt.apply(x, ids, loaded, axes="bshd"), want)
    xg = x.clone().requires_grad_(True)  # the autograd path
    assert torch.equal(rt.apply(xg, ids, loaded, axes="bshd").detach(), want)
    native = rt.apply(xg, ids, loaded, axes="bshd", autograd="native")  # the functional reference
    torch.testing.assert_close(native.detach(), want, rtol=0, atol=1e-6)
    xi = x.clone()
    rt.apply(xi, ids, loaded, axes="bshd", inplace=True)
    assert torch.equal(xi, want)
    expected = rope_ref.apply(x.double().numpy(), ids.double().numpy()[None, :, None], literal)
    np.testing.assert_allclose(want.double().numpy(), expected, atol=1e-5)


# -- chatglm: survivors of the run over every mutant of the module ----------------------------------------


def test_chatglm_validation_edges():
    from rope_ref.chatglm import apply_2d, fp16_cos_sin, next_position_ids

    ids = np.array([[5, 6, 130001, 130004, 7]])
    with pytest.raises(TypeError):
        next_position_ids(ids, 130004)  # the token ids are keyword-only
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\)"):
        next_position_ids(ids[None])
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        fp16_cos_sin(np.arange(3), rotary_dim=7)
    cos, sin = fp16_cos_sin(np.arange(3))
    assert cos.shape == sin.shape == (3, 64)  # the released model's rotary width is the default
    # any base above 1 is a valid RoPE base, here 1.5: the table is finite, and cos^2 + sin^2 is 1
    cos, sin = fp16_cos_sin(np.arange(3), rotary_dim=8, base=1.5)
    np.testing.assert_allclose(cos.astype(np.float64) ** 2 + sin.astype(np.float64) ** 2, 1.0, atol=4e-3)
    assert apply_2d(np.ones((2, 8)), [0, 1], [0, 0], base=1.5).shape == (2, 8)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        apply_2d(np.ones((2, 8)), [0, 1], [0, 0], base=1.0)


# -- fresh11 survivors ----------------------------------------------------------------------------------


def test_rows_longer_than_a_block_are_blocked_one_row_each(monkeypatch):
    """A row of 3 * 32768 elements is past the 2**16-element block: each block holds exactly one row."""
    from rope_ref import rotation

    seen = []
    real = rotation._rotate_half_block

    def recording(out, x, *rest):
        seen.append(x.shape)
        return real(out, x, *rest)

    monkeypatch.setattr(rotation, "_rotate_half_block", recording)
    x = np.ones((4, 3, 32768))
    rope_ref.apply(x, np.arange(4.0)[:, None], RopeConfig(32768, layout="half"))
    assert seen == [(1, 3, 32768)] * 4


def test_empty_positions_with_a_length_dependent_scaling():
    from rope_ref.frequencies import resolve_seq_len

    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 16))
    assert resolve_seq_len(np.zeros(0), cfg, None) is None
    assert rope_ref.apply(np.zeros((0, 8)), np.zeros(0), cfg).shape == (0, 8)


def test_angles_and_cos_sin_take_their_options_by_keyword_only():
    cfg = RopeConfig(8, layout="half")
    pos = [1.0, 2.0]
    np.testing.assert_array_equal(rope_ref.angles(pos, cfg, seq_len=4), rope_ref.angles(pos, cfg))
    for func in (rope_ref.angles, rope_ref.cos_sin):
        with pytest.raises(TypeError):
            func([1.0, 2.0], cfg, 4)


def test_comparisons_are_immutable_values():
    import dataclasses

    c = tolerance._worst("out", np.zeros(2), np.array([0.5, 0.0]), np.ones(2), np.zeros(2, dtype=bool))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.passed = False
    assert hash(c) == hash(dataclasses.replace(c))


def test_a_table_case_of_unexpected_rank_gets_no_ramp_term():
    """The YaRN ramp term belongs to the 1-D inv_freq table; an inv_freq case holding a 2-D array (not
    one the catalogue writes) gets the plain table allowance instead of a misaligned term."""
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
    cfg = {"head_dim": 32, "layout": "half", "base": 10000.0, "scaling": scaling}
    values = np.full((2, 16), 0.5)
    case = Case("t", "inv_freq", cfg, {}, {"out": values}, "scaling", "table")
    tol = tolerance.element_tolerance(case, "out", FP32).tol
    plain = Case("t", "inv_freq", None, {}, {"out": values}, "scaling", "table")
    np.testing.assert_array_equal(tol, tolerance.element_tolerance(plain, "out", FP32).tol)


def test_torch_interleaved_view_with_an_odd_leading_stride():
    """(2, 8) float32 cut from a (2, 9) buffer: the row stride 9 is odd, so the pairs cannot be viewed as
    complex numbers; the blocked kernel must serve it, with the values of a contiguous copy (which takes
    the complex multiply, so the two may differ in the last bit)."""
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    cfg = RopeConfig(8, layout="interleaved")
    buf = torch.randn((2, 9), generator=torch.Generator().manual_seed(3))
    view = buf[:, :8]
    assert view.stride() == (9, 1)
    ids = torch.tensor([3, 40])
    want = rt.apply(view.contiguous(), ids, cfg, axes="sd")
    torch.testing.assert_close(rt.apply(view, ids, cfg, axes="sd"), want, rtol=4e-7, atol=1e-7)


def test_default_bases_of_the_model_types_with_their_own():
    """transformers' config defaults (read from Llama4TextConfig, MixtralConfig, CohereConfig of
    transformers 5.23: rope_parameters["rope_theta"]) when a config has no rope_theta."""
    bare = {"hidden_size": 512, "num_attention_heads": 8}
    for model_type, base in (("llama4", 5e5), ("llama4_text", 5e5), ("mixtral", 1e6), ("cohere", 5e5)):
        assert RopeConfig.from_hf(dict(bare, model_type=model_type)).base == base, model_type


def test_exactly_max_samples_is_within_the_limit():
    """10**7 samples is allowed (the limit is inclusive): with q and k also given, the error is the
    conflict of arguments, not the limit, and no sample is drawn."""
    cfg = RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="pass either q and k, or samples > 0, not both"):
        score_curve([0.0], cfg, np.ones(8), np.ones(8), samples=10_000_000)


# -- fresh13 survivors ----------------------------------------------------------------------------------


def test_longrope_factors_must_be_positive():
    for bad in (0.0, -0.5):
        with pytest.raises(ValueError, match=r"short_factor\[1\] must be > 0"):
            rope_ref.LongRoPE([1.0, bad], [1.0, 2.0], 4096)


def test_a_one_token_original_context_is_accepted_from_hf():
    from rope_ref.scaling import scaling_from_hf

    got = scaling_from_hf({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=1)
    assert got == rope_ref.DynamicNTK(2.0, 1)


def test_negative_sample_counts_are_refused():
    with pytest.raises(ValueError, match="samples"):
        score_curve([0.0, 1.0], RopeConfig(8, layout="half"), samples=-1)
