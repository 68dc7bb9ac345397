"""The scalings' parameters (rope_ref.scaling): each refusal names its parameter, the accepted edges, the
reprs, and the HF ``rope_scaling`` dicts both ways (``to_hf``, ``scaling_from_hf``) with their defaults.
"""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest
from mp_reference import U64

import rope_ref
from rope_ref import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, RopeConfig, YaRN, scaling_from_hf
from rope_ref.decay import decay_distances


@pytest.fixture(autouse=True, scope="module")
def _mpmath_40_digits():
    """40-digit mpmath for every test here, without leaking the setting into other modules."""
    with mpmath.workdps(40):
        yield


def _cfg(scaling, head_dim: int = 128, base: float = 10000.0, layout: str = "half", rotary_dim=None):
    return RopeConfig(head_dim, layout=layout, base=base, scaling=scaling, rotary_dim=rotary_dim)


SHORT = tuple(1.0 + 0.05 * i for i in range(16))


LONG = tuple(1.0 + 2.0 * i for i in range(16))


def test_longrope_wrong_length_names_the_list():
    # RopeConfig validates the scaling when it is built, so the mismatch surfaces there.
    with pytest.raises(ValueError, match="short_factor must have rotary_dim // 2 = 32 entries"):
        _cfg(LongRoPE(SHORT, LONG, 4096), 64)
    with pytest.raises(ValueError, match="long_factor"):
        LongRoPE(SHORT, LONG, 4096).inv_freq(10000.0, 64, 5000)
    with pytest.raises(ValueError, match="same length"):
        LongRoPE(SHORT, LONG[:-1], 4096)


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: Linear(0.5), "factor"),
        (lambda: NTKAware(0.9), "alpha"),
        (lambda: DynamicNTK(0.5, 2048), "factor"),
        (lambda: DynamicNTK(2.0, 0), "original_max_position"),
        (lambda: YaRN(0.99, 4096), "factor"),
        (lambda: YaRN(4.0, -1), "original_max_position"),
        (lambda: YaRN(4.0, 4096, beta_fast=1, beta_slow=32), "beta_fast"),
        (lambda: YaRN(4.0, 4096, attention_factor=0.0), "attention_factor"),
        (lambda: YaRN(4.0, 4096, mscale=-1.0), "mscale"),
        (lambda: Llama3(0.5, 1, 4, 8192), "factor"),
        (lambda: Llama3(8, 4, 4, 8192), "low_freq_factor"),
        (lambda: Llama3(8, 5, 4, 8192), "low_freq_factor"),
        (lambda: Llama3(8, 1, 4, 0), "original_max_position"),
        (lambda: LongRoPE(SHORT, LONG, 0), "original_max_position"),
        (lambda: LongRoPE(SHORT, LONG, 4096, factor=0.5), "factor"),
        (lambda: LongRoPE((1.0, -1.0), (1.0, 1.0), 4096), "short_factor"),
        (lambda: LongRoPE((), (), 4096), "short_factor"),
        (lambda: Linear(float("nan")), "factor"),
        (lambda: Linear(float("inf")), "factor"),
    ],
)
def test_bad_parameters_raise_naming_the_parameter(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bad_parameter_types_raise_type_error():
    with pytest.raises(TypeError, match="factor"):
        Linear("2")
    with pytest.raises(TypeError, match="original_max_position"):
        YaRN(4.0, 4096.0)
    with pytest.raises(TypeError, match="truncate"):
        YaRN(4.0, 4096, truncate="yes")
    with pytest.raises(TypeError, match="short_factor"):
        LongRoPE("1,2", (1.0, 2.0), 4096)


ALL = [
    Linear(4.0),
    NTKAware(2.0),
    DynamicNTK(10.0, 2048),
    YaRN(4.0, 32768),
    YaRN(40.0, 4096, mscale=0.707, mscale_all_dim=0.707),
    YaRN(32.0, 4096, beta_fast=16, beta_slow=2, attention_factor=1.0, truncate=False),
    Llama3(8.0, 1.0, 4.0, 8192),
    LongRoPE(SHORT, LONG, 4096, factor=32.0),
    LongRoPE(SHORT, LONG, 4096, attention_factor=1.2),
]


@pytest.mark.parametrize("scaling", ALL, ids=repr)
def test_to_hf_round_trip_and_hashable(scaling):
    d = scaling.to_hf()
    assert isinstance(d["rope_type"], str)
    back = scaling_from_hf(d)
    assert back == scaling and hash(back) == hash(scaling)
    legacy = {("type" if k == "rope_type" else k): v for k, v in d.items()}
    assert scaling_from_hf(legacy) == scaling
    cfg = _cfg(scaling, 32)
    np.testing.assert_array_equal(rope_ref.inv_freq(_cfg(back, 32), 5000), rope_ref.inv_freq(cfg, 5000))


def test_plain_hf_dicts():
    assert scaling_from_hf(None) is None
    assert scaling_from_hf({"rope_type": "default"}) is None
    assert scaling_from_hf({"type": "linear", "factor": 2.0}) == Linear(2.0)
    # rope_type wins over the legacy key (HF standardize_rope_params uses setdefault).
    assert scaling_from_hf({"rope_type": "linear", "type": "dynamic", "factor": 2.0}) == Linear(2.0)
    assert scaling_from_hf(
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}
    ) == YaRN(4.0, 32768)
    # A missing beta (or a falsy one) means the default, as in HF (``get("beta_fast") or 32``).
    assert scaling_from_hf(
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 8, "beta_fast": None}
    ) == YaRN(4.0, 8)
    assert scaling_from_hf(
        {"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096
    ) == DynamicNTK(2.0, 4096)
    assert scaling_from_hf(
        {"rope_type": "yarn", "original_max_position_embeddings": 4096}, max_position_embeddings=16384
    ) == YaRN(4.0, 4096)


@pytest.mark.parametrize(
    "d,key",
    [
        ({"rope_type": "su", "factor": 2.0}, "rope_type"),
        ({"factor": 2.0}, "rope_type"),
        ({"rope_type": "linear"}, "factor"),
        ({"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0}, "low_freq_factor"),
        ({"rope_type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn", "original_max_position_embeddings": 4096}, "factor"),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "low_freq_factor",
        ),
        (
            {"rope_type": "longrope", "long_factor": [1.0], "original_max_position_embeddings": 4096},
            "short_factor",
        ),
    ],
)
def test_bad_hf_dicts_name_the_key(d, key):
    with pytest.raises(ValueError, match=key):
        scaling_from_hf(d)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: YaRN(4.0, 64, beta_fast=32.0, beta_slow=0.0), "beta_slow"),
        (lambda: YaRN(4.0, 64, beta_fast=0.0, beta_slow=-1.0), "beta_fast"),
        (lambda: YaRN(4.0, 64, attention_factor=0.0), "attention_factor"),
        (lambda: YaRN(4.0, 0), "original_max_position"),
        (lambda: DynamicNTK(2.0, 0), "original_max_position"),
        (lambda: rope_ref.Llama3(8.0, 0.0, 4.0, 64), "low_freq_factor"),
        (lambda: LongRoPE([1.0, 1.0], [1.0, 1.0], 0), "original_max_position"),
        (lambda: decay_distances(0.0), "max_distance"),
        (lambda: decay_distances(1.0, 0.0), "step"),
    ],
)
def test_zero_where_a_positive_value_is_required_is_refused(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_longrope_and_yarn_derive_a_fractional_factor_by_true_division():
    """HF: factor = max_position_embeddings / original_max_position_embeddings, a float (6000/4096 =
    1.46484375 exactly), never floor division (which would give 1 and drop the attention factor)."""
    n = 8
    d = {"rope_type": "longrope", "short_factor": [1.0] * n, "long_factor": [2.0] * n,
         "original_max_position_embeddings": 4096}
    longrope = rope_ref.scaling_from_hf(d, max_position_embeddings=6000)
    assert longrope.factor == 1.46484375
    want = math.sqrt(1 + math.log(1.46484375) / math.log(4096))
    assert longrope.attention_factor() == pytest.approx(want, rel=4 * U64)
    yarn = rope_ref.scaling_from_hf({"rope_type": "yarn", "original_max_position_embeddings": 4096},
                                    max_position_embeddings=6000)
    assert yarn.factor == 1.46484375
    assert yarn.attention_factor() == pytest.approx(0.1 * math.log(1.46484375) + 1, rel=4 * U64)


@pytest.mark.parametrize("values", [5, 2.0, {1.0, 2.0}, "12", b"12", {"a": 1.0}, (v for v in [1.0])])
def test_longrope_factor_lists_must_be_sequences(values):
    with pytest.raises(TypeError, match="short_factor must be a sequence of numbers"):
        rope_ref.LongRoPE(values, [1.0], 2)
    with pytest.raises(TypeError, match="long_factor must be a sequence of numbers"):
        rope_ref.LongRoPE([1.0], values, 2)


def test_longrope_factor_lists_accept_tuples_lists_and_arrays():
    for values in ([1.0, 2.0], (1.0, 2.0), np.array([1.0, 2.0])):
        assert rope_ref.LongRoPE(values, values, 2).short_factor == (1.0, 2.0)


def test_scaling_reprs_show_only_non_default_fields():
    yarn = rope_ref.YaRN
    assert repr(yarn(4.0, 4096)) == "YaRN(factor=4.0, original_max_position=4096)"
    assert repr(yarn(4.0, 4096, beta_fast=16.0)) == (
        "YaRN(factor=4.0, original_max_position=4096, beta_fast=16.0, beta_slow=1.0)")
    assert repr(yarn(4.0, 4096, beta_slow=2.0)) == (
        "YaRN(factor=4.0, original_max_position=4096, beta_fast=32.0, beta_slow=2.0)")
    assert repr(yarn(4.0, 4096, mscale=0.5, mscale_all_dim=0.0, attention_factor=1.5, truncate=False)) == (
        "YaRN(factor=4.0, original_max_position=4096, mscale=0.5, mscale_all_dim=0.0, attention_factor=1.5, "
        "truncate=False)")
    lr = rope_ref.LongRoPE([1.0, 2.0], [3.0, 4.0], 64)
    assert repr(lr) == "LongRoPE(short_factor=<2 values>, long_factor=<2 values>, original_max_position=64)"
    assert repr(rope_ref.LongRoPE([1.0], [3.0], 64, factor=2.0, attention_factor=1.25)) == (
        "LongRoPE(short_factor=<1 values>, long_factor=<1 values>, original_max_position=64, factor=2.0, "
        "attention_factor=1.25)")


def test_to_hf_writes_optional_keys_only_when_set():
    assert rope_ref.YaRN(4.0, 64).to_hf() == {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": True}
    full = rope_ref.YaRN(4.0, 64, mscale=1.0, mscale_all_dim=0.5, attention_factor=2.0).to_hf()
    assert (full["mscale"], full["mscale_all_dim"], full["attention_factor"]) == (1.0, 0.5, 2.0)
    assert rope_ref.LongRoPE([1.0], [2.0], 64).to_hf() == {
        "rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
        "original_max_position_embeddings": 64}
    lr = rope_ref.LongRoPE([1.0], [2.0], 64, factor=3.0, attention_factor=1.5).to_hf()
    assert (lr["factor"], lr["attention_factor"]) == (3.0, 1.5)
    assert rope_ref.NTKAware(2.0).to_hf() == {"rope_type": "ntk", "factor": 2.0}
    assert rope_ref.Llama3(8.0, 1.0, 4.0, 8192).to_hf() == {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}


def test_yarn_mscale_zero_and_beta_equal_are_accepted():
    assert rope_ref.YaRN(4.0, 64, mscale=0.0, mscale_all_dim=0.0).mscale == 0.0
    assert rope_ref.YaRN(4.0, 64, beta_fast=2.0, beta_slow=2.0).beta_slow == 2.0
    with pytest.raises(ValueError, match="mscale_all_dim must be >= 0"):
        rope_ref.YaRN(4.0, 64, mscale_all_dim=-0.5)
    with pytest.raises(ValueError, match="beta_slow must be > 0"):
        rope_ref.YaRN(4.0, 64, beta_fast=1.0, beta_slow=0.0)
    with pytest.raises(ValueError, match="attention_factor must be > 0"):
        rope_ref.LongRoPE([1.0], [1.0], 64, attention_factor=-1.0)
    # mscale 2 against mscale_all_dim 1: (0.2 ln 4 + 1) / (0.1 ln 4 + 1).
    got = rope_ref.YaRN(4.0, 64, mscale=2.0, mscale_all_dim=1.0).attention_factor()
    assert got == pytest.approx((0.2 * math.log(4) + 1) / (0.1 * math.log(4) + 1), rel=4 * U64)
    assert rope_ref.YaRN(4.0, 64, mscale=0.0, mscale_all_dim=1.0).attention_factor() == pytest.approx(
        0.1 * math.log(4) + 1, rel=4 * U64)


def test_llama3_band_factors_must_be_ordered_and_positive():
    with pytest.raises(ValueError, match="low_freq_factor must be < high_freq_factor"):
        rope_ref.Llama3(8.0, 4.0, 4.0, 8192)
    with pytest.raises(ValueError, match="high_freq_factor must be > 0"):
        rope_ref.Llama3(8.0, 1.0, 0.0, 8192)
    assert rope_ref.Llama3(1.0, 0.5, 0.75, 8192).factor == 1.0


def test_tables_overflowing_float64_are_value_errors():
    with pytest.raises(ValueError, match="overflows float64"):
        RopeConfig(4, layout="half", scaling=rope_ref.LongRoPE([1e-310, 1.0], [1.0, 1.0], 64))


@pytest.mark.parametrize(
    ("d", "kwargs", "error", "match"),
    [
        ([("rope_type", "linear")], {}, TypeError, "rope_scaling must be a dict or None, got list"),
        ({"rope_type": 3}, {}, TypeError, "rope_type must be a string, got int"),
        ({"rope_type": "linear", "factor": 2.0, "zeta": 1, "alpha": 2}, {}, ValueError,
         r"unknown keys \['alpha', 'zeta'\]"),
        ({"rope_type": "linear", "factor": None}, {}, ValueError, "missing the key 'factor'"),
        ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 0}, ValueError,
         "max_position_embeddings"),
        ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 4096.0}, TypeError,
         "max_position_embeddings"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": None}, {}, ValueError,
         "missing the key 'original_max_position_embeddings'"),
        ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": None,
          "original_max_position_embeddings": 64}, {}, ValueError, "missing the key 'long_factor'"),
    ],
)
def test_scaling_from_hf_refusals(d, kwargs, error, match):
    with pytest.raises(error, match=match):
        rope_ref.scaling_from_hf(d, **kwargs)


