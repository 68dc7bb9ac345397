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
from rope_ref.conformance.cases.kernel_shapes import VARLEN_LENGTHS, kernel_shape_cases

import rope_ref
from rope_ref.case import config_from_dict

FAMILIES = {
    "axes_convention", "cache_offset", "strided_views", "gqa_heads", "packed_qkv", "varlen", "inplace",
    "inverse_rotation",
}  # fmt: skip


@pytest.fixture(scope="module")
def generated():
    return kernel_shape_cases()


@pytest.fixture(scope="module")
def fp64(generated):
    return [c for c in generated if c.io_dtype == "float64"]


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
