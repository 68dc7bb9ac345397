"""``conformance.cases.kernel_shapes``: the kernel-shape catalogue as generated (not as shipped).

Every expected value is recomputed here from the case's own inputs and params: positions placed by hand
from the documented forms (HF ``(B, S)`` ids, ``offset[b] + s``, ``cu_seqlens`` restarts plus start
offsets; ``docs/golden-format.md``), rotated pair by pair with explicit cos/sin (RoFormer eq. 34) at
``base^(-2i/d)`` (the oracle's tables only for the scaled configs), by ``-m theta`` for ``inverse``,
twice for ``round_trip``, V copied for ``apply_qkv``. The catalogue's promises (distinct draws for q and
k, every activation quantised, the long varlen sequence, an active dynamic scaling) are checked on the
generated cases, so a change to the generator cannot hide behind the shipped files.
"""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.cases import kernel_shapes
from rope_ref.conformance.cases.kernel_shapes import (
    VARLEN_LENGTHS,
    kernel_shape_cases,
    kernel_shape_inverse_and_seq_len_cases,
)

import rope_ref
from rope_ref.case import config_from_dict

FAMILIES = {
    "axes_convention", "cache_offset", "strided_views", "gqa_heads", "packed_qkv", "varlen", "inplace",
    "inverse_rotation",
}  # fmt: skip


@pytest.fixture(scope="module")
def generated():
    return kernel_shape_cases() + kernel_shape_inverse_and_seq_len_cases()


@pytest.fixture(scope="module")
def fp64(generated):
    return [c for c in generated if c.io_dtype == "float64"]


@pytest.fixture(scope="module")
def all_fp64(fp64):
    return {c.id: c for c in fp64}


def _ids(case, shape) -> np.ndarray:
    """The ids the positions form stands for: ``(B, S)`` for axes with b and s, ``(T,)`` for thd."""
    p, inputs, axes = case.params, case.inputs, case.params["axes"]
    if p["form"] == "ids":
        return np.asarray(inputs["positions"], dtype=np.float64)
    if p["form"] == "offset":
        off = np.asarray(inputs["offset"] if "offset" in inputs else p["offset"], dtype=np.float64)
        b, s = shape[axes.index("b")], shape[axes.index("s")]
        return np.broadcast_to(off.reshape(-1, 1), (b, 1)) + np.arange(s)
    cu = np.asarray(inputs["cu_seqlens"])
    starts = inputs.get("start_offsets", p.get("start_offset") or 0)
    starts = np.broadcast_to(np.asarray(starts, dtype=np.float64), (cu.size - 1,))
    ids = np.empty(int(cu[-1]))
    for i in range(cu.size - 1):
        ids[cu[i] : cu[i + 1]] = starts[i] + np.arange(cu[i + 1] - cu[i])
    return ids


def _placed(case, shape) -> np.ndarray:
    ids, axes = _ids(case, shape), case.params["axes"]
    grid = np.indices(shape[:-1])
    if "t" in axes:
        return ids[grid[axes.index("t")]]
    return ids[grid[axes.index("b")], grid[axes.index("s")]]


def _rotate(x, pos, cfg, seq_len, sign=1.0):
    n, rd = cfg.rotary_dim // 2, cfg.rotary_dim
    if cfg.scaling is None:
        omega, amp = cfg.base ** (-np.arange(0, rd, 2) / rd), 1.0
    else:
        omega, amp = rope_ref.inv_freq(cfg, seq_len), rope_ref.attention_factor(cfg, seq_len)
    a = np.arange(n) if cfg.layout == "half" else np.arange(0, rd, 2)
    b = a + n if cfg.layout == "half" else a + 1
    t = sign * pos[..., None] * omega
    out = np.array(x, dtype=np.float64, copy=True)
    out[..., a] = amp * (x[..., a] * np.cos(t) - x[..., b] * np.sin(t))
    out[..., b] = amp * (x[..., b] * np.cos(t) + x[..., a] * np.sin(t))
    return out


