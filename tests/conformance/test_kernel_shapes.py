"""Issue 16: the kernel-shape operations of the suite, judged by the runner (views, in place, V, unsupported)
and the oracle's checks of the positions forms (``rope_ref.positions.kernel_positions``)."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.kernel_shapes import KERNEL_OPS
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import Backend
from rope_ref.conformance.runner import Runner
from shipped_golden import shipped_cases

from rope_ref import RopeConfig
from rope_ref.positions import kernel_positions


@pytest.fixture(scope="module")
def kernel_cases():
    cases = [c for c in shipped_cases() if c.op in KERNEL_OPS]
    assert {c.op for c in cases} == set(KERNEL_OPS)
    return cases


def _fp64(cases):
    return [c for c in cases if c.io_dtype == "float64"]


def test_every_family_is_shipped_in_every_dtype_and_layout(kernel_cases):
    families = {
        "axes_convention",
        "cache_offset",
        "strided_views",
        "gqa_heads",
        "packed_qkv",
        "varlen",
        "inplace",
        "inverse_rotation",
        "inverse_fused",
        "kernel_seq_len",
        "inverse_attention_factor",
    }
    assert families <= {c.bug_class for c in kernel_cases}  # later issues add families of their own
    for family in families:
        mine = [c for c in kernel_cases if c.bug_class == family]
        assert {c.io_dtype for c in mine} == {"float64", "float32", "float16", "bfloat16"}, family
        assert {c.config["layout"] for c in mine} == {"half", "interleaved"}, family
    axes = {c.params["axes"] for c in kernel_cases}
    assert {"bshd", "bhsd", "sbhd", "thd"} <= axes
    forms = {c.params["form"] for c in kernel_cases}
    assert forms == {"ids", "offset", "cu_seqlens"}
    views = {(c.params["view"] or {}).get("kind") for c in kernel_cases}
    assert views == {None, "transpose", "slice", "strided", "packed"}
    gqa = {
        (c.inputs["q"].shape[c.params["axes"].index("h")], c.inputs["k"].shape[c.params["axes"].index("h")])
        for c in kernel_cases
        if c.op == "apply_qk"
    }
    assert {(32, 8), (17, 1), (16, 4)} <= gqa


def test_varlen_lengths_include_one_and_more_than_2048(kernel_cases):
    lengths = set()
    for c in kernel_cases:
        if "cu_seqlens" in c.inputs:
            lengths |= set(np.diff(c.inputs["cu_seqlens"]).tolist())
    assert 1 in lengths and max(lengths) > 2048
    assert {400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4} <= lengths


def test_oracle_passes_and_values_match_an_independent_rotation(kernel_cases):
    report = Runner(OracleBackend()).run(_fp64(kernel_cases))
    assert report.ok and report.counts()["passed"] == len(_fp64(kernel_cases)), report.failure_details()
    # One case by hand: varlen positions restart per sequence; rotate pair (i, i + n) by the explicit matrix.
    case = next(c for c in kernel_cases if c.id == "apply_axes-thd-scalar-start-half-fp64")
    x = case.inputs["x"]
    pos = np.concatenate([2045 + np.arange(n) for n in (5, 1, 14)]).astype(np.float64)
    n = 8
    theta = 10000.0 ** (-np.arange(n) / n)
    want = np.empty_like(x)
    for t in range(x.shape[0]):
        for h in range(x.shape[1]):
            for i in range(n):
                c, s = np.cos(pos[t] * theta[i]), np.sin(pos[t] * theta[i])
                rot = np.array([[c, -s], [s, c]]) @ np.array([x[t, h, i], x[t, h, i + n]])
                want[t, h, i], want[t, h, i + n] = rot
    np.testing.assert_allclose(case.expected["out"], want, rtol=0, atol=1e-12)


class OldBackend(OracleBackend):
    """Only the protocol's original operations (the kernel-shape methods are the protocol's stubs)."""

    apply_axes = Backend.apply_axes
    apply_qk = Backend.apply_qk
    apply_qkv = Backend.apply_qkv
    inplace_ops = frozenset()


def test_an_old_backend_reports_the_new_operations_unsupported(kernel_cases):
    report = Runner(OldBackend()).run(_fp64(kernel_cases))
    assert report.ok
    assert {r.status for r in report.results} == {"unsupported"}
    assert {r.unsupported_reason for r in report.results} == {"operation"}


class NotInPlace(OracleBackend):
    inplace_ops = frozenset()


def test_in_place_cases_are_unsupported_unless_declared(kernel_cases):
    report = Runner(NotInPlace()).run(_fp64(kernel_cases))
    for r in report.results:
        case = next(c for c in kernel_cases if c.id == r.case_id)
        if case.params["inplace"]:
            assert r.status == "unsupported" and r.unsupported_reason == "inplace", r.case_id  # issue 29
            assert "inplace_ops" in r.message
        else:
            assert r.status == "passed", r.case_id


class ReturnsWithoutWriting(OracleBackend):
    """Declares in place but returns a new array: the buffer it was handed is what is judged."""

    def apply_axes(self, x, cfg, **kw):
        kw["inplace"] = False
        return super().apply_axes(np.array(x, copy=True), cfg, **kw)


def test_in_place_is_judged_on_the_buffer_not_the_return_value(kernel_cases):
    chosen = [c for c in _fp64(kernel_cases) if c.op == "apply_axes" and c.params["inplace"]]
    report = Runner(ReturnsWithoutWriting()).run(chosen)
    assert chosen and all(r.status == "failed" for r in report.results)


class TouchesV(OracleBackend):
    def apply_qkv(self, qkv, cfg, **kw):
        out = super().apply_qkv(qkv, cfg, **kw)
        out[..., -1] = np.nextafter(out[..., -1], np.inf)  # one ulp on the last channel of every head
        return out


def test_v_must_be_bit_exact(kernel_cases):
    chosen = [c for c in _fp64(kernel_cases) if c.op == "apply_qkv" and not c.params["inplace"]]
    report = Runner(TouchesV()).run(chosen)
    assert all(r.status == "failed" and "V changed" in r.message for r in report.results)


class WritesInput(OracleBackend):
    def apply_axes(self, x, cfg, **kw):
        out = super().apply_axes(x, cfg, **kw)
        if not kw.get("inplace"):
            x[(0,) * x.ndim] = 0.5
        return out


def test_an_out_of_place_call_may_not_change_its_view(kernel_cases):
    chosen = [c for c in _fp64(kernel_cases) if c.op == "apply_axes" and not c.params["inplace"]][:6]
    report = Runner(WritesInput()).run(chosen)
    assert all(r.status == "failed" and r.kind == "mutation" for r in report.results)


def test_a_view_is_really_a_view(kernel_cases):
    """The runner hands strided / sliced / transposed views, not contiguous copies."""
    seen = {}

    class Spy(OracleBackend):
        def apply_axes(self, x, cfg, **kw):
            seen[kw.get("inverse", False), x.shape, x.strides] = x.flags["C_CONTIGUOUS"]
            return super().apply_axes(x, cfg, **kw)

    chosen = [c for c in _fp64(kernel_cases) if c.op == "apply_axes" and c.params["view"]]
    assert Runner(Spy()).run(chosen).ok
    assert seen and not any(seen.values())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"cu_seqlens": [1, 4, 6]}, "cu_seqlens must start at 0"),
        ({"cu_seqlens": [0, 4, 2, 6]}, "cu_seqlens must be non-decreasing"),
        ({"cu_seqlens": [0, 2, 5]}, "cu_seqlens ends at 5 but x has 6 tokens"),
        ({"cu_seqlens": [0, 6], "start_offsets": [-1]}, "start_offsets must be >= 0"),
        ({"cu_seqlens": [0.0, 2.5, 6.0]}, "cu_seqlens must hold integers"),
        ({"positions": [0, 1, 2, 3, 4, 5], "offset": 3}, "exactly one of"),
        ({}, "exactly one of"),
        ({"positions": np.arange(6), "start_offsets": 2}, "start_offsets goes with cu_seqlens"),
    ],
)
def test_kernel_positions_rejects_bad_varlen_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kernel_positions((6, 2, 8), "thd", **kwargs)


@pytest.mark.parametrize(
    "shape, axes, kwargs, match",
    [
        ((2, 5, 3, 8), "bshd", {"offset": -1}, "offset must be >= 0"),
        ((2, 5, 3, 8), "bshd", {"offset": 1.5}, "offset must hold integers"),
        ((2, 5, 3, 8), "bshd", {"offset": [1, 2, 3]}, "offset has 3 entries but x has batch 2"),
        ((6, 3, 8), "thd", {"offset": 3}, "offset needs batch and sequence axes"),
        ((2, 5, 3, 8), "bshd", {"cu_seqlens": [0, 10]}, "cu_seqlens needs packed tokens"),
        ((2, 5, 3, 8), "bhsd", {"offset": 3}, None),
        ((2, 5, 3, 8), "bsd", {"offset": 3}, "names 3 axes but x has 4"),
    ],
)
def test_kernel_positions_rejects_bad_offsets_and_axes(shape, axes, kwargs, match):
    if match is None:  # bhsd (2, 5, 3): S = 3, so offset + arange(3) per row
        np.testing.assert_array_equal(kernel_positions(shape, axes, **kwargs), [[3, 4, 5], [3, 4, 5]])
        return
    with pytest.raises(ValueError, match=match):
        kernel_positions(shape, axes, **kwargs)


def test_kernel_positions_forms_agree():
    cu = [0, 3, 3, 7]
    np.testing.assert_array_equal(
        kernel_positions((7, 1, 4), "thd", cu_seqlens=cu, start_offsets=[10, 0, 100]),
        [10, 11, 12, 100, 101, 102, 103],
    )
    np.testing.assert_array_equal(
        kernel_positions((3, 2, 1, 4), "sbhd", offset=[5, 70000]), [[5, 6, 7], [70000, 70001, 70002]]
    )


def test_oracle_backend_rejects_bad_head_counts():
    cfg = RopeConfig(8, layout="half")
    b = OracleBackend()
    q, k = np.zeros((2, 6, 8)), np.zeros((2, 4, 8))
    with pytest.raises(ValueError, match=r"k heads \(4\) must divide q heads \(6\)"):
        b.apply_qk(q, k, cfg, axes="shd", positions=np.arange(2))
    with pytest.raises(ValueError, match="does not split as num_heads_q"):
        b.apply_qkv(
            np.zeros((2, 7, 8)), cfg, axes="shd", num_heads_q=4, num_heads_kv=2, positions=np.arange(2)
        )
    with pytest.raises(ValueError, match="num_heads_kv must be an int >= 1"):
        b.apply_qkv(
            np.zeros((2, 4, 8)), cfg, axes="shd", num_heads_q=4, num_heads_kv=0, positions=np.arange(2)
        )


def test_activations_are_converted_to_the_io_dtype_and_positions_keep_theirs(kernel_cases):
    calls = []

    class Spy(OracleBackend):
        def from_numpy(self, array, dtype=None):
            calls.append((array.dtype.kind, dtype))
            return super().from_numpy(array, dtype)

    case = next(c for c in _fp64(kernel_cases) if c.op == "apply_qk" and c.params["form"] == "offset")
    assert Runner(Spy()).run([case]).ok
    assert sorted(calls) == [("f", "float64"), ("f", "float64"), ("i", None)]


def test_a_backend_that_changes_the_stored_inputs_fails(kernel_cases):
    class Scribbles(OracleBackend):
        def from_numpy(self, array, dtype=None):
            out = super().from_numpy(array, dtype)
            array[...] = 0  # writes through to the case's stored tensor
            return out

    case = next(c for c in _fp64(kernel_cases) if c.op == "apply_axes" and c.params["view"] is None)
    case = type(case)(**{**case.__dict__, "inputs": {k: v.copy() for k, v in case.inputs.items()}})
    result = Runner(Scribbles()).run([case]).results[0]
    assert result.status == "failed" and result.kind == "mutation"
    assert "stored NumPy inputs" in result.message


def test_qk_head_axis_is_the_one_check_every_adapter_uses():
    from rope_ref.axes import qk_head_axis

    assert qk_head_axis((2, 5, 32, 16), (2, 5, 8, 16), "bshd") == 2
    assert qk_head_axis((7, 17, 16), (7, 1, 16), "thd") == 1
    for q, k, axes, match in [
        ((2, 5, 6, 16), (2, 5, 4, 16), "bshd", r"k heads \(4\) must divide q heads \(6\)"),
        ((2, 5, 6, 16), (2, 5, 0, 16), "bshd", r"k heads \(0\) must divide"),
        ((2, 5, 8, 16), (2, 6, 4, 16), "bshd", "must agree on every axis but the heads"),
        ((2, 5, 8, 16), (5, 4, 16), "bshd", "k has 3 axes but q has 4"),
        ((5, 8, 16), (5, 4, 16), "tsd", "exactly one position axis"),
        ((5, 16), (5, 16), "sd", "has no head axis 'h'"),
        ((2, 5, 8, 16), (2, 5, 4, 16), "thd", "names 3 axes but x has 4"),
    ]:
        with pytest.raises(ValueError, match=match):
            qk_head_axis(q, k, axes)
