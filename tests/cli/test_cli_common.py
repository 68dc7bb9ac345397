"""``rope_ref.cli.common``: the positions spec parser and the config reader, called directly.

Expected lists are written out by hand from the documented syntax ('a:b' is a half-open range stepping
by 1, 'a:b:s' steps by s), never computed by the parser.
"""

from __future__ import annotations

import numpy as np
import pytest

from rope_ref.cli import common
from rope_ref.cli.common import MAX_POSITIONS, parse_positions, read_json_config


def test_limits_are_the_documented_ones():
    assert MAX_POSITIONS == 1_000_000
    assert common.MAX_CONFIG_BYTES == 16 * 2**20


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("0:3", [0, 1, 2]),
        ("2:5", [2, 3, 4]),  # a start other than 0, a default step of 1
        ("1:9:3", [1, 4, 7]),
        ("5:0:-2", [5, 3, 1]),  # a negative step counts down, end excluded
        ("5:0,3", [3]),  # an empty range adds nothing
        (" 4 , 1:3 ,-2", [4, 1, 2, -2]),  # spaces around tokens, order kept, no sorting
        ("0.5:3", [0.5, 1.5, 2.5]),
        ("0:1:0.25", [0.0, 0.25, 0.5, 0.75]),
        ("7", [7]),
    ],
)
def test_parse_positions_expands_specs_by_hand(spec, want):
    got = parse_positions(spec)
    assert got.tolist() == want
    integral = all(float(v).is_integer() for v in want)
    assert got.dtype == (np.int64 if integral else np.float64)


@pytest.mark.parametrize("spec", ["", "   ", None, 5, b"0:3"])
def test_parse_positions_refuses_empty_or_non_string_specs(spec):
    with pytest.raises(ValueError, match=r"positions must be a non-empty spec like '0,1,2' or '0:8', got "):
        parse_positions(spec)


@pytest.mark.parametrize("token", ["0:1:2:3", "0", "1:", ":4", "a:b", "0::2"])
def test_parse_positions_names_the_bad_range_token(token):
    spec = f"1,{token}" if ":" in token else f"{token},x"
    bad = token if ":" in token else "x"
    with pytest.raises(
        ValueError, match=rf"positions: cannot parse '{bad}' \(use '0,1,2', 'a:b' or 'a:b:step'\)"
    ):
        parse_positions(spec)


@pytest.mark.parametrize("spec", ["nan", "1,inf", "-inf,0", "2,NaN"])
def test_parse_positions_refuses_non_finite_values(spec):
    with pytest.raises(ValueError, match=rf"positions must be finite, got '{spec}'"):
        parse_positions(spec)


@pytest.mark.parametrize(
    "spec",
    [
        f"0:{MAX_POSITIONS}.5",  # ceil: 1000001 values, not floor's 1000000
        f"7,0:{MAX_POSITIONS}",  # values already taken count against the limit
        f"0:{MAX_POSITIONS},5",  # and a single value after a full range
        f"{MAX_POSITIONS + 1}:0:-1",  # a negative step is counted too
        f"0:{MAX_POSITIONS // 2 + 1}:0.5",  # and a fractional one
        "0:inf",
    ],
)
def test_parse_positions_limit_counts_every_value(spec):
    with pytest.raises(ValueError, match=rf"positions: '{spec}' expands to more than {MAX_POSITIONS} values"):
        parse_positions(spec)


def test_parse_positions_limit_is_inclusive_across_tokens():
    got = parse_positions(f"7,1:{MAX_POSITIONS}")  # 1 + (MAX - 1) values: exactly the limit
    assert got.size == MAX_POSITIONS and got[0] == 7 and got[1] == 1 and got[-1] == MAX_POSITIONS - 1
    got = parse_positions(f"1:{MAX_POSITIONS},7")  # the single value last
    assert got.size == MAX_POSITIONS and got[0] == 1 and got[-2] == MAX_POSITIONS - 1 and got[-1] == 7


@pytest.mark.parametrize("spec", ["5:0", "0:0", "3:9:-1", " 5:0 , 2:2 "])
def test_parse_positions_refuses_a_spec_that_expands_to_no_values(spec):
    with pytest.raises(ValueError, match=rf"positions: '{spec}' expands to no values"):
        parse_positions(spec)


def test_parse_positions_keeps_fractional_values_and_integer_values_exact():
    mixed = parse_positions("0.5,4")
    assert mixed.dtype == np.float64 and mixed.tolist() == [0.5, 4.0]
    tenths = parse_positions("0.1,0.2")  # not exact in float32: the parse stays float64
    assert tenths.dtype == np.float64 and tenths.tolist() == [0.1, 0.2]
    neg = parse_positions("-3:-1")
    assert neg.dtype == np.int64 and neg.tolist() == [-3, -2]


def test_read_json_config_names_the_argument_it_is_given(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^--hf-config {path}: must hold a JSON object, got list$"):
        read_json_config(str(path))
    with pytest.raises(ValueError, match=rf"^--config {path}: must hold a JSON object, got list$"):
        read_json_config(str(path), "--config")
    missing = tmp_path / "none.json"
    with pytest.raises(ValueError, match=rf"^--manifest {missing}: cannot read it"):
        read_json_config(str(missing), argument="--manifest")


def test_read_json_config_returns_the_object(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"rope_theta": 500000.0, "head_dim": 64, "nested": {"a": [1, 2]}}', encoding="utf-8")
    assert read_json_config(str(path)) == {"rope_theta": 500000.0, "head_dim": 64, "nested": {"a": [1, 2]}}
