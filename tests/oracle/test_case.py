"""``rope_ref.case``: a stored case's config, multi-axis spec and kernel-shape positions read back.

Every JSON form is written out here by hand (a YaRN dict, a two-block spec with a chosen ``freq_index``,
``offset`` and ``cu_seqlens`` positions on ``sbhd`` / ``thd``), and the expected objects and ids are
worked out from the documented meaning (``docs/golden-format.md``), not from the writers.
"""

import numpy as np
import pytest

import rope_ref
from rope_ref import case as case_mod
from rope_ref.multiaxis import MultiAxisRope


def test_config_from_dict_reads_every_key():
    d = {"head_dim": 64, "layout": "interleaved", "rotary_dim": 32, "base": 500.0,
         "scaling": {"rope_type": "linear", "factor": 4.0}}  # fmt: skip
    cfg = case_mod.config_from_dict(d)
    assert cfg == rope_ref.RopeConfig(
        64, layout="interleaved", rotary_dim=32, base=500.0, scaling=rope_ref.scaling.Linear(4.0)
    )
    assert d["scaling"] == {"rope_type": "linear", "factor": 4.0} and "head_dim" in d  # not consumed
    plain = case_mod.config_from_dict({"head_dim": 16, "layout": "half", "scaling": None})
    assert plain == rope_ref.RopeConfig(16, layout="half")


def test_spec_from_dict_keeps_blocks_and_freq_index():
    table = {"head_dim": 8, "layout": "half", "base": 500.0, "scaling": None}
    d = {"head_dim": 12, "layout": "half", "streams": [0, 1, 1, 0], "tables": [table, dict(table, base=9.0)],
         "freq_index": [1, 0, 1, 3], "blocks": 2}  # fmt: skip
    spec = case_mod.spec_from_dict(d)
    t0, t1 = (
        rope_ref.RopeConfig(8, layout="half", base=500.0),
        rope_ref.RopeConfig(8, layout="half", base=9.0),
    )
    assert spec == MultiAxisRope(
        12, layout="half", streams=(0, 1, 1, 0), tables=(t0, t1), freq_index=(1, 0, 1, 3), blocks=2
    )
    assert spec.blocks == 2 and spec.freq_index == (1, 0, 1, 3)


def test_case_rope_config():
    c = case_mod.Case(
        "c", "apply", {"head_dim": 16, "layout": "half", "base": 7.0}, {}, {}, "none", "default"
    )
    assert c.rope_config() == rope_ref.RopeConfig(16, layout="half", base=7.0)
    with pytest.raises(ValueError, match="case 'ids' \\(chatglm_position_ids\\) has no RoPE config"):
        case_mod.Case("ids", "chatglm_position_ids", None, {}, {}, "none", "default").rope_config()


def test_placed_positions_of_each_form():
    # ids (B, S) on bshd
    ids = np.array([[3, 4, 5], [7, 8, 9]])
    got = case_mod.placed_positions({"positions": ids}, {"axes": "bshd"}, (2, 3, 4, 8))
    assert got.shape == (2, 3, 4) and got.dtype == np.float64 and got[1, 2, 3] == 9 and got[0, 1, 0] == 4
    # a per-row offset on sbhd (batch is axis 1): ids offset[b] + s
    got = case_mod.placed_positions(
        {"offset": np.array([10, 20])}, {"axes": "sbhd", "form": "offset"}, (3, 2, 4, 8)
    )
    assert (
        got.shape == (3, 2, 4)
        and got[:, 0, 0].tolist() == [10, 11, 12]
        and got[:, 1, 2].tolist() == [20, 21, 22]
    )
    # the inputs' offset wins over a params' one
    got = case_mod.placed_positions(
        {"offset": np.array([10, 20])}, {"axes": "sbhd", "form": "offset", "offset": 99}, (3, 2, 4, 8)
    )
    assert got[0, :, 0].tolist() == [10, 20]
    # a scalar offset stored in params
    got = case_mod.placed_positions({}, {"axes": "bhsd", "form": "offset", "offset": 6}, (2, 4, 3, 8))
    assert got[1, 3].tolist() == [6, 7, 8]
    # cu_seqlens with start offsets from the inputs, then from params
    inputs = {"cu_seqlens": np.array([0, 2, 5]), "start_offsets": np.array([4, 100])}
    got = case_mod.placed_positions(inputs, {"axes": "thd", "form": "cu_seqlens"}, (5, 3, 8))
    assert got[:, 0].tolist() == [4, 5, 100, 101, 102]
    got = case_mod.placed_positions(
        {"cu_seqlens": np.array([0, 2, 5])},
        {"axes": "thd", "form": "cu_seqlens", "start_offset": 3},
        (5, 3, 8),
    )
    assert got[:, 2].tolist() == [3, 4, 3, 4, 5]
    with pytest.raises(ValueError, match="unknown positions form 'ragged'"):
        case_mod.placed_positions({}, {"axes": "thd", "form": "ragged"}, (5, 3, 8))


def test_v_heads_index_is_the_last_kv_heads():
    qkv = np.arange(2 * 3 * (6 + 2 * 2)).reshape(2, 3, 10)
    idx = case_mod.v_heads_index({"num_heads_q": 6, "num_heads_kv": 2, "axes": "bshd"}, 4)
    assert idx == (slice(None), slice(None), slice(8, 10), slice(None))
    assert qkv[idx[:3]].shape == (2, 3, 2)
    assert case_mod.v_heads_index({"num_heads_q": 4, "num_heads_kv": 1, "axes": "thd"}, 3) == (
        slice(None), slice(5, 6), slice(None),
    )  # fmt: skip
