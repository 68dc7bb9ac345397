"""The operation table (conformance/cases/operations.py): registration, and each family's evaluator honouring
a case's explicit ``seq_len`` (HF ``_compute_dynamic_ntk_parameters``: base * (factor L / L0 - (factor - 1))
** (d / (d - 2)) when L > L0), written out here with math.cos / math.sin pair by pair.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mp_reference import loop_rotate
from rope_ref.conformance.cases import operations

# Dynamic NTK, factor 3 over 64 positions, d = 8: an explicit seq_len 1000 scales the base; the positions
# (max 40, so max + 1 = 41 < 64) alone would leave it unscaled.
CONFIG = {
    "head_dim": 8,
    "layout": "half",
    "rotary_dim": 8,
    "base": 500.0,
    "scaling": {"rope_type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 64},
}
POSITIONS = np.array([0.0, 5.0, 40.0])
SEQ_LEN = 1000


def _inv_freq(seq_len: int) -> list[float]:
    base = 500.0 * (3.0 * seq_len / 64 - 2.0) ** (8 / 6) if seq_len > 64 else 500.0
    return [base ** (-2.0 * i / 8) for i in range(4)]


@pytest.fixture
def private_table(monkeypatch):
    """A copy of the table in place of the real one, so that a registration never outlives the test."""
    table = dict(operations.OPERATIONS)
    monkeypatch.setattr(operations, "OPERATIONS", table)
    return table


def test_an_operation_registered_twice_is_refused_and_the_first_kept(private_table):
    def first(config, inputs, params):
        return {"out": np.array([1.0])}

    def second(config, inputs, params):
        return {"out": np.array([2.0])}

    assert operations.operation("probe_op")(first) is first
    with pytest.raises(RuntimeError, match=r"^operation 'probe_op' is registered twice$"):
        operations.operation("probe_op")(second)
    assert operations.evaluate("probe_op", None, {}, {})["out"].tolist() == [1.0]
    apply_before = private_table["apply"]
    with pytest.raises(RuntimeError, match=r"^operation 'apply' is registered twice$"):
        operations.operation("apply")(second)
    assert private_table["apply"] is apply_before


def test_rotation_evaluators_use_the_cases_explicit_seq_len():
    rng = np.random.default_rng(11)
    x, g = rng.standard_normal((3, 8)), rng.standard_normal((3, 8))
    scaled, unscaled = _inv_freq(SEQ_LEN), _inv_freq(41)
    params = {"seq_len": SEQ_LEN}
    out = operations.evaluate("apply", CONFIG, {"x": x, "positions": POSITIONS}, params)["out"]
    np.testing.assert_allclose(out, loop_rotate(x, POSITIONS, scaled), rtol=0, atol=1e-12)
    assert np.abs(out - loop_rotate(x, POSITIONS, unscaled)).max() > 0.1  # the case tells the two apart
    vjp = operations.evaluate("apply_vjp", CONFIG, {"x": x, "positions": POSITIONS, "grad_out": g}, params)
    np.testing.assert_allclose(vjp["out"], loop_rotate(g, -POSITIONS, scaled), rtol=0, atol=1e-12)
    cs = operations.evaluate("cos_sin", CONFIG, {"positions": POSITIONS}, params)
    angles = POSITIONS[:, None] * np.array(scaled)
    np.testing.assert_allclose(cs["cos"], np.vectorize(math.cos)(angles), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cs["sin"], np.vectorize(math.sin)(angles), rtol=0, atol=1e-12)
    aux = operations.auxiliary("apply", CONFIG, {"x": x, "positions": POSITIONS}, params)
    np.testing.assert_allclose(aux["inv_freq"], scaled, rtol=1e-14)
    assert float(aux["attention_factor"]) == 1.0


def test_an_unknown_operation_is_refused_by_evaluate_and_has_no_auxiliary():
    with pytest.raises(ValueError, match=r"^unknown op 'h27_no_such_op'$"):
        operations.evaluate("h27_no_such_op", None, {}, {})
    assert operations.auxiliary("h27_no_such_op", None, {}, {}) == {}


def test_evaluate_and_auxiliary_call_their_own_evaluator_with_the_cases_arguments(private_table):
    calls = []

    def main(config, inputs, params):
        calls.append(("main", config, inputs, params))
        return {"out": np.array([3.0])}

    def aux(config, inputs, params):
        calls.append(("aux", config, inputs, params))
        return {"inv_freq": np.array([0.5])}

    operations.operation("probe_main_aux", auxiliary=aux)(main)
    operations.operation("probe_main_only")(main)
    entry = private_table["probe_main_aux"]
    assert entry == operations.Operation(main, aux) and private_table["probe_main_only"].auxiliary is None
    config, inputs, params = {"head_dim": 6}, {"x": np.zeros(2)}, {"seq_len": 9}
    assert operations.evaluate("probe_main_aux", config, inputs, params)["out"].tolist() == [3.0]
    assert operations.auxiliary("probe_main_aux", config, inputs, params)["inv_freq"].tolist() == [0.5]
    assert operations.auxiliary("probe_main_only", config, inputs, params) == {}
    assert calls == [("main", config, inputs, params), ("aux", config, inputs, params)]


def test_every_operation_is_registered_with_aux_exactly_where_documented():
    """``auxiliary``'s docstring: cos_sin, apply, apply_vjp, the kernel-shape ops and multiaxis_apply store
    aux; every other op stores nothing."""
    import rope_ref.conformance.cases  # noqa: F401 - importing the families fills the table

    kernel_shapes = {"apply_axes", "apply_qk", "apply_qkv", "round_trip"}
    with_aux = {"apply", "apply_vjp", "cos_sin", "multiaxis_apply"} | kernel_shapes
    without = {
        "attention_factor",
        "chatglm_apply_2d",
        "chatglm_next_position_ids",
        "chatglm_position_ids",
        "decay_upper_bound",
        "inv_freq",
        "mla_softmax_scale",
        "mrope_decode_ids",
        "mrope_position_ids",
        "vision_ids",
    }
    table = operations.OPERATIONS
    assert set(table) == with_aux | without
    assert {op for op, entry in table.items() if entry.auxiliary is not None} == with_aux
    x = np.array([[1.0, 0.0, 0.0, 1.0]])
    aux = operations.auxiliary(
        "apply",
        {**CONFIG, "head_dim": 4, "rotary_dim": 4, "scaling": None},
        {"x": x, "positions": np.array([2.0])},
        {},
    )
    np.testing.assert_allclose(aux["inv_freq"], [1.0, 500.0**-0.5], rtol=1e-15)
    assert operations.auxiliary("inv_freq", CONFIG, {}, {}) == {}
