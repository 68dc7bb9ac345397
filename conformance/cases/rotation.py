"""Rotation: the operation ``apply`` in both layouts, partial rotary, every head size, heads, per-row,
decode, fractional, precision-revealing, very large and negative positions."""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref
from rope_ref.case import Case

from .common import activation_rows, make_config, rope_aux, rope_config, table_rows
from .operations import operation

__all__ = ["rotation_cases", "negative_cases"]


@operation("apply", auxiliary=rope_aux)
def _apply(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    cfg = rope_config(config)
    return {"out": rope_ref.apply(inputs["x"], inputs["positions"], cfg, seq_len=params.get("seq_len"))}


#: ``(name, positions, base, bug class, what it reveals)`` of the D=128 precision and large-position cases.
_PRECISION = (
    (
        "precision_256",
        [255, 256, 257],
        1e4,
        "precision_positions",
        "257 is the first integer bf16 cannot hold",
    ),
    (
        "precision_2048",
        [2047, 2048, 2049],
        1e4,
        "precision_positions",
        "2049 is the first integer fp16 cannot hold",
    ),
    (
        "precision_angles_512",
        [300, 400, 511, 512],
        1e4,
        "precision_angles",
        "angle pos*inv_freq in bf16/fp16",
    ),
    (
        "precision_4095",
        [1857, 4095, 15962],
        1e4,
        "precision_positions",
        "gpt-neox #1003, sglang-jax #1472, candle",
    ),
    ("precision_32768", [32768, 32769], 5e5, "precision_positions", "Megatron #535 (fp16 positions at 32k)"),
    ("large_131071", [131071], 1e4, "large_position_trig", "position 2^17 - 1"),
    ("large_2p20", [2**20], 1e4, "large_position_trig", "position 2^20"),
    (
        "large_2p24",
        [2**24 - 1, 2**24, 16_800_000],
        1e4,
        "large_position_trig",
        "positions around 2^24 (16.8M)",
    ),
)

#: ``(head_dim, rotary_dim, layout, bug class, description)`` of the partial-rotary cases.
_PARTIAL = (
    (80, 32, "half", "partial_rotary", "phi-2: rotate the first 32 of 80 channels, pass 48 through"),
    (80, 20, "half", "partial_rotary", "stablelm: rotary 25% (20 of 80)"),
    (256, 64, "half", "inv_freq_exponent", "Qwen3.5-like rd=64 of 256 at positions 700..2355 (pie #603)"),
    (128, 64, "interleaved", "partial_rotary", "GLM: interleaved pairs in the first half of the head"),
    (256, 64, "interleaved", "partial_rotary", "GPT-J: rotary_dim 64 of 256, interleaved"),
)


def rotation_cases() -> list[Case]:
    """``apply`` across layouts, head sizes, heads and position regimes."""
    rows: list[tuple] = []
    for layout in ("half", "interleaved"):
        desc = f"{layout} layout, x (B,H,S,D)=(2,3,6,64); same x as the other layout"
        shared = {"seed_name": "layout_basic_d64"}
        rows.append(
            (
                f"layout_{layout}_d64",
                make_config(64, layout),
                (2, 3, 6, 64),
                [0, 1, 2, 7, 63, 511],
                "layout",
                desc,
                shared,
            )
        )
    tiny = {"x_values": np.tile([1.0, 0.0, 0.0, 1.0], (4, 1))}
    for layout in ("half", "interleaved"):
        desc = f"hand-checkable: D=4, theta=(1, 0.01), x=[1,0,0,1], {layout}; position 0 exact"
        rows.append(
            (
                f"tiny_d4_{layout}",
                make_config(4, layout),
                (4, 4),
                [0, 1, 3, 100],
                "rotation_direction",
                desc,
                tiny,
            )
        )
    rows += [
        (
            "tiny_d2",
            make_config(2, "half"),
            (4, 2),
            [0, 1, 2, 3],
            "rotation_direction",
            "hand-checkable: D=2, x=[1,0] rotates to [cos m, sin m]",
            {"x_values": np.tile([1.0, 0.0], (4, 1))},
        ),
        (
            "positions_arange_d32",
            make_config(32, "half"),
            (1, 2, 16, 32),
            np.arange(16),
            "position_offset",
            "positions 0..15 (an off-by-one position shifts every row)",
        ),
    ]
    for d, rd, layout, bug, desc in _PARTIAL:
        config = make_config(d, layout, rotary_dim=rd)
        rows.append((f"partial_{layout}_d{d}_r{rd}", config, (2, 4, d), [0, 5, 700, 2355], bug, desc))
    for layout, dims, what in (
        ("half", (2, 4, 6, 8, 16, 32, 64, 72, 80, 96, 120, 128, 256), "half layout"),
        ("interleaved", (6, 72, 120, 256), "interleaved"),
    ):
        for d in dims:
            desc = f"head_dim={d}, {what}"
            rows.append(
                (f"head_dim_{d}_{layout}", make_config(d, layout), (4, d), [0, 3, 17, 100], "head_dims", desc)
            )
    per_row = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 3, 3, 9, 100, 101, 0, 2, 17], [0] * 9])
    rows += [
        (
            "all_heads_d32",
            make_config(32, "half"),
            (1, 8, 3, 32),
            [1, 9, 40],
            "heads",
            "8 heads: every head must be rotated (aprender #2079 rotated only head 0)",
        ),
        (
            "per_row_positions_d32",
            make_config(32, "half"),
            (3, 2, 9, 32),
            per_row[:, None, :],
            "per_row_positions",
            "x (B,H,S,D), positions (B,1,S): gaps, repeats, an all-zero row; row 0 not reused",
        ),
        (
            "decode_batched_d64",
            make_config(64, "half"),
            (5, 4, 1, 64),
            np.array([37, 12, 0, 100, 2049])[:, None, None],
            "decode_offsets",
            "decode: seq_len=1, batch 5, per-row offsets (MLX #3494)",
            {"axes": "bhsd"},
        ),
        (
            "fractional_d32",
            make_config(32, "interleaved"),
            (5, 2, 32),
            np.array([0.5, 1.25, 2.75, 100.5, 1000.125])[:, None],
            "fractional_positions",
            "fractional positions (must not be rounded to integers)",
        ),
    ]
    for name, pos, base, bug, desc in _PRECISION:
        config = make_config(128, "half", base=base)
        desc = f"D=128, base {base:g}: {desc}"
        rows.append(
            (f"{name}_d128", config, (len(pos), 2, 128), np.array(pos)[:, None], bug, desc, {"axes": "shd"})
        )
    return activation_rows("apply", rows)


def negative_cases() -> list[Case]:
    """Negative positions: context shift rotates cached keys by -k; RoPE is defined for every real m."""
    cfg = make_config(64, "half")
    neg = [-1, -2, -7, -256, -257, -2049, -4097, -100000]
    bug = "negative_positions"
    desc = "negative positions (context shift): m = -k rotates by -k theta, no wrap or clamp"
    cases = activation_rows(
        "apply", [("negative_d64", cfg, (len(neg), 1, 64), np.array(neg)[:, None], bug, desc)]
    )
    desc = "cos(-m theta) = cos(m theta), sin(-m theta) = -sin(m theta)"
    cases += table_rows([("negative_d64", cfg, ("cos_sin",), [-1, -3, -257, -2049, -65536, 0, 5], bug, desc)])
    vjp = (
        "negative_interleaved_d32",
        make_config(32, "interleaved"),
        (2, 4, 32),
        np.array([[-5, -4, -3, -2], [-300, 0, 300, -9000]]),
        bug,
        "VJP at negative positions, per-row (rotates grad_out by +k theta)",
    )
    return cases + activation_rows("apply_vjp", [vjp])