def _want(case) -> dict[str, np.ndarray]:
    cfg = config_from_dict(case.config)
    main = {"apply_qk": "q", "apply_qkv": "qkv"}.get(case.op, "x")
    forward = _placed(case, case.inputs[main].shape)
    seq_len = case.params.get("seq_len")
    if seq_len is None and cfg.scaling is not None:
        seq_len = int(forward.max()) + 1
    sign = -1.0 if case.params.get("inverse") else 1.0
    if case.op == "apply_qk":
        k = case.inputs["k"]
        return {
            "q": _rotate(case.inputs["q"], forward, cfg, seq_len, sign),
            "k": _rotate(k, _placed(case, k.shape), cfg, seq_len, sign),
        }
    x = case.inputs[main]
    out = _rotate(x, forward, cfg, seq_len, sign)
    if case.op == "round_trip":
        out = _rotate(out, forward, cfg, seq_len, -1.0)
    if case.op == "apply_qkv":
        h = case.params["axes"].index("h")
        hq, hk = case.params["num_heads_q"], case.params["num_heads_kv"]
        v = (slice(None),) * h + (slice(hq + hk, hq + 2 * hk),)
        out[v] = x[v]
    return {"out": out}


def test_every_expected_value_matches_a_hand_placed_rotation(fp64):
    assert len(fp64) >= 33
    for case in fp64:
        want = _want(case)
        assert set(want) == set(case.expected), case.id
        for name, value in want.items():
            np.testing.assert_allclose(case.expected[name], value, rtol=0, atol=1e-9, err_msg=case.id)


def test_round_trip_of_yarn_is_a_squared_x(fp64):
    case = next(c for c in fp64 if c.id == "round_trip-bshd-yarn-half-fp64")
    a = 0.1 * np.log(4.0) + 1.0  # YaRN get_mscale(4)
    np.testing.assert_allclose(case.expected["out"], a * a * case.inputs["x"], rtol=1e-12, atol=1e-12)


def test_the_dynamic_inverse_case_is_scaled_by_its_forward_positions(fp64):
    case = next(c for c in fp64 if c.id == "apply_axes-thd-inverse-dynamic-interleaved-fp64")
    original = case.config["scaling"]["original_max_position_embeddings"]
    top = int(case.inputs["positions"].max())
    assert top + 1 > original  # the scaling acts
    cfg = config_from_dict(case.config)
    np.testing.assert_allclose(case.aux["inv_freq"], rope_ref.inv_freq(cfg, top + 1), rtol=1e-15)
    assert not np.allclose(case.aux["inv_freq"], rope_ref.inv_freq(cfg, None))


def test_every_family_in_every_dtype(generated):
    assert FAMILIES <= {c.bug_class for c in generated}
    for family in {c.bug_class for c in generated}:
        mine = [c for c in generated if c.bug_class == family]
        assert {c.io_dtype for c in mine} == {"float64", "float32", "float16", "bfloat16"}, family


def test_family_params_survive_the_defaults(fp64):
    assert {c.op for c in fp64} == {"apply_axes", "apply_qk", "apply_qkv", "round_trip"}
    trips = [c for c in fp64 if c.op == "round_trip"]
    assert {c.bug_class for c in trips} == {"inverse_rotation"} and len(trips) >= 2
    for c in fp64:
        if c.bug_class == "inplace":
            assert c.params["inplace"] is True, c.id
        if c.bug_class == "inverse_rotation" and c.op == "apply_axes":
            assert c.params["inverse"] is True, c.id
        if c.bug_class == "strided_views":
            assert c.params["view"]["kind"] in ("transpose", "slice", "strided"), c.id
    slices = [c.params["view"] for c in fp64 if (c.params["view"] or {}).get("kind") == "slice"]
    assert any(v["before"] > 0 and v["after"] > 0 and v["before"] != v["after"] for v in slices)


def test_q_and_k_are_distinct_draws(fp64):
    """Not the same random stream: neither the same head block nor the same leading values."""
    for c in (c for c in fp64 if c.op == "apply_qk"):
        h = c.params["axes"].index("h")
        q, k = c.inputs["q"], c.inputs["k"]
        assert not np.isclose(np.take(q, range(k.shape[h]), axis=h), k).any(), c.id
        assert not np.isclose(q.ravel()[: k.size], k.ravel()).any(), c.id


