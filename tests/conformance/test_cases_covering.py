"""The covering families of the catalogue (conformance/cases/covering.py, custom.py): every scaling x regime
pair once, the families shipped in every I/O dtype, the blind spots they close, and custom sets. Expected
ids, counts and values are written by hand, never read back from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance import catalogue

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


NEW_FAMILIES = (
    "crossed_axes",
    "negative_positions",
    "explicit_seq_len",
    "scaling_parameters",
    "scaling_partial_rotary",
    "table_cache_state",
    "kernel_tails",
    "chatglm_incremental",
)


def test_covering_is_pairwise_and_shipped(by_id):
    rows = catalogue.covering_rows()
    assert len(rows) == 7 * 6  # every scaling x regime pair exactly once
    assert {(r[0], r[1]) for r in rows} == {
        (s, p) for s in catalogue.COVER_SCALINGS for p in catalogue.COVER_REGIMES
    }
    assert catalogue.pairwise_gaps(rows) == []
    # A covering that always uses the half layout leaves (scaling, interleaved) pairs open.
    half_only = [(s, p, "half", part, op) for s, p, _, part, op in rows]
    gaps = catalogue.pairwise_gaps(half_only)
    assert ("scaling", "layout", "yarn", "interleaved") in gaps
    crossed = [c for c in by_id.values() if c.bug_class == "crossed_axes"]
    assert len([c for c in crossed if c.op == "cos_sin"]) == 14
    assert len([c for c in crossed if c.op in ("apply", "apply_vjp")]) == 28 * 4


def test_new_families_have_cases_in_every_io_dtype(cases):
    for family in NEW_FAMILIES:
        mine = [c for c in cases if c.bug_class == family]
        assert mine, family
        assert family in catalogue.BUG_CLASSES
        activations = [c for c in mine if c.io_dtype is not None]
        if family != "chatglm_incremental":
            assert {c.io_dtype for c in activations} == {"float64", "float32", "float16", "bfloat16"}, family


def test_blind_spots_are_shipped(by_id):
    # negative positions in apply, cos_sin and apply_vjp
    assert np.min(by_id["apply-negative_d64-fp32"].inputs["positions"]) == -100000
    assert np.min(by_id["cos_sin-negative_d64"].inputs["positions"]) < 0
    assert np.min(by_id["apply_vjp-negative_interleaved_d32-bf16"].inputs["positions"]) < 0
    # explicit seq_len different from max(positions) + 1
    for cid in ("apply-seq_len_dynamic_d64-fp16", "apply_vjp-seq_len_longrope_d32-fp32"):
        c = by_id[cid]
        assert c.params["seq_len"] != int(np.max(c.inputs["positions"])) + 1
    assert by_id["cos_sin-seq_len_longrope_d32-L16384"].params["seq_len"] == 16384
    # Kimi-K2 betas (equal), truncate both ways, mscale pair, attention factor below 1
    kimi = by_id["inv_freq-yarn_kimi_k2_d64"].config["scaling"]
    assert kimi["beta_fast"] == kimi["beta_slow"] == 1.0
    assert by_id["inv_freq-yarn_beta16_2_notrunc_d64"].config["scaling"]["truncate"] is False
    assert by_id["inv_freq-yarn_gptoss_trunc_d64"].config["scaling"]["truncate"] is True
    assert float(by_id["attention_factor-yarn_af08_d64"].expected["value"]) == 0.8
    # LongRoPE 96 of 128 (Phi-4-mini)
    phi = by_id["apply-longrope_phi4mini_d128_r96-fp32"].config
    assert (phi["head_dim"], phi["rotary_dim"], phi["scaling"]["rope_type"]) == (128, 96, "longrope")
    # tail shapes: head counts and several hundred rows, none a multiple of 64
    heads = {by_id[f"apply-tail_{n}-fp32"].inputs["x"].shape[2] for n in ("heads28_d32", "heads40_d16")}
    assert heads == {28, 40}
    x71 = by_id["apply-tail_heads71_d8-bf16"].inputs["x"]
    assert x71.shape[2] == 71 and int(np.prod(x71.shape[:-1])) == 355
    # ChatGLM: a row with both mask tokens, left padding, next_position_ids
    from rope_ref import chatglm

    ids = by_id["chatglm_position_ids-mixed_masks_2d"].inputs["input_ids"]
    both = [(chatglm.MASK_TOKEN_ID in r) and (chatglm.GMASK_TOKEN_ID in r) for r in ids]
    assert any(both) and np.any(ids[:, 0] == 3)  # pad id 3 on the left


def test_custom_sets_default_to_revealing_positions_and_model_names():
    from rope_ref import RopeConfig

    pos = catalogue.revealing_positions(RopeConfig(128, layout="half"), 8)
    assert {257, 2049, 4097} <= set(pos.tolist())
    cs = catalogue.custom_cases(RopeConfig(64, layout="half"), name="llama-3-8b", ops=("apply",))
    assert [c.id for c in cs] == ["apply-llama-3-8b-fp32"]
    assert 2049 in cs[0].inputs["positions"].ravel().tolist()