def test_scaling_from_hf_defaults():
    # rope_theta and partial_rotary_factor may sit in any rope dict; truncate defaults to True.
    d = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "rope_theta": 1e4,
         "partial_rotary_factor": 0.5, "beta_fast": 0, "beta_slow": 0}
    assert rope_ref.scaling_from_hf(d) == rope_ref.YaRN(2.0, 64)
    assert rope_ref.scaling_from_hf(dict(d, truncate=False)).truncate is False
    # LongRoPE without max_position_embeddings keeps factor None (attention factor 1).
    lr = {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
          "original_max_position_embeddings": 64}
    assert rope_ref.scaling_from_hf(lr).factor is None
    assert rope_ref.scaling_from_hf(lr, max_position_embeddings=256).factor == 4.0
    assert rope_ref.scaling_from_hf(dict(lr, factor=8.0), max_position_embeddings=256).factor == 8.0
    # The dict's original context wins over max_position_embeddings as the fallback (llama3, yarn).
    l3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert rope_ref.scaling_from_hf(l3, max_position_embeddings=512).original_max_position == 512
    l3o = dict(l3, original_max_position_embeddings=128)
    assert rope_ref.scaling_from_hf(l3o, max_position_embeddings=512).original_max_position == 128
    assert rope_ref.scaling_from_hf({"type": "default"}) is None
    assert rope_ref.scaling_from_hf({"rope_type": "ntk", "factor": 3.0}) == rope_ref.NTKAware(3.0)