@pytest.mark.parametrize("io", ["float16", "bfloat16", "float32"])
def test_every_activation_is_representable_in_its_io_dtype(generated, io):
    for c in (c for c in generated if c.io_dtype == io):
        for name in {"apply_qk": ("q", "k"), "apply_qkv": ("qkv",)}.get(c.op, ("x",)):
            v = np.asarray(c.inputs[name], dtype=np.float64)
            if io == "bfloat16":
                bits = v.astype(np.float32).view(np.uint32)
                assert (v.astype(np.float32) == v).all() and not (bits & 0xFFFF).any(), (c.id, name)
            else:
                assert (v.astype(io).astype(np.float64) == v).all(), (c.id, name)


def test_varlen_boundaries_and_lengths(fp64):
    assert 1 in VARLEN_LENGTHS and max(VARLEN_LENGTHS) > 2048
    seen = set()
    for c in (c for c in fp64 if "cu_seqlens" in c.inputs):
        cu = c.inputs["cu_seqlens"]
        axis = c.inputs["x" if "x" in c.inputs else "q" if "q" in c.inputs else "qkv"].shape[0]
        assert cu[0] == 0 and cu[-1] == axis and (np.diff(cu) > 0).all(), c.id
        seen |= set(np.diff(cu).tolist())
    assert set(VARLEN_LENGTHS) <= seen


def test_hf_ids_rows_differ_and_reach_far(fp64):
    rows = [
        c.inputs["positions"] for c in fp64 if c.params["form"] == "ids" and c.inputs["positions"].ndim == 2
    ]
    multi = [r for r in rows if r.shape[0] >= 2]
    assert multi and all(not np.array_equal(r[0], r[1]) for r in multi)
    assert max(int(r.max()) for r in rows) > 4000


