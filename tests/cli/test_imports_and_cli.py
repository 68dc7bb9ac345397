"""Light imports (a subprocess proves it) and the command line."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fresh_interpreter import modules_loaded_by

import rope_ref
from rope_ref.cli import main
from rope_ref.cli.common import MAX_POSITIONS, parse_positions


def test_import_rope_ref_loads_no_heavy_library():
    code = "import rope_ref, rope_ref.backends, rope_ref.conformance, rope_ref.cli"
    assert modules_loaded_by(code, ["torch", "cupy", "jax", "matplotlib"]) == []


def test_version_and_help(capsys):
    for argv in (["--version"], ["--help"]):
        try:
            main(argv)
        except SystemExit as exc:
            assert exc.code == 0
    out = capsys.readouterr().out
    assert rope_ref.__version__ in out
    assert "table" in out


def test_table_prints_published_values(capsys):
    assert main(["table", "--head-dim", "8", "--positions", "0:3", "--digits", "4"]) == 0
    out = capsys.readouterr().out
    assert "(+0.5403,+0.8415)" in out and "(-0.4161,+0.9093)" in out
    assert "0.1000" in out and "0.0010" in out


def test_table_reports_bad_arguments(capsys):
    assert main(["table", "--head-dim", "7"]) == 2
    assert "head_dim must be a positive even integer, got 7" in capsys.readouterr().err
    assert main(["table", "--head-dim", "8", "--positions", "1,x"]) == 2
    assert "'x'" in capsys.readouterr().err


def test_parse_positions():
    assert parse_positions("0:4,255,256").tolist() == [0, 1, 2, 3, 255, 256]
    assert parse_positions("0:10:5").tolist() == [0, 5]
    np.testing.assert_array_equal(parse_positions("0.5,-1"), [0.5, -1.0])


def test_parse_positions_limit_counts_a_default_step_of_one():
    # 'a:b' steps by 1: 0:MAX gives exactly MAX values (allowed), 0:MAX+1 one too many (refused).
    assert parse_positions(f"0:{MAX_POSITIONS}").size == MAX_POSITIONS
    with pytest.raises(ValueError, match=f"more than {MAX_POSITIONS} values"):
        parse_positions(f"0:{MAX_POSITIONS + 1}")


@pytest.mark.parametrize("token", ["0:4:0", "3:1:0.0", "0:4:-0"])
def test_parse_positions_zero_step_is_a_parse_error(token):
    with pytest.raises(ValueError, match=f"cannot parse '{token}'"):
        parse_positions(token)


def test_one_top_level_name_with_mapped_subpackages():
    from importlib import metadata
    from pathlib import Path

    import rope_ref.backends
    import rope_ref.conformance

    top = metadata.distribution("rope-ref").read_text("top_level.txt")
    assert top is not None and top.split() == ["rope_ref"]
    # backends/ and conformance/ install as rope_ref.backends / rope_ref.conformance (package-dir mapping).
    assert Path(rope_ref.backends.__file__).parent.name == "backends"
    assert Path(rope_ref.conformance.__file__).parent.name == "conformance"


def test_cli_refuses_runaway_or_bad_arguments_cleanly(capsys, tmp_path):
    assert main(["table", "--head-dim", "8", "--positions", "0:100000000"]) == 2
    assert "more than 1000000 values" in capsys.readouterr().err
    assert main(["table", "--head-dim", "8", "--digits", "-3"]) == 2
    assert "--digits must be between 0 and 17, got -3" in capsys.readouterr().err
    assert main(["decay", "--head-dim", "16", "--max-distance", "8", "--window", "0"]) == 2
    assert "--window must be >= 1, got 0" in capsys.readouterr().err
    missing = tmp_path / "no" / "such" / "dir" / "x.csv"
    assert main(["decay", "--head-dim", "16", "--max-distance", "8", "--csv", str(missing)]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_table_defaults_to_base_10000(capsys):
    # inv_freq[i] = 10000 ** (-2 i / 8) = 10 ** -i: printed to 12 digits a base of 10001 would show
    assert main(["table", "--head-dim", "8", "--positions", "1", "--digits", "12"]) == 0
    out = capsys.readouterr().out
    assert "base=10000 " in out
    for i in range(4):
        assert f"i={i:<4d} {10.0 ** -i:.12f}" in out


def test_integer_positions_stay_integers_in_the_table(capsys):
    assert parse_positions("0:3,7").dtype == np.int64
    assert parse_positions("2.0,4").dtype == np.int64
    assert parse_positions("0.5,4").dtype == np.float64
    assert main(["table", "--head-dim", "4", "--positions", "2.0,7", "--digits", "2"]) == 0
    rows = re.findall(r"^ +(\S+)  \(", capsys.readouterr().out, flags=re.MULTILINE)
    assert rows == ["2", "7"]
