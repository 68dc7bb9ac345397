"""``conformance.kernel_shapes`` at its helpers: the buffers :func:`present` builds (layout, NaN fill,
snapshot, mask), what :func:`call` passes a backend, and the checks :func:`buffer_problem` and
:func:`v_problem` make, each called directly with the bad input.

Expected layouts are written out from the view params of ``docs/golden-format.md`` (a slice of
``before + n + after`` entries starting at ``before``, a stride ``step`` starting at 0, q and k the first
two head blocks of a packed ``(Hq + 2 Hk)`` buffer), not read from the module.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rope_ref.conformance import kernel_shapes as ks
from rope_ref.conformance.oracle_backend import OracleBackend

ORACLE = OracleBackend()


@pytest.fixture(scope="module")
def fp64(by_id):
    """Kernel-shape cases at float64 I/O, by the name of their row (``{op}-{name}-fp64``)."""
    return lambda op_name: by_id[f"{op_name}-fp64"]


def _with_params(case, **params):
    return dataclasses.replace(case, params={**case.params, **params})


class Spy(OracleBackend):
    """Records the keyword arguments of every kernel-shape call."""

    def __init__(self):
        self.calls = []

    def apply_axes(self, x, cfg, **kw):
        self.calls.append(("apply_axes", kw))
        return super().apply_axes(x, cfg, **kw)

    def apply_qk(self, q, k, cfg, **kw):
        self.calls.append(("apply_qk", kw))
        return super().apply_qk(q, k, cfg, **kw)

    def apply_qkv(self, qkv, cfg, **kw):
        self.calls.append(("apply_qkv", kw))
        return super().apply_qkv(qkv, cfg, **kw)


# -- present: the buffers ----------------------------------------------------------------------------------


def test_packed_q_and_k_are_the_first_two_head_blocks(fp64):
    case = fp64("apply_qk-bshd-packed-aliasing-inplace-half")
    q, k = case.inputs["q"], case.inputs["k"]
    hq, hk = q.shape[2], k.shape[2]
    assert hq != hk
    out = ks.present(ORACLE, case, "float64")
    [(buf, snapshot, inside)] = out.buffers
    assert buf.shape == (2, 5, hq + 2 * hk, 16)
    assert np.array_equal(buf[:, :, :hq], q) and np.array_equal(buf[:, :, hq : hq + hk], k)
    assert np.isnan(buf[:, :, hq + hk :]).all()  # the V block: nobody's view
    assert np.shares_memory(out.views["q"], buf) and np.shares_memory(out.views["k"], buf)
    assert np.array_equal(out.views["k"], k)
    want = np.zeros(buf.shape, dtype=bool)
    want[:, :, : hq + hk] = True
    assert np.array_equal(inside, want)
    assert snapshot is not buf and not np.shares_memory(snapshot, buf)


@pytest.mark.parametrize(
    "name,axis,before,after",
    [("apply_axes-thd-k-of-packed-interleaved", 1, 4, 2), ("apply_axes-bshd-q-of-packed-half", 2, 0, 4)],
)
def test_a_slice_view_starts_after_before_entries(fp64, name, axis, before, after):
    case = fp64(name)
    x = case.inputs["x"]
    n = x.shape[axis]
    out = ks.present(ORACLE, case, "float64")
    [(buf, _, inside)] = out.buffers
    assert buf.shape[axis] == before + n + after
    index = (slice(None),) * axis + (slice(before, before + n),)
    assert np.array_equal(buf[index], x) and np.shares_memory(out.views["x"], buf)
    assert np.array_equal(out.views["x"], x)
    assert np.isnan(buf[~inside]).all() and (~inside).sum() == x.size // n * (before + after)


def test_a_strided_view_takes_every_step_th_entry_from_the_first(fp64):
    case = fp64("apply_axes-bshd-stride2-half-partial")
    x = case.inputs["x"]
    out = ks.present(ORACLE, case, "float64")
    [(buf, _, inside)] = out.buffers
    assert buf.shape == (2, 18, 3, 16)
    assert np.array_equal(buf[:, 0::2], x) and np.isnan(buf[:, 1::2]).all()
    assert inside[:, 0::2].all() and not inside[:, 1::2].any()
    assert out.views["x"].strides[1] == 2 * buf.strides[1]


@pytest.mark.parametrize("storage", ["hsbd", "sdbh", "bhsd"])
def test_a_transposed_view_shows_the_input_in_the_case_axes(fp64, storage):
    """Storage orders that are 3- and 4-cycles of bshd: the inverse permutation would show other axes."""
    case = _with_params(
        fp64("apply_axes-bshd-transposed-half"), view={"kind": "transpose", "storage": storage}
    )
    x = case.inputs["x"]
    out = ks.present(ORACLE, case, "float64")
    [(buf, _, inside)] = out.buffers
    assert buf.flags["C_CONTIGUOUS"] and buf.shape == tuple(x.shape["bshd".index(c)] for c in storage)
    assert out.views["x"].shape == x.shape and np.array_equal(out.views["x"], x)
    assert inside.all()
    assert ks.call(ORACLE, case, out).shape == x.shape


@pytest.mark.parametrize(
    "view,match",
    [
        ({"kind": "transpose", "storage": "bshh"}, "view storage 'bshh' is not a permutation of axes 'bshd'"),
        ({"kind": "transpose", "storage": "bsd"}, "view storage 'bsd' is not a permutation"),
        ({"kind": "diagonal", "axis": "s"}, "unknown view kind 'diagonal'"),
    ],
)
def test_present_rejects_a_bad_view(fp64, view, match):
    case = _with_params(fp64("apply_axes-bshd-transposed-half"), view=view)
    with pytest.raises(ValueError, match=match):
        ks.present(ORACLE, case, "float64")


def test_present_rejects_an_unknown_positions_form(fp64):
    case = _with_params(fp64("apply_axes-bshd-ids-half"), form="ranges")
    with pytest.raises(ValueError, match="unknown positions form 'ranges'"):
        ks.present(ORACLE, case, "float64")


# -- present: the positions --------------------------------------------------------------------------------


def test_positions_forms_are_passed_as_stored(fp64):
    scalar = ks.present(ORACLE, fp64("apply_axes-bshd-offset-scalar-half"), "float64").positions
    assert scalar == {"offset": 1000}
    rows = ks.present(ORACLE, fp64("apply_axes-bhsd-offset-rows-interleaved"), "float64").positions
    assert list(rows) == ["offset"] and rows["offset"].tolist() == [3, 2500]
    start = ks.present(ORACLE, fp64("apply_axes-thd-scalar-start-half"), "float64").positions
    assert start["cu_seqlens"].tolist() == [0, 5, 6, 20]
    assert start["max_seqlen"] == 14 and start["start_offsets"] == 2045
    starts = ks.present(ORACLE, fp64("apply_qkv-thd-8-1-interleaved-partial"), "float64").positions
    assert starts["max_seqlen"] == 4 and starts["start_offsets"].tolist() == [0, 100, 2047]
    plain = ks.present(ORACLE, fp64("apply_axes-thd-lengths-half"), "float64").positions
    assert plain["max_seqlen"] == 2100 and "start_offsets" not in plain


# -- call ------------------------------------------------------------------------------------------------


def test_call_passes_seq_len_inverse_inplace_and_head_counts(fp64):
    spy = Spy()
    case = _with_params(fp64("apply_axes-bshd-ids-half"), seq_len=9000)
    ks.call(spy, case, ks.present(spy, case, "float64"))
    assert spy.calls[-1] == ("apply_axes", {"positions": spy.calls[-1][1]["positions"], "axes": "bshd",
                                            "seq_len": 9000})  # fmt: skip
    case = fp64("apply_axes-bshd-inverse-half")
    ks.call(spy, case, ks.present(spy, case, "float64"))
    assert spy.calls[-1][1]["inverse"] is True and "inplace" not in spy.calls[-1][1]
    case = fp64("apply_qkv-bshd-4-2-half")
    ks.call(spy, case, ks.present(spy, case, "float64"))
    assert spy.calls[-1][1]["num_heads_q"] == 4 and spy.calls[-1][1]["num_heads_kv"] == 2
    case = fp64("apply_axes-bshd-q-of-packed-inplace-half")
    ks.call(spy, case, ks.present(spy, case, "float64"))
    assert spy.calls[-1][1]["inplace"] is True and "inverse" not in spy.calls[-1][1]


def test_round_trip_is_a_forward_then_an_inverse_call(fp64):
    spy = Spy()
    case = fp64("round_trip-bshd-yarn-half")
    presented = ks.present(spy, case, "float64")
    back = ks.call(spy, case, presented)
    (op1, kw1), (op2, kw2) = spy.calls
    assert op1 == op2 == "apply_axes" and "inverse" not in kw1 and kw2["inverse"] is True
    np.testing.assert_allclose(back, case.expected["out"], rtol=0, atol=1e-12)
    assert not np.allclose(back, case.inputs["x"])  # A^2 x with YaRN's A != 1


def test_call_rejects_an_unknown_op(fp64):
    case = dataclasses.replace(fp64("apply_axes-bshd-ids-half"), op="apply_axes_2")
    with pytest.raises(ValueError, match="unknown kernel-shape op 'apply_axes_2'"):
        ks.call(ORACLE, case, ks.present(ORACLE, dataclasses.replace(case, op="apply_axes"), "float64"))


def test_written_is_every_handed_view(fp64):
    case = fp64("apply_qk-bshd-packed-aliasing-inplace-half")
    presented = ks.present(ORACLE, case, "float64")
    q, k = ks.written(case, presented)
    assert q is presented.views["q"] and k is presented.views["k"]
    single = fp64("apply_axes-bshd-q-of-packed-inplace-half")
    presented = ks.present(ORACLE, single, "float64")
    assert ks.written(single, presented) is presented.views["x"]


# -- buffer_problem: the snapshot must not alias what the backend writes ----------------------------------


@pytest.mark.parametrize(
    "name,view_name",
    [("apply_qk-bshd-packed-aliasing-inplace-half", "k"), ("apply_axes-bshd-q-of-packed-inplace-half", "x")],
)
def test_a_write_past_the_views_is_reported(fp64, name, view_name):
    case = fp64(name)
    presented = ks.present(ORACLE, case, "float64")
    assert ks.buffer_problem(ORACLE, presented, inplace=True) is None
    presented.views[view_name][...] = 0.25  # in place inside the view: allowed
    assert ks.buffer_problem(ORACLE, presented, inplace=True) is None
    buf = presented.buffers[0][0]
    buf[(0,) * (buf.ndim - 2) + (-1, 3)] = 0.5  # the last head block is outside every view
    msg = ks.buffer_problem(ORACLE, presented, inplace=True)
    assert msg is not None and msg.startswith("wrote past the view: 1 buffer entries outside")


def test_an_out_of_place_call_that_writes_its_view_is_reported(fp64):
    case = fp64("apply_axes-bshd-stride2-half-partial")
    presented = ks.present(ORACLE, case, "float64")
    assert ks.buffer_problem(ORACLE, presented, inplace=False) is None
    presented.views["x"][1, 2, 0, 5] = 7.0
    msg = ks.buffer_problem(ORACLE, presented, inplace=False)
    assert msg == "changed its input buffer 0 at (1, 4, 0, 5) although the case is not in place"
    assert ks.buffer_problem(ORACLE, presented, inplace=True) is None
    plain = ks.present(ORACLE, fp64("apply_axes-bshd-ids-half"), "float64")
    plain.views["x"][0, 0, 0, 0] = np.nan  # NaN where the input had a number is a change too
    assert "changed its input buffer 0 at (0, 0, 0, 0)" in ks.buffer_problem(ORACLE, plain, inplace=False)


# -- v_problem ---------------------------------------------------------------------------------------------


def test_v_must_be_bit_for_bit_and_nan_is_a_change(fp64):
    case = fp64("apply_qkv-bshd-4-2-half")
    out = np.array(case.expected["out"], copy=True)
    assert ks.v_problem(case, {"out": out}) is None
    v = out[:, :, 6:]  # heads 4 + 2 .. 4 + 2 * 2: V
    v[0, 0, 0, 0] = np.nextafter(v[0, 0, 0, 0], np.inf)
    assert ks.v_problem(case, {"out": out}) == (
        "V changed: 1 of 384 V elements differ from the input (must be bit-exact)"
    )
    v[0, 0, 0, 0] = np.nan
    assert "V changed: 1 of 384" in ks.v_problem(case, {"out": out})
    out[:, :, :6] = 0.0  # q and k heads are not V's business
    out[:, :, 6:] = case.inputs["qkv"][:, :, 6:]
    assert ks.v_problem(case, {"out": out}) is None
    assert ks.v_problem(fp64("apply_axes-bshd-ids-half"), {"out": out}) is None