#: id stem -> "bug-class layout head_dim rotary_dim scaling axes form activation-shapes" (as documented)
KERNEL = {
    "apply_axes-bshd-ids-half": "axes_convention half 16 16 - bshd ids x=2x9x3x16",
    "apply_axes-bhsd-ids-interleaved-partial": "axes_convention interleaved 16 8 - bhsd ids x=2x3x9x16",
    "apply_axes-sbhd-ids-half-partial": "axes_convention half 16 8 - sbhd ids x=9x2x3x16",
    "apply_axes-thd-ids-interleaved": "axes_convention interleaved 16 16 - thd ids x=13x3x16",
    "apply_axes-bshd-ids-yarn-interleaved": "axes_convention interleaved 16 16 yarn bshd ids x=2x9x3x16",
    "apply_axes-bshd-offset-scalar-half": "cache_offset half 16 16 - bshd offset x=2x7x3x16",
    "apply_axes-bhsd-offset-rows-interleaved": "cache_offset interleaved 16 16 - bhsd offset x=2x3x7x16",
    "apply_axes-sbhd-offset-rows-half-partial": "cache_offset half 16 8 - sbhd offset x=7x2x3x16",
    "apply_axes-bshd-decode-rows-interleaved": "cache_offset interleaved 16 16 - bshd offset x=4x1x3x16",
    "apply_axes-bshd-transposed-half": "strided_views half 16 16 - bshd ids x=2x9x4x16",
    "apply_axes-bhsd-transposed-interleaved-partial": "strided_views interleaved 16 8 - bhsd ids x=2x4x9x16",
    "apply_axes-bshd-q-of-packed-half": "strided_views half 16 16 - bshd ids x=2x9x4x16",
    "apply_axes-thd-k-of-packed-interleaved": "strided_views interleaved 16 16 - thd ids x=13x2x16",
    "apply_axes-bshd-stride2-half-partial": "strided_views half 16 8 - bshd ids x=2x9x3x16",
    "apply_qk-bshd-32-8-half": "gqa_heads half 16 16 - bshd ids q=1x5x32x16 k=1x5x8x16",
    "apply_qk-thd-17-1-interleaved": "gqa_heads interleaved 16 16 - thd ids q=6x17x16 k=6x1x16",
    "apply_qk-bhsd-16-4-half-partial-offset": "gqa_heads half 16 8 - bhsd offset q=2x16x5x16 k=2x4x5x16",
    "apply_qk-thd-varlen-16-4-interleaved": "gqa_heads interleaved 16 16 - thd cu_seqlens q=9x16x16 k=9x4x16",
    "apply_qkv-bshd-4-2-half": "packed_qkv half 16 16 - bshd ids qkv=2x6x8x16",
    "apply_qkv-thd-8-1-interleaved-partial": "packed_qkv interleaved 16 8 - thd cu_seqlens qkv=9x10x16",
    "apply_qkv-bhsd-4-4-interleaved-offset": "packed_qkv interleaved 16 16 - bhsd offset qkv=1x12x5x16",
    "apply_axes-thd-lengths-half": "varlen half 4 4 - thd cu_seqlens x=4149x1x4",
    "apply_axes-thd-lengths-starts-interleaved-partial": "varlen interleaved 6 4 - thd cu_seqlens x=4149x1x6",
    "apply_axes-thd-scalar-start-half": "varlen half 16 16 - thd cu_seqlens x=20x2x16",
    "apply_axes-bshd-q-of-packed-inplace-half": "inplace half 16 16 - bshd ids x=2x9x4x16",
    "apply_axes-bshd-stride2-inplace-interleaved-partial": "inplace interleaved 16 8 - bshd ids x=2x9x3x16",
    "apply_axes-bhsd-transposed-inplace-half": "inplace half 16 16 - bhsd ids x=2x4x9x16",
    "apply_qk-bshd-packed-aliasing-inplace-half": "inplace half 16 16 - bshd ids q=2x5x8x16 k=2x5x2x16",
    "apply_qkv-thd-qkv-inplace-interleaved": "inplace interleaved 16 16 - thd cu_seqlens qkv=9x6x16",
    "apply_axes-bshd-inverse-half": "inverse_rotation half 16 16 - bshd ids x=2x9x3x16",
    "apply_axes-thd-inverse-dynamic-interleaved": "inverse_rotation interleaved 16 16 "
    "dynamic thd ids x=12x2x16",
    "round_trip-bshd-yarn-half": "inverse_rotation half 16 16 yarn bshd ids x=2x9x3x16",
    "round_trip-thd-varlen-interleaved-partial": "inverse_rotation interleaved 16 8 "
    "- thd cu_seqlens x=20x2x16",
}
KERNEL_29 = {
    "apply_qk-bshd-gqa-inverse-half": "inverse_fused half 16 16 - bshd ids q=1x6x4x16 k=1x6x2x16",
    "apply_qk-thd-varlen-inverse-dynamic-interleaved": "inverse_fused interleaved 16 16 dynamic thd "
    "cu_seqlens "
    "q=9x2x16 k=9x1x16",
    "apply_qkv-bshd-qkv-inverse-interleaved-partial": "inverse_fused interleaved 16 8 "
    "- bshd ids qkv=1x5x8x16",
    "apply_axes-bshd-chunk-dynamic-half": "kernel_seq_len half 16 16 dynamic bshd ids x=1x8x2x16",
    "apply_qk-bhsd-chunk-offset-dynamic-interleaved": "kernel_seq_len interleaved 16 16 dynamic bhsd offset "
    "q=2x2x4x16 k=2x1x4x16",
    "apply_qkv-thd-chunk-longrope-half-partial": "kernel_seq_len half 16 8 "
    "longrope thd cu_seqlens qkv=7x4x16",
    "apply_axes-bshd-inverse-yarn-mscale-half": "inverse_attention_factor half 16 16 "
    "yarn bshd ids x=2x5x2x16",
    "apply_axes-thd-inverse-yarn-factor-interleaved-partial": "inverse_attention_factor interleaved "
    "16 8 yarn "
    "thd ids x=6x2x16",
}
#: id stem -> the params each row sets beyond the family defaults (seq_len None, no inverse, in place, view)
PARAMS = {
    "apply_axes-bshd-offset-scalar-half": {"offset": 1000},
    "apply_axes-bshd-transposed-half": {"view": {"kind": "transpose", "storage": "bhsd"}},
    "apply_axes-bhsd-transposed-interleaved-partial": {"view": {"kind": "transpose", "storage": "bshd"}},
    "apply_axes-bshd-q-of-packed-half": {"view": {"kind": "slice", "axis": "h", "before": 0, "after": 4}},
    "apply_axes-thd-k-of-packed-interleaved": {
        "view": {"kind": "slice", "axis": "h", "before": 4, "after": 2}
    },
    "apply_axes-bshd-stride2-half-partial": {"view": {"kind": "strided", "axis": "s", "step": 2}},
    "apply_qkv-bshd-4-2-half": {"num_heads_q": 4, "num_heads_kv": 2},
    "apply_qkv-thd-8-1-interleaved-partial": {"num_heads_q": 8, "num_heads_kv": 1},
    "apply_qkv-bhsd-4-4-interleaved-offset": {"offset": 70, "num_heads_q": 4, "num_heads_kv": 4},
    "apply_axes-thd-scalar-start-half": {"start_offset": 2045},
    "apply_axes-bshd-q-of-packed-inplace-half": {
        "inplace": True,
        "view": {"kind": "slice", "axis": "h", "before": 0, "after": 4},
    },
    "apply_axes-bshd-stride2-inplace-interleaved-partial": {
        "inplace": True,
        "view": {"kind": "strided", "axis": "s", "step": 2},
    },
    "apply_axes-bhsd-transposed-inplace-half": {
        "inplace": True,
        "view": {"kind": "transpose", "storage": "bshd"},
    },
    "apply_qk-bshd-packed-aliasing-inplace-half": {"inplace": True, "view": {"kind": "packed"}},
    "apply_qkv-thd-qkv-inplace-interleaved": {"inplace": True, "num_heads_q": 4, "num_heads_kv": 1},
    "apply_axes-bshd-inverse-half": {"inverse": True},
    "apply_axes-thd-inverse-dynamic-interleaved": {"inverse": True},
    "apply_qk-bshd-gqa-inverse-half": {"inverse": True},
    "apply_qk-thd-varlen-inverse-dynamic-interleaved": {"inverse": True},
    "apply_qkv-bshd-qkv-inverse-interleaved-partial": {"inverse": True, "num_heads_q": 4, "num_heads_kv": 2},
    "apply_axes-bshd-chunk-dynamic-half": {"seq_len": 8192},
    "apply_qk-bhsd-chunk-offset-dynamic-interleaved": {"seq_len": 6000},
    "apply_qkv-thd-chunk-longrope-half-partial": {"seq_len": 9000, "num_heads_q": 2, "num_heads_kv": 1},
    "apply_axes-bshd-inverse-yarn-mscale-half": {"inverse": True},
    "apply_axes-thd-inverse-yarn-factor-interleaved-partial": {"inverse": True},
}
#: id stem -> the integer position inputs written out in the rows (HF (B, S) ids are checked by formula)
POSITION_INPUTS = {
    "apply_axes-thd-ids-interleaved": {"positions": [0, 1, 2, 3, 4, 0, 1, 2, 2048, 2049, 2050, 5000, 5001]},
    "apply_axes-thd-k-of-packed-interleaved": {
        "positions": [0, 1, 2, 3, 4, 0, 1, 2, 2048, 2049, 2050, 5000, 5001]
    },
    "apply_axes-bhsd-offset-rows-interleaved": {"offset": [3, 2500]},
    "apply_axes-sbhd-offset-rows-half-partial": {"offset": [2049, 40]},
    "apply_axes-bshd-decode-rows-interleaved": {"offset": [0, 17, 2049, 70000]},
    "apply_qk-bshd-32-8-half": {"positions": [[0, 1, 2047, 2048, 9000]]},
    "apply_qk-thd-17-1-interleaved": {"positions": [0, 1, 2, 0, 2049, 70000]},
    "apply_qk-bhsd-16-4-half-partial-offset": {"offset": [7, 3000]},
    "apply_qk-thd-varlen-16-4-interleaved": {"cu_seqlens": [0, 3, 4, 9]},
    "apply_qkv-thd-8-1-interleaved-partial": {"cu_seqlens": [0, 4, 5, 9], "start_offsets": [0, 100, 2047]},
    "apply_axes-thd-lengths-starts-interleaved-partial": {
        "start_offsets": [0, 5, 100, 2048, 0, 7, 1, 3000, 0, 0, 9, 2047, 1]
    },
    "apply_axes-thd-scalar-start-half": {"cu_seqlens": [0, 5, 6, 20]},
    "apply_qkv-thd-qkv-inplace-interleaved": {"cu_seqlens": [0, 2, 9]},
    "apply_axes-thd-inverse-dynamic-interleaved": {
        "positions": [0, 1, 2, 3, 1500, 1501, 2047, 2048, 2500, 2998, 2999, 3000]
    },
    "round_trip-thd-varlen-interleaved-partial": {
        "cu_seqlens": [0, 5, 6, 20],
        "start_offsets": [0, 2049, 70000],
    },
    "apply_qk-bshd-gqa-inverse-half": {"positions": [[0, 1, 2047, 2048, 3000, 70000]]},
    "apply_qk-thd-varlen-inverse-dynamic-interleaved": {"cu_seqlens": [0, 4, 9], "start_offsets": [0, 2995]},
    "apply_qkv-bshd-qkv-inverse-interleaved-partial": {"positions": [[3, 4, 2049, 2050, 9000]]},
    "apply_axes-bshd-chunk-dynamic-half": {"positions": [list(range(3000, 3008))]},
    "apply_qk-bhsd-chunk-offset-dynamic-interleaved": {"offset": [2500, 4000]},
    "apply_qkv-thd-chunk-longrope-half-partial": {"cu_seqlens": [0, 3, 7], "start_offsets": [100, 1000]},
    "apply_axes-thd-inverse-yarn-factor-interleaved-partial": {"positions": [0, 5, 1023, 1024, 4000, 8191]},
}
#: id stem -> the scaling each row documents (the rest of the dict: none)
SCALINGS = {
    "apply_axes-bshd-ids-yarn-interleaved": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 2048,
    },
    "apply_axes-thd-inverse-dynamic-interleaved": {
        "rope_type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 1024,
    },
    "round_trip-bshd-yarn-half": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 2048,
    },
    "apply_qk-thd-varlen-inverse-dynamic-interleaved": {
        "rope_type": "dynamic",
        "factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
    "apply_axes-bshd-chunk-dynamic-half": {
        "rope_type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 2048,
    },
    "apply_qk-bhsd-chunk-offset-dynamic-interleaved": {
        "rope_type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 2048,
    },
    "apply_qkv-thd-chunk-longrope-half-partial": {
        "rope_type": "longrope",
        "factor": 16.0,
        "original_max_position_embeddings": 4096,
    },
    "apply_axes-bshd-inverse-yarn-mscale-half": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 2048,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
    },
    "apply_axes-thd-inverse-yarn-factor-interleaved-partial": {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 1024,
        "attention_factor": 0.75,
    },
}
DTYPE_SHORTS = ("fp64", "fp32", "fp16", "bf16")


