"""Scalings: linear, NTK-aware, dynamic NTK, YaRN, Llama 3 and LongRoPE tables and rotations; then
(issue 15) an explicit ``seq_len``, scaling parameters at non-default values, and scalings with partial
rotary. No operations of their own: the cases use those of :mod:`.tables` and :mod:`.rotation`."""

from __future__ import annotations

import numpy as np

from rope_ref.case import Case

from .common import activation_rows, longrope_scaling, make_config, table_rows

__all__ = [
    "scaling_cases",
    "explicit_seq_len_cases",
    "scaling_parameter_cases",
    "scaling_partial_cases",
]

DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

#: ``(name, head_dim, base, YaRN parameters, description)`` of the YaRN table variants.
_YARN_TABLES = (
    (
        "yarn_f10_d128",
        128,
        1e4,
        {"factor": 10.0, "original_max_position_embeddings": 2048},
        "HF snapshot config: factor 10, beta 32/1, truncate",
    ),
    (
        "yarn_f32_notrunc_d64",
        64,
        150000.0,
        {"factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False},
        "gpt-oss-like: truncate=False",
    ),
    (
        "yarn_f64_af1_d64",
        64,
        1e4,
        {"factor": 64.0, "original_max_position_embeddings": 4096, "attention_factor": 1.0},
        "explicit attention_factor 1.0 must win",
    ),
    (
        "yarn_f16_mscale1_d64",
        64,
        1e4,
        {"factor": 16.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0},
        "mscale == mscale_all_dim: factor 1",
    ),
    (
        "yarn_f40_mscale0707_d64",
        64,
        1e4,
        {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 0.707, "mscale_all_dim": 0.707},
        "DeepSeek-V2 mscale 0.707",
    ),
    (
        "yarn_f40_mscale1_all0_d64",
        64,
        1e4,
        {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.0},
        "mscale 1, mscale_all_dim 0",
    ),
)

#: ``(name, head_dim, base, YaRN parameters, description)``: scaling parameters at non-default values,
#: each as the released model ships them.
_YARN_PARAMETERS = (
    (
        "yarn_kimi_k2_d64",
        64,
        50000.0,
        {
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "Kimi-K2: beta_fast == beta_slow == 1 (zero-width ramp, HF nudges high by 0.001)",
    ),
    (
        "yarn_beta16_2_d64",
        64,
        10000.0,
        {"factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0, "beta_slow": 2.0},
        "YaRN beta_fast 16, beta_slow 2",
    ),
    (
        "yarn_beta16_2_notrunc_d64",
        64,
        10000.0,
        {
            "factor": 16.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
        },
        "YaRN beta 16/2 with truncate=False",
    ),
    (
        "yarn_gptoss_trunc_d64",
        64,
        150000.0,
        {"factor": 32.0, "original_max_position_embeddings": 4096, "truncate": True},
        "gpt-oss settings with truncate=True (the other way round)",
    ),
    (
        "yarn_mscale1_all0707_d64",
        64,
        10000.0,
        {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.707},
        "mscale 1, mscale_all_dim 0.707: ratio of two mscales",
    ),
    (
        "yarn_af08_d64",
        64,
        10000.0,
        {"factor": 8.0, "original_max_position_embeddings": 4096, "attention_factor": 0.8},
        "explicit attention_factor below 1",
    ),
)


def _yarn(d: int, base: float, params: dict) -> dict:
    return make_config(d, "half", base=base, scaling={"rope_type": "yarn", **params})


def _longrope_dict() -> dict:
    short = [round(1.0 + 0.05 * i, 6) for i in range(16)]
    long = [round(1.25**i, 6) for i in range(16)]
    return {
        "rope_type": "longrope",
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "short_factor": short,
        "long_factor": long,
    }


def scaling_cases() -> list[Case]:
    """Each scaling type's tables and rotations, the dynamic-NTK switch and statelessness pair (long
    call first, short after) and the LongRoPE short/long switch."""
    tables = ("inv_freq", "attention_factor")
    lin = make_config(64, "half", scaling={"rope_type": "linear", "factor": 4.0})
    cases = table_rows([("linear_f4_d64", lin, tables, None, "scaling_linear", "linear factor 4: theta/4")])
    cases += activation_rows("apply", [
        ("linear_f4_d64", lin, (6, 64), [0, 1, 100, 4096, 8191, 16384], "scaling_linear",
         "linear factor 4 beyond 2x a 2048 context"),
    ])  # fmt: skip
    ntk = make_config(64, "half", scaling={"rope_type": "ntk", "factor": 4.0})
    cases += table_rows(
        [("ntk_a4_d64", ntk, tables, None, "scaling_ntk", "NTK-aware alpha 4: base*4^(d/(d-2))")]
    )
    cases += activation_rows("apply", [
        ("ntk_a4_d64", ntk, (4, 64), [0, 100, 4096, 8191], "scaling_ntk",
         "NTK-aware alpha 4 at long positions"),
    ])  # fmt: skip
    # Dynamic NTK: tables at the switch point, then the statelessness pair (long call first, short after).
    dyn = make_config(64, "half", scaling=DYNAMIC)
    cases += table_rows([
        ("dynamic_f2_d64", dyn, ("inv_freq",), None, "scaling_dynamic",
         "dynamic NTK factor 2, L0 2048: unchanged up to 2048", {"seq_lens": (2048, 2049, 16384)}),
    ])  # fmt: skip
    cases += activation_rows("apply", [
        ("dynamic_switch_d64", dyn, (3, 64), [0, 1000, 2048], "scaling_dynamic",
         "max position 2048 -> seq_len 2049 > L0: the scaled base applies"),
        ("dynamic_long_d64", dyn, (4, 64), [0, 1000, 8000, 16383], "scaling_dynamic",
         "dynamic NTK at seq_len 16384 (runs first)"),
        ("dynamic_short_after_long_d64", dyn, (5, 64), [0, 1, 50, 500, 2047], "scaling_dynamic_state",
         "runs right after dynamic_long on the same backend: seq_len 2048 must "
         "use the unscaled base (no state kept from the long call)", {"requires_name": "dynamic_long_d64"}),
    ])  # fmt: skip
    rows = []
    for name, d, base, params, desc in _YARN_TABLES:
        cfg = _yarn(d, base, params)
        rows += [
            (name, cfg, ("inv_freq",), None, "scaling_yarn", desc),
            (name, cfg, ("attention_factor",), None, "yarn_attention_factor", desc),
        ]
    cases += table_rows(rows)
    yarn = make_config(
        64, "half", scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    )
    cases += activation_rows("apply", [
        ("yarn_f4_d64", yarn, (5, 64), [0, 1, 100, 4096, 8191], "scaling_yarn",
         "YaRN factor 4 beyond 2x a 2048 context"),
        ("yarn_f4_attention_d64", yarn, (2, 64), [0, 3], "yarn_attention_factor",
         "position 0 gives attention_factor * x (factor applied once, to cos and sin)"),
    ])  # fmt: skip
    l3_128 = make_config(128, "half", base=5e5, scaling=LLAMA3)
    l3_64 = make_config(64, "half", base=5e5, scaling={**LLAMA3, "factor": 32.0})
    cases += table_rows([
        ("llama3_f8_d128", l3_128, ("inv_freq",), None, "scaling_llama3",
         "Llama 3.1: all three wavelength bands"),
        ("llama3_f32_d64", l3_64, ("inv_freq",), None, "scaling_llama3", "Llama 3 factor 32, d=64"),
    ])  # fmt: skip
    l3 = make_config(64, "half", base=5e5, scaling=LLAMA3)
    cases += activation_rows("apply", [
        ("llama3_f8_d64", l3, (4, 64), [100, 9000, 30000, 131071], "scaling_llama3",
         "Llama 3 scaling applied at positions up to 131071"),
    ])  # fmt: skip
    # LongRoPE: short factors up to seq_len 4096 (HF '>' rule), long factors from 4097.
    lr = make_config(32, "half", scaling=_longrope_dict())
    cases += table_rows([
        ("longrope_d32", lr, tables, None, "scaling_longrope_switch",
         "LongRoPE: short factors for seq_len <= 4096, long above", {"seq_lens": (4095, 4096, 4097, 131072)}),
    ])  # fmt: skip
    return cases + activation_rows("apply", [
        ("longrope_short_d32", lr, (3, 32), [0, 100, 4095], "scaling_longrope_switch",
         "max position 4095 -> seq_len 4096: short factors"),
        ("longrope_long_d32", lr, (3, 32), [0, 100, 4096], "scaling_longrope_switch",
         "max position 4096 -> seq_len 4097: long factors"),
        ("longrope_far_d32", lr, (2, 6, 32), [0, 1, 8192, 20000, 65536, 131071], "scaling_longrope",
         "positions up to 32x a 4096 context (seq_len 131072): long factors and the "
         "attention factor sqrt(1 + ln 32 / ln 4096), position 0 included"),
    ])  # fmt: skip


def explicit_seq_len_cases() -> list[Case]:
    """seq_len passed explicitly, different from max(positions) + 1, for length-dependent scalings."""
    dyn = make_config(64, "half", scaling=DYNAMIC)
    lr = make_config(32, "half", scaling=longrope_scaling(16, 32.0))
    bug = "explicit_seq_len"
    cases = activation_rows("apply", [
        ("seq_len_dynamic_d64", dyn, (4, 2, 64), np.array([0, 17, 100, 1000])[:, None], bug,
         "dynamic NTK at seq_len 16384 given explicitly (positions only up to 1000)", {"seq_len": 16384}),
    ])  # fmt: skip
    cases += activation_rows("apply_vjp", [
        ("seq_len_longrope_d32", lr, (3, 2, 32), np.array([1, 50, 3000])[:, None], bug,
         "LongRoPE: explicit seq_len 8192 > 4096 selects the long factors and the attention factor, "
         "though every position is below 4096", {"seq_len": 8192}),
    ])  # fmt: skip
    cases += table_rows([
        ("seq_len_longrope_d32", lr, ("cos_sin",), [0, 5, 4000], bug,
         "cos/sin with explicit seq_len 16384: long factors, attention factor != 1", {"seq_lens": (16384,)}),
    ])  # fmt: skip
    return cases + activation_rows("apply", [
        ("seq_len_short_longrope_d32", lr, (2, 2, 32), np.array([10, 9000])[:, None], bug,
         "explicit seq_len 4096 (a short cache) with a position beyond it: short factors", {"seq_len": 4096}),
    ])  # fmt: skip


def scaling_parameter_cases() -> list[Case]:
    """Scaling parameters at their non-default values: tables, cos/sin and apply of each YaRN variant."""
    bug, cases = "scaling_parameters", []
    for name, d, base, params, desc in _YARN_PARAMETERS:
        cfg = _yarn(d, base, params)
        cases += table_rows(
            [
                (name, cfg, ("inv_freq", "attention_factor"), None, bug, desc),
                (
                    name,
                    cfg,
                    ("cos_sin",),
                    [0, 3, 100, 5000, 60000],
                    bug,
                    desc + "; cos/sin carry the attention factor",
                ),
            ]
        )
        cases += activation_rows(
            "apply", [(name, cfg, (3, 2, d), np.array([7, 4097, 50000])[:, None], bug, desc)]
        )
    return cases


def scaling_partial_cases() -> list[Case]:
    """Scalings with rotary_dim < head_dim: every scaled table is over rotary_dim, not head_dim."""
    phi4 = longrope_scaling(48, 32.0)  # Phi-4-mini: LongRoPE over 96 of 128 channels
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    variants = (
        ("longrope_phi4mini_d128_r96", 128, 96, "half", 10000.0, phi4, [5, 4095, 4096, 30000]),
        ("yarn_d128_r64_interleaved", 128, 64, "interleaved", 10000.0, yarn, [3, 2049, 16000]),
        ("llama3_d128_r96", 128, 96, "half", 500000.0, LLAMA3, [100, 9000, 131071]),
    )
    bug, cases = "scaling_partial_rotary", []
    for name, d, rd, layout, base, sc, pos in variants:
        cfg = make_config(d, layout, rotary_dim=rd, base=base, scaling=sc)
        desc = f"{sc['rope_type']} scaling with rotary_dim {rd} of head_dim {d} ({layout})"
        cases += table_rows([(name, cfg, ("inv_freq",), None, bug, desc, {"seq_lens": (None, 8192)})])
        cases += activation_rows("apply", [(name, cfg, (len(pos), 1, d), np.array(pos)[:, None], bug, desc)])
    return cases
