"""Table cache state (issue 15): call orders that break stateful caches. Each case requires (runs after)
the one named before it on the same backend; no operations of their own (``apply``)."""

from __future__ import annotations

import numpy as np

from rope_ref.case import Case

from .common import activation_rows, longrope_scaling, make_config

__all__ = ["state_order_cases"]


def state_order_cases() -> list[Case]:
    """Gemma 3 global then local (base 1e6, then 1e4); LongRoPE long then short; dynamic NTK long, then
    between the original and the grown length, then exactly the original, then one below it."""
    gemma_global, gemma_local = make_config(64, "half", base=1e6), make_config(64, "half", base=1e4)
    lr = make_config(32, "half", scaling=longrope_scaling(16, 32.0))
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
    dyn = make_config(64, "half", scaling=dynamic)
    # (name, config, positions, the case it runs after, description)
    order = (
        ("gemma3_global_base1e6_d64", gemma_global, [100, 5000, 30000], None,
         "Gemma 3 global layer: base 1e6 (runs first)"),
        ("gemma3_local_base1e4_d64", gemma_local, [1, 100, 1000], "gemma3_global_base1e6_d64",
         "Gemma 3 local layer right after a global one: same head_dim, base 1e4; a table cache "
         "keyed without the base serves the 1e6 table"),
        ("state_longrope_long_d32", lr, [0, 100, 9000], None,
         "LongRoPE long call (seq_len 9001, long factors; runs first)"),
        ("state_longrope_short_d32", lr, [0, 100, 2000], "state_longrope_long_d32",
         "LongRoPE short call right after a long one: short factors again, attention factor "
         "still that of the long context (HF keeps it; it depends on factor only)"),
        ("state_dynamic_long_d64", dyn, [0, 1000, 16383], None,
         "dynamic NTK long call, seq_len 16384 (first)"),
        ("state_dynamic_between_d64", dyn, [0, 100, 2999], "state_dynamic_long_d64",
         "then seq_len 3000: between the original 2048 and the grown 16384 (base for 3000, not 16384)"),
        ("state_dynamic_at_l0_d64", dyn, [0, 7, 2047], "state_dynamic_between_d64",
         "then seq_len exactly 2048 = original: the unscaled base (HF's reset test must be <=, not <)"),
        ("state_dynamic_below_l0_d64", dyn, [0, 7, 2046], "state_dynamic_at_l0_d64",
         "then seq_len 2047, one below the original: the unscaled base"),
    )  # fmt: skip
    rows = []
    for name, cfg, pos, after, desc in order:
        shape = (len(pos), 2, cfg["head_dim"])
        rows.append(
            (name, cfg, shape, np.array(pos)[:, None], "table_cache_state", desc, {"requires_name": after})
        )
    return activation_rows("apply", rows)