def _hf_ids(batch: int, seq: int) -> list[list[int]]:
    """The documented HF ids: row 0 from 17, row 1 at 4001 + 3 s, row b >= 2 at 600 b + 5 s."""
    rows = [[17 + s for s in range(seq)], [4001 + 3 * s for s in range(seq)]]
    rows += [[600 * b + 5 * s for s in range(seq)] for b in range(2, batch)]
    return rows[:batch]


def test_hf_ids_helper_follows_its_documented_rows():
    assert kernel_shapes._ids_bs(4, 3).tolist() == _hf_ids(4, 3)
    assert (
        kernel_shapes._ids_bs(1, 2).tolist() == [[17, 18]] and kernel_shapes._ids_bs(4, 3).dtype == np.int64
    )


def test_varlen_lengths_and_starts_as_documented():
    assert VARLEN_LENGTHS == (400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100)
    assert kernel_shapes.VARLEN_STARTS == (0, 5, 100, 2048, 0, 7, 1, 3000, 0, 0, 9, 2047, 1)
    assert kernel_shapes._cu([3, 1, 5]).tolist() == [0, 3, 4, 9] and kernel_shapes._cu([2]).dtype == np.int64


def test_the_catalogue_is_exactly_the_documented_rows():
    first = [c.id for c in kernel_shape_cases()]
    assert first == [f"{stem}-{s}" for stem in KERNEL for s in DTYPE_SHORTS]
    later = [c.id for c in kernel_shapes.kernel_shape_inverse_and_seq_len_cases()]
    assert later == [f"{stem}-{s}" for stem in KERNEL_29 for s in DTYPE_SHORTS]