def test_scaling_from_hf_compares_rope_types_by_value():
    """Strings parsed from config.json are equal to, not the same objects as, the literals in the code."""
    text = """[
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "ntk", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64},
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
        {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
         "original_max_position_embeddings": 64},
        {"rope_type": "default"}
    ]"""
    got = [rope_ref.scaling_from_hf(d) for d in json.loads(text)]
    assert got == [rope_ref.Linear(2.0), rope_ref.NTKAware(2.0), rope_ref.DynamicNTK(2.0, 64),
                   rope_ref.YaRN(2.0, 64), rope_ref.Llama3(8.0, 1.0, 4.0, 64),
                   rope_ref.LongRoPE([1.0], [2.0], 64), None]


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: rope_ref.Llama3(8.0, -1.0, 4.0, 8192), "low_freq_factor must be > 0"),
        (lambda: rope_ref.Llama3(8.0, -4.0, -1.0, 8192), "low_freq_factor must be > 0"),
        (lambda: rope_ref.YaRN(4.0, 64, beta_fast=32.0, beta_slow=-1.0), "beta_slow must be > 0"),
        (lambda: rope_ref.YaRN(4.0, 64, beta_fast=-1.0, beta_slow=-2.0), "beta_fast must be > 0"),
    ],
)
def test_negative_where_a_positive_value_is_required_is_refused(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_longrope_lists_longer_than_256_pairs_are_accepted():
    """600 channels: 300 pairs, past CPython's cache of small ints (the length check compares values)."""
    cfg = {"model_type": "phi3", "head_dim": 600, "hidden_size": 4800, "num_attention_heads": 8,
           "max_position_embeddings": 8192, "original_max_position_embeddings": 4096,
           "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 300, "long_factor": [2.0] * 300}}
    got = RopeConfig.from_hf(cfg)
    assert got.rotary_dim == 600 and len(got.scaling.long_factor) == 300


def test_longrope_factors_must_be_positive():
    for bad in (0.0, -0.5):
        with pytest.raises(ValueError, match=r"short_factor\[1\] must be > 0"):
            rope_ref.LongRoPE([1.0, bad], [1.0, 2.0], 4096)


def test_a_one_token_original_context_is_accepted_from_hf():
    from rope_ref.scaling import scaling_from_hf

    got = scaling_from_hf({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=1)
    assert got == rope_ref.DynamicNTK(2.0, 1)


class _Toy(rope_ref.scaling_base.Scaling):
    """A scaling whose table and attention factor the test chooses (validate is checked at the base class)."""

    def __init__(self, table=None, factor=1.0, long_table=None, length_dependent=False):
        self.table, self.factor, self.long_table = table, factor, long_table
        self.length_dependent = length_dependent

    def inv_freq(self, base, rotary_dim, seq_len):
        if seq_len is not None and self.long_table is not None:
            return self.long_table
        return np.ones(rotary_dim // 2) if self.table is None else self.table

    def attention_factor(self, rotary_dim, seq_len):
        return self.factor

    def __repr__(self):
        return "Toy()"


def test_scaling_base_defaults():
    base = rope_ref.scaling_base.Scaling
    assert base.length_dependent is False and base.zero_frequencies is False
    assert base().attention_factor(8, None) == 1.0 and base().attention_factor(8, 4096) == 1.0


@pytest.mark.parametrize(
    "toy, match",
    [
        (_Toy(table=np.ones(3)), "no valid frequency table for rotary_dim=8"),
        (_Toy(table=np.array([1.0, 0.5, 0.0, 0.25])), "no valid frequency table"),
        (_Toy(long_table=np.array([1.0, 0.5, 0.0, 0.25]), length_dependent=True), "no valid frequency table"),
        (_Toy(factor=0.0), "gives attention factor 0.0; it must be finite and > 0"),
        (_Toy(factor=-1.0), "gives attention factor -1.0"),
        (_Toy(factor=float("inf")), "gives attention factor inf"),
    ],
    ids=["short", "zero-entry", "zero-entry-when-long", "factor-zero", "factor-negative", "factor-inf"],
)
def test_scaling_validate_refuses_at_the_base_class(toy, match):
    with pytest.raises(ValueError, match=match):
        toy.validate(10000.0, 8)
    _Toy(long_table=np.zeros(4), length_dependent=False).validate(10000.0, 8)  # never asked for long


@pytest.mark.parametrize(
    "toy, match",
    [
        (_Toy(table=np.array([1.0, np.nan, 0.5, 0.25])),
         r"^Toy\(\) gives no valid frequency table for rotary_dim=8, base=20000.0$"),
        (_Toy(table=np.array([1.0, -0.5, 0.5, 0.25])), "no valid frequency table"),
        (_Toy(table=np.array([1.0, np.inf, 0.5, 0.25])), "no valid frequency table"),
        (_Toy(table=np.ones((1, 4))), "no valid frequency table"),
        (_Toy(table=np.zeros(4), long_table=np.ones(4), length_dependent=True), "no valid frequency table"),
        (_Toy(factor=float("nan")), r"^Toy\(\) gives attention factor nan; it must be finite and > 0$"),
    ],
    ids=["nan-entry", "negative-entry", "inf-entry", "2d-table", "bad-at-the-original-length", "factor-nan"],
)
def test_scaling_validate_refuses_every_bad_table_at_the_base_class(toy, match):
    with pytest.raises(ValueError, match=match):
        toy.validate(20000.0, 8)


def test_scaling_base_leaves_the_table_and_the_hf_dict_to_its_subclasses():
    base = rope_ref.scaling_base.Scaling()
    with pytest.raises(NotImplementedError):
        base.inv_freq(10000.0, 8, None)
    with pytest.raises(NotImplementedError):
        base.to_hf()


class _BadOnlyPastATrillion(_Toy):
    """Frequencies valid up to 2**40 - 1 tokens, zero from 2**40 on (where validate looks)."""

    def inv_freq(self, base, rotary_dim, seq_len):
        long = seq_len is not None and seq_len >= 2**40
        return np.zeros(rotary_dim // 2) if long else np.ones(rotary_dim // 2)


def test_scaling_validate_looks_at_a_very_long_length_only_when_length_dependent():
    with pytest.raises(ValueError, match="no valid frequency table"):
        _BadOnlyPastATrillion(length_dependent=True).validate(10000.0, 8)
    _BadOnlyPastATrillion(length_dependent=False).validate(10000.0, 8)
