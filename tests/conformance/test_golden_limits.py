"""The reading limits of a golden set (``conformance/golden_limits.py``), checked at the helpers.

Every expected size is counted by hand from the documented rule (``docs/golden-format.md``, "Reading a set
from a stranger"): stored elements, plus one table row of the widest head per position after broadcasting
against the activations, plus ``3·B·n_new`` for ``mrope_decode_ids``, plus ``3·t·h·w`` per patch grid row
and the largest ``cu_seqlens`` entry from the stored values.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from rope_ref.conformance.golden import (
    DEFAULT_LIMITS,
    GoldenError,
    GoldenLimitError,
    ReadLimits,
    parse_limits,
)
from rope_ref.conformance.golden_limits import (
    check_declared,
    check_values,
    data_parts,
    evaluation_elements,
    evaluation_parts,
)


def _spec(dtype: str, *shape: int) -> dict:
    return {"dtype": dtype, "shape": list(shape)}


def _apply_entry() -> dict:
    """An ``apply`` case: x (B=4, H=8, S=16, D=64), positions (S,), head_dim 64, rotary 32."""
    return {
        "id": "apply-hand",
        "op": "apply",
        "config": {"head_dim": 64, "rotary_dim": 32, "layout": "half", "base": 1e4, "scaling": None},
        "params": {"axes": "bhsd"},
        "inputs": {"x": _spec("float32", 4, 8, 16, 64), "positions": _spec("int64", 16)},
        "expected": {"out": _spec("float64", 4, 8, 16, 64)},
        "aux": {"inv_freq": _spec("float64", 16), "attention_factor": _spec("float64")},
    }


# stored: x and out 2·32768, positions 16, inv_freq 16, attention_factor 1
APPLY_STORED = 2 * 4 * 8 * 16 * 64 + 16 + 16 + 1
# positions (16,) broadcast against x's leading axes (4, 8, 16): 512 rows of the head width 64
APPLY_TABLES = 4 * 8 * 16 * 64


def test_defaults_are_the_documented_ones():
    assert DEFAULT_LIMITS == ReadLimits(
        manifest_bytes=64 * 1024 * 1024,
        header_bytes=16 * 1024 * 1024,
        tensor_bytes=1024**3,
        case_elements=134_217_728,
        run_bytes=8 * 1024**3,
        npz_ratio=64,
    )


@pytest.mark.parametrize(
    ("spec", "name", "value"),
    [
        ("run_bytes=16G", "run_bytes", 16 * 1024**3),
        ("header_bytes=3k", "header_bytes", 3 * 1024),
        ("tensor_bytes = 2 MiB", "tensor_bytes", 2 * 1024 * 1024),
        ("case_elements=5", "case_elements", 5),
        ("manifest_bytes=1t", "manifest_bytes", 1024**4),
    ],
)
def test_parse_limits_reads_binary_multiples(spec, name, value):
    limits = parse_limits([spec])
    assert getattr(limits, name) == value
    others = [f for f in ReadLimits.__dataclass_fields__ if f != name]
    assert all(getattr(limits, f) == getattr(DEFAULT_LIMITS, f) for f in others)


@pytest.mark.parametrize("spec", ["run_bytes=0", "run_bytes=0G", "nonsense=1", "run_bytes", "run_bytes=-1"])
def test_parse_limits_refuses_a_bad_spec(spec):
    with pytest.raises(ValueError, match="--limit"):
        parse_limits([spec])


def test_evaluation_parts_broadcast_positions_over_the_activations():
    parts = dict(evaluation_parts(_apply_entry()))
    assert parts == {
        "stored tensors": APPLY_STORED,
        "inputs.positions shape [16] x head width 64": APPLY_TABLES,
    }
    assert evaluation_elements(_apply_entry()) == APPLY_STORED + APPLY_TABLES


def test_evaluation_parts_take_a_config_less_width_from_the_activations():
    entry = {
        "id": "chatglm-hand",
        "op": "chatglm_apply_2d",
        "config": None,
        "params": {},
        "inputs": {
            "x": _spec("float64", 3, 12, 2, 40),
            "position_ids": _spec("int64", 3, 12, 1),
            "block_position_ids": _spec("int64", 3, 12, 1),
        },
        "expected": {"out": _spec("float64", 3, 12, 2, 40)},
    }
    # each id array (3, 12, 1) broadcasts to (3, 12, 2): 72 rows of width 40 (x's last axis)
    assert dict(evaluation_parts(entry))["inputs.position_ids shape [3, 12, 1] x head width 40"] == 72 * 40
    assert evaluation_elements(entry) == 2 * 3 * 12 * 2 * 40 + 2 * 36 + 2 * 72 * 40


def _decode_entry(batch: int, n_new: int, stored_n_new: int) -> dict:
    """An ``mrope_decode_ids`` case of ``batch`` rows whose stored output holds ``stored_n_new`` ids."""
    return {
        "id": "decode-hand",
        "op": "mrope_decode_ids",
        "config": None,
        "params": {"cache_position": 11, "n_new": n_new},
        "inputs": {"deltas": _spec("int64", batch, 1)},
        "expected": {"out": _spec("int64", 3, batch, stored_n_new)},
    }


def test_evaluation_parts_count_three_streams_of_n_new_per_row():
    entry = _decode_entry(5, 7, 7)
    assert dict(evaluation_parts(entry))["params.n_new = 7"] == 3 * 5 * 7
    assert evaluation_elements(entry) == 5 + 105 + 105


def test_check_declared_refuses_over_the_limit_naming_the_largest_part():
    entry = _apply_entry()
    total = APPLY_STORED + APPLY_TABLES
    check_declared("set", entry, replace(DEFAULT_LIMITS, case_elements=total))  # exactly at the limit
    with pytest.raises(GoldenLimitError) as info:
        check_declared("set", entry, replace(DEFAULT_LIMITS, case_elements=total - 1))
    msg = str(info.value)
    assert f"= {total} is over the limit case_elements = {total - 1}" in msg
    assert "(most for stored tensors)" in msg  # 65569 stored, 32768 of tables
    assert "set/manifest.json: case 'apply-hand'" in msg


def test_check_declared_names_n_new_when_it_dominates():
    entry = _decode_entry(2, 1000, 1)  # a hostile n_new: stored 2 + 6, allocated 3·2·1000
    with pytest.raises(GoldenLimitError, match=r"\(most for params.n_new = 1000\) = 6008 is over"):
        check_declared("set", entry, replace(DEFAULT_LIMITS, case_elements=6007))
    check_declared("set", entry, replace(DEFAULT_LIMITS, case_elements=6008))


def test_check_declared_sizes_each_tensor_by_its_dtype():
    entry = _apply_entry()
    # the largest tensor, out: 32768 float64 = 262144 bytes; x: 32768 float32 = 131072 bytes
    check_declared("set", entry, replace(DEFAULT_LIMITS, tensor_bytes=262_144))
    with pytest.raises(GoldenLimitError, match=r"expected\.out float64\[4, 8, 16, 64\] size = 262144 bytes"):
        check_declared("set", entry, replace(DEFAULT_LIMITS, tensor_bytes=262_143))
    entry["expected"]["out"] = _spec("float32", 4, 8, 16, 64)
    check_declared("set", entry, replace(DEFAULT_LIMITS, tensor_bytes=131_072))
    with pytest.raises(GoldenLimitError, match="over the limit tensor_bytes = 131071 bytes"):
        check_declared("set", entry, replace(DEFAULT_LIMITS, tensor_bytes=131_071))


def test_check_declared_sizes_aux_tensors_too():
    entry = _apply_entry()
    entry["aux"]["inv_freq"] = _spec("float64", 2**28)
    with pytest.raises(GoldenLimitError, match=r"aux\.inv_freq float64\[268435456\] size = 2147483648 bytes"):
        check_declared("set", entry, DEFAULT_LIMITS)


def test_a_dimension_over_2_to_the_62_is_corrupt_not_a_limit():
    entry = _apply_entry()
    entry["inputs"]["positions"] = _spec("int64", 0, 2**64)
    with pytest.raises(GoldenError) as info:
        check_declared("set", entry, DEFAULT_LIMITS)
    assert not isinstance(info.value, GoldenLimitError)
    assert "inputs.positions shape has dimension 18446744073709551616, over 2^62" in str(info.value)


def test_data_parts_size_grids_and_sequence_boundaries_from_their_values():
    inputs = {
        "image_grid_thw": np.array([[1, 4, 6], [2, 0, 8]]),  # 72 ids; a 0 counts as 1: 3·2·1·8 = 48
        "grids": np.array([[5, 7]]),  # pixtral (h, w): 105
        "cu_seqlens": np.array([0, 100, 7]),  # not monotonic: the largest entry, not the last
        "positions": np.arange(10**6),  # no value of an ordinary input counts
    }
    assert data_parts(inputs) == [
        ("inputs.grids[0] = [5, 7]", 105),
        ("inputs.image_grid_thw[0] = [1, 4, 6]", 72),
        ("inputs.image_grid_thw[1] = [2, 0, 8]", 48),
        ("inputs.cu_seqlens holding 100", 100),
    ]


def test_check_values_bounds_the_sum_and_names_the_largest_row():
    inputs = {"video_grid_thw": np.array([[1, 2, 2], [3, 4, 5], [2, 2, 2]])}  # 12 + 180 + 24 = 216
    check_values("set: case 'v'", inputs, replace(DEFAULT_LIMITS, case_elements=216))
    with pytest.raises(GoldenLimitError) as info:
        check_values("set: case 'v'", inputs, replace(DEFAULT_LIMITS, case_elements=215))
    msg = str(info.value)
    assert msg.startswith("set: case 'v': elements its stored values make re-evaluation allocate")
    assert (
        "(most for inputs.video_grid_thw[1] = [3, 4, 5]) = 216 is over the limit case_elements = 215" in msg
    )
