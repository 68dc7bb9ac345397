"""``conformance.diagnose``: which failing runner cases get a "most resembles" line, and that a diagnosis
never breaks a verdict. Planted bugs are the oracle run with one documented mistake (layout swapped, the
forward rotation in the backward pass), so the expected label is known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance import diagnose as diagnosing
from rope_ref.conformance.case import Case
from rope_ref.conformance.diagnose import MAX_ELEMENTS, diagnose, exact_detail
from rope_ref.conformance.oracle_backend import OracleBackend
from small_cases import run_one

import rope_ref
from rope_ref.precision import PrecisionPolicy
from rope_ref.tolerance import Comparison, compare_output

F64 = PrecisionPolicy()


class SwapsLayout(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        other = "interleaved" if cfg.layout == "half" else "half"
        return super().apply(x, positions, cfg.replace(layout=other), seq_len)


class ForwardInBackward(OracleBackend):
    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        return rope_ref.apply(grad_out, np.asarray(positions, dtype=np.float64), cfg, seq_len=seq_len)


def _apply_case(shape, positions, axes=None, cfg=None, seq_len=None):
    cfg = cfg or {"head_dim": shape[-1], "layout": "half"}
    x = np.random.default_rng(11).standard_normal(shape)
    params = {"seq_len": seq_len} | ({"axes": axes} if axes else {})
    case = Case(
        "diag", "apply", cfg, {"x": x, "positions": positions}, {}, "layout", "rotation", params, "float64"
    )
    pos = rope_ref.axes.positions_for_axes(positions, axes, shape) if axes else positions
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config(), seq_len=seq_len)
    return case


def test_max_elements():
    assert MAX_ELEMENTS == 65536


@pytest.mark.parametrize("rows", [8, 4096])
def test_cases_up_to_max_elements_are_diagnosed(rows):
    case = _apply_case((rows, 16), np.arange(rows, dtype=np.float64) * 3)
    assert case.inputs["x"].size <= MAX_ELEMENTS
    [r] = run_one(SwapsLayout(), case).results
    assert r.status == "failed" and r.diagnosis.startswith("layout swapped (interleaved pairs")


def test_larger_cases_are_not_diagnosed():
    case = _apply_case((4097, 16), np.arange(4097, dtype=np.float64))
    [r] = run_one(SwapsLayout(), case).results
    assert r.status == "failed" and r.diagnosis == ""


def test_a_case_with_named_axes_is_diagnosed():
    case = _apply_case((2, 3, 6, 16), np.array([0.0, 1, 2, 40, 41, 45]), axes="bhsd")
    [r] = run_one(SwapsLayout(), case).results
    assert r.diagnosis.startswith("layout swapped")


def test_batch_ids_of_a_case_with_axes_are_placed_before_diagnosing():
    """(B, S) ids of a bshd case (B=2, S=5, H=3: no plain broadcast fits x's leading axes) are placed on x's
    b and s axes before the mutated oracle runs (a direct call: the comparison is given)."""
    ids = np.array([[0.0, 1, 2, 3, 4], [7, 9, 20, 31, 60]])
    case = _apply_case((2, 5, 3, 16), ids, axes="bshd")
    with pytest.raises(ValueError):
        np.broadcast_shapes(ids.shape, (2, 5, 3))
    placed = ids[:, :, None]  # b and s of x (2, 5, 3, 16), one id for every head
    got = rope_ref.apply(case.inputs["x"], placed, rope_ref.RopeConfig(16, layout="interleaved"))
    failed = Comparison("out", False, 1, got.size)  # only its verdict is read
    assert diagnose(case, {"out": got}, [failed], F64).startswith("layout swapped (interleaved pairs")


def test_an_explicit_seq_len_is_the_one_diagnosed_with():
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    cfg = {"head_dim": 16, "layout": "half", "scaling": dynamic}
    case = _apply_case((6, 16), np.array([0.0, 5, 9, 30, 50, 60]), cfg=cfg, seq_len=4096)
    [r] = run_one(SwapsLayout(), case).results
    assert r.diagnosis.startswith("layout swapped")


def test_the_vjp_is_diagnosed_from_grad_out():
    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((5, 16)), rng.standard_normal((5, 16))
    pos = np.array([0.0, 3, 8, 100, 900])
    inputs = {"x": x, "grad_out": g, "positions": pos}
    case = Case(
        "vjp", "apply_vjp", {"head_dim": 16, "layout": "half"}, inputs, {}, "vjp", "rotation", {}, "float64"
    )
    case.expected["grad_x"] = rope_ref.apply(g, -pos, case.rope_config())
    [r] = run_one(ForwardInBackward(), case).results
    assert r.diagnosis.startswith("forward rotation used in the backward pass")


def test_a_diagnosis_that_cannot_be_made_is_empty():
    case = _apply_case((4, 16), np.arange(4.0))
    got = case.expected["out"] + 1.0
    comparisons = compare_output(case, "out", got, F64)
    broken = Case("b", "apply", case.config, {"x": case.inputs["x"]}, case.expected, "l", "rotation")
    assert diagnose(broken, {"out": got}, comparisons, F64) == ""  # no positions: KeyError inside
    assert diagnose(case, {"out": got}, comparisons, F64) == ""  # not a known bug
    assert diagnose(case, {}, comparisons, F64) == ""


def test_a_passing_output_is_not_handed_to_the_diagnoser(monkeypatch):
    """Only an output whose first comparison failed is diagnosed (the mutated oracle runs are not spent on
    a right answer), even when a later comparison of that output failed."""
    calls = []
    monkeypatch.setattr(diagnosing, "_diagnose", lambda *args: calls.append(args[2]) or "spied")
    case = _apply_case((4, 16), np.arange(4.0) * 7)
    right = case.expected["out"]
    first = compare_output(case, "out", right, F64)
    assert first[0].passed
    later = Comparison("out", False, 1, 4, (0,), 1.0, 1.5, 1e-12, 5e11, "pair norm")
    assert diagnose(case, {"out": right}, [*first, later], F64) == "" and calls == []
    wrong = right + 1.0
    assert diagnose(case, {"out": wrong}, compare_output(case, "out", wrong, F64), F64) == "spied"
    assert calls == ["out"]


def test_exact_detail_only_for_an_exact_worst_element():
    case = _apply_case((4, 16), np.arange(4.0))
    got = case.expected["out"].copy()
    got[0, 0] = np.nextafter(got[0, 0], 2.0)  # position 0: must be exact
    worst = compare_output(case, "out", got, F64)[0]
    assert worst.note.startswith("exact element")
    assert "must equal the input bit for bit" in exact_detail(case, {"out": got}, worst, F64)
    plain = Comparison("out", False, 1, 64, (1, 0), 0.5, 0.7, 1e-9, 2e8, "")
    assert exact_detail(case, {"out": got}, plain, F64) == ""
    not_exact = Comparison("out", False, 1, 64, (1, 0), 0.5, 0.7, 1e-9, 2e8, "pair norm, no exact element")
    assert exact_detail(case, {"out": got}, not_exact, F64) == ""
    assert exact_detail(case, {}, worst, F64) == "" and exact_detail(case, {"out": got}, None, F64) == ""


def _spy(monkeypatch, answer="spied"):
    calls = []
    monkeypatch.setattr(diagnosing, "_diagnose", lambda *args: calls.append(args) or answer)
    return calls


def _failing(output="out"):
    return Comparison(output, False, 1, 4, (0, 0), 1.0, 2.0, 1e-9, 1e9)


def test_what_the_diagnoser_is_handed_for_apply(monkeypatch):
    """The failing output's own comparisons, x (float64), the placed positions, the explicit seq_len, the
    op, no extra input and the run's policy."""
    calls = _spy(monkeypatch)
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    case = _apply_case(
        (6, 16),
        np.array([0.0, 5, 9, 30, 50, 60]),
        cfg={"head_dim": 16, "layout": "half", "scaling": dynamic},
        seq_len=4096,
    )
    policy = PrecisionPolicy(io_dtype="float32")
    got = case.expected["out"] + 1.0
    other, mine = _failing("other"), _failing("out")
    assert diagnose(case, {"out": got}, [other, mine], policy) == "spied"
    [(comparisons, passed_case, name, v, handed, pos, seq_len, op, extra, pol)] = calls
    assert comparisons == [mine] and passed_case is case and name == "out" and handed is got
    assert v.dtype == np.float64 and np.array_equal(v, case.inputs["x"])
    assert pos.tolist() == [0.0, 5, 9, 30, 50, 60] and seq_len == 4096 and op == "apply"
    assert extra == {} and pol is policy


def test_what_the_diagnoser_is_handed_for_the_vjp(monkeypatch):
    calls = _spy(monkeypatch)
    x = np.arange(32.0, dtype=np.float32).reshape(2, 16)  # float32 I/O: handed on as float64
    g = -np.arange(32.0, dtype=np.float32).reshape(2, 16) / 8
    pos = np.array([3, 11])  # int64: handed on as float64
    inputs = {"x": x, "grad_out": g, "positions": pos}
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    cfg = {"head_dim": 16, "layout": "half", "scaling": dynamic}  # no seq_len: max(positions) + 1 = 12
    case = Case("v", "apply_vjp", cfg, inputs, {"grad_x": g}, "vjp", "rotation")
    assert diagnose(case, {"grad_x": g + 1}, [_failing("grad_x")], F64) == "spied"
    [(_, _, name, v, _, handed_pos, seq_len, op, extra, _)] = calls
    assert name == "grad_x" and op == "apply_vjp" and np.array_equal(v, g) and v.dtype == np.float64
    assert list(extra) == ["x"] and np.array_equal(extra["x"], x) and extra["x"].dtype == np.float64
    assert handed_pos.dtype == np.float64 and handed_pos.tolist() == [3.0, 11.0] and seq_len == 12


def test_only_a_single_output_rotation_is_diagnosed(monkeypatch):
    calls = _spy(monkeypatch)
    pos = np.arange(4.0)
    cos_sin = Case(
        "t",
        "cos_sin",
        {"head_dim": 8, "layout": "half"},
        {"positions": pos},
        {"cos": np.ones((4, 4))},
        "tables",
        "table",
    )
    assert diagnose(cos_sin, {"cos": np.zeros((4, 4))}, [_failing("cos")], F64) == ""
    case = _apply_case((4, 16), pos)
    case.expected["extra"] = case.expected["out"]
    assert diagnose(case, {"out": case.expected["out"] + 1}, [_failing()], F64) == ""
    assert calls == []


def test_a_diagnoser_that_finds_nothing_gives_empty_text(monkeypatch):
    _spy(monkeypatch, answer=None)
    case = _apply_case((4, 16), np.arange(4.0))
    assert diagnose(case, {"out": case.expected["out"] + 1}, [_failing()], F64) == ""
    assert diagnose(case, {"out": case.expected["out"] + 1}, [], F64) == ""  # no comparison of the output
    assert diagnose(case, {"out": case.expected["out"] + 1}, [_failing("other")], F64) == ""


def test_positions_already_over_x_are_not_placed_again():
    ids = np.array([[[0, 1, 2], [4, 5, 6]]])  # (B, H, S) = (1, 2, 3): x's leading axes already
    case = _apply_case((1, 2, 3, 16), ids, axes="bhsd")
    placed = diagnosing._positions(case)
    assert placed.dtype == np.float64 and placed.tolist() == ids.tolist()
    short = _apply_case((1, 2, 3, 16), np.array([[7.0, 8, 9]]), axes="bhsd")
    assert diagnosing._positions(short).tolist() == [[[7.0, 8.0, 9.0]]]  # placed on b, h and s


def test_exact_detail_hands_the_worst_output_and_policy_on_and_survives_its_errors(monkeypatch):
    case = _apply_case((4, 16), np.arange(4.0))
    worst = Comparison("out", False, 1, 64, (0, 0), 0.5, 0.7, 0.0, np.inf, "exact element (position 0)")
    got, policy = case.expected["out"] + 1, PrecisionPolicy(io_dtype="float32")
    seen = []
    monkeypatch.setattr(diagnosing, "exact_line", lambda *a: seen.append(a) or "LINE")
    assert exact_detail(case, {"other": got * 2, "out": got}, worst, policy) == "LINE"
    assert seen == [(worst, case, "out", got, policy)]

    def broken(*args):
        raise ValueError("cannot say")

    monkeypatch.setattr(diagnosing, "exact_line", broken)
    assert exact_detail(case, {"out": got}, worst, policy) == ""