@pytest.mark.parametrize("stem", [*KERNEL, *KERNEL_29])
def test_each_row_as_documented(all_fp64, stem):
    case = all_fp64[f"{stem}-fp64"]
    bug, layout, d, rd, scaling, axes, form, *shapes = {**KERNEL, **KERNEL_29}[stem].split()
    assert (case.bug_class, case.op, case.tolerance) == (bug, stem.split("-")[0], "rotation")
    cfg = case.config
    assert (cfg["layout"], cfg["head_dim"], cfg["rotary_dim"], cfg["base"]) == (layout, int(d), int(rd), 1e4)
    assert (cfg["scaling"] or {}).get("rope_type", "-") == scaling
    for key, value in SCALINGS.get(stem, {}).items():
        assert cfg["scaling"][key] == value, (stem, key)
    defaults = {"seq_len": None, "inverse": False, "inplace": False, "view": None, "axes": axes, "form": form}
    assert case.params == {**defaults, **PARAMS.get(stem, {})}
    acts = dict(s.split("=") for s in shapes)
    assert {k: "x".join(map(str, case.inputs[k].shape)) for k in acts} == acts
    ints = {k: v for k, v in case.inputs.items() if k not in acts}
    assert all(v.dtype == np.int64 for v in ints.values())
    want = dict(POSITION_INPUTS.get(stem, {}))
    if "positions" in ints and "positions" not in want:
        want["positions"] = _hf_ids(*ints["positions"].shape)
    if "lengths" in stem:  # the varlen family: 0 then the running sums of the documented lengths
        want["cu_seqlens"] = [sum(VARLEN_LENGTHS[:i]) for i in range(len(VARLEN_LENGTHS) + 1)]
    assert {k: v.tolist() for k, v in ints.items()} == want, stem


def _dynamic_inv_freq(d: int, base: float, factor: float, original: int, seq_len: int) -> np.ndarray:
    """HF ``_compute_dynamic_ntk_parameters``: base (f L / L0 - (f - 1)) ** (d / (d - 2)) when L > L0."""
    if seq_len > original:
        base = base * (factor * seq_len / original - (factor - 1)) ** (d / (d - 2))
    return base ** (-np.arange(0, d, 2) / d)


@pytest.mark.parametrize("stem, seq_len", [
    ("apply_axes-bshd-chunk-dynamic-half", 8192), ("apply_qk-bhsd-chunk-offset-dynamic-interleaved", 6000)
])  # fmt: skip
def test_aux_tables_of_an_explicit_seq_len(all_fp64, stem, seq_len):
    case = all_fp64[f"{stem}-fp64"]
    assert int(case.inputs.get("positions", case.inputs.get("offset")).max()) + 1 < seq_len
    want = _dynamic_inv_freq(16, 1e4, 2.0, 2048, seq_len)
    np.testing.assert_allclose(case.aux["inv_freq"], want, rtol=1e-13)


def test_k_is_rotated_with_the_table_of_qs_positions():
    """A k shorter than q (offset form: k's tokens end earlier) still uses q's seq_len (max(q ids) + 1)."""
    from rope_ref.conformance.cases.operations import evaluate

    dyn = {"rope_type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 8}
    cfg = {"head_dim": 4, "layout": "half", "rotary_dim": 4, "base": 100.0, "scaling": dyn}
    q, k = np.ones((1, 1, 6, 4)), np.ones((1, 1, 2, 4))
    params = {"axes": "bhsd", "form": "offset", "offset": 20, "seq_len": None, "inverse": False}
    out = evaluate("apply_qk", cfg, {"q": q, "k": k}, params)
    inv = _dynamic_inv_freq(4, 100.0, 3.0, 8, 26)  # q's ids 20..25
    assert not np.allclose(inv, _dynamic_inv_freq(4, 100.0, 3.0, 8, 22))  # k's own ids would give another
    theta = np.array([20.0, 21.0])[:, None] * inv
    want = np.concatenate([np.cos(theta) - np.sin(theta), np.cos(theta) + np.sin(theta)], axis=-1)
    np.testing.assert_allclose(out["k"][0, 0], want, rtol=0, atol=1e-12)
