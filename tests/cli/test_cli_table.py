"""``rope-ref table`` (rope_ref.cli.table): the config each flag builds, the printed header and blocks,
the width limits and the exit statuses, run in-process through ``main(argv)``.

Expected numbers are written out from the formulas: inv_freq[i] = base^(-2i/rotary_dim) (divided by F for
a linear scaling), YaRN's attention factor 0.1 ln(F) + 1, and a row of 10 + k * (cell + 2) columns.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from rope_ref.cli import main, table

HF_NO_MODEL_TYPE = {"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 20000.0}


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["table", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _inv_freq(out: str) -> list[float]:
    return [float(ln.split()[1]) for ln in out.splitlines() if ln.startswith("  i=")]


def _rows(out: str) -> list[list[str]]:
    """Every table row: [position, '(cos,sin)', ...]."""
    grid = out[out.index("(cos, sin) per pair:") :].splitlines()[1:]
    return [ln.split() for ln in grid if ln.split()[0] not in ("position", "pairs")]


def _hf(tmp_path, config: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def test_every_manual_flag_is_taken(capsys):
    argv = ["--head-dim", "16", "--rotary-dim", "8", "--layout", "interleaved", "--base", "500"]
    status, out, _ = _run(capsys, [*argv, "--positions", "1", "--digits", "12"])
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "head_dim=16 rotary_dim=8 layout=interleaved base=500 attention_factor=1  (float64)"
    assert lines[1] == "inv_freq[i] = base^(-2i/rotary_dim):"
    np.testing.assert_allclose(_inv_freq(out), [500.0 ** (-i / 4) for i in range(4)], rtol=0, atol=1e-12)
    assert "scaling:" not in out


def test_a_fractional_base_is_accepted(capsys):
    status, out, _ = _run(
        capsys, ["--head-dim", "4", "--base", "2.5e3", "--positions", "0", "--digits", "12"]
    )
    assert status == 0 and " base=2500 " in out.splitlines()[0]
    np.testing.assert_allclose(_inv_freq(out), [1.0, 2500.0**-0.5], rtol=0, atol=1e-12)


def test_defaults_are_half_layout_full_width_six_digits_and_positions_0_to_3(capsys):
    status, out, _ = _run(capsys, ["--head-dim", "4"])
    assert status == 0
    assert (
        out.splitlines()[0] == "head_dim=4 rotary_dim=4 layout=half base=10000 attention_factor=1  (float64)"
    )
    assert "  i=1    0.010000" in out.splitlines()
    rows = _rows(out)
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert rows[1][1] == f"({math.cos(1):+.6f},{math.sin(1):+.6f})"


def test_positions_and_digits_are_printed_as_given(capsys):
    status, out, _ = _run(capsys, ["--head-dim", "8", "--positions", "5,-2", "--digits", "3"])
    assert status == 0
    assert "  i=1    0.100" in out.splitlines()
    rows = _rows(out)
    assert [r[0] for r in rows] == ["5", "-2"]
    assert rows[0][1] == f"({math.cos(5):+.3f},{math.sin(5):+.3f})"  # (+0.284,-0.959)
    assert rows[1][2] == f"({math.cos(-0.2):+.3f},{math.sin(-0.2):+.3f})"  # pair 1: theta = 0.1


def test_a_scaling_is_shown_and_applied(capsys):
    status, out, _ = _run(
        capsys, ["--head-dim", "8", "--scaling", "linear:4", "--positions", "0", "--digits", "12"]
    )
    assert status == 0
    assert "inv_freq[i] = base^(-2i/rotary_dim) (scaled):" in out
    assert [ln for ln in out.splitlines() if ln.startswith("scaling: ")]
    np.testing.assert_allclose(_inv_freq(out), [10.0**-i / 4 for i in range(4)], rtol=0, atol=1e-12)
    status, out, _ = _run(capsys, ["--head-dim", "8", "--scaling", "yarn:4:64", "--positions", "0"])
    assert status == 0
    assert f"attention_factor={0.1 * math.log(4) + 1:g}  (float64)" in out.splitlines()[0]


@pytest.mark.parametrize("source", ["preset", "hf"])
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--rotary-dim", "64"], "--rotary-dim"),
        (["--base", "500000"], "--base"),
        (["--scaling", "linear:2"], "--scaling"),
        (["--scaling", "linear:2", "--base", "500000"], "--base"),
    ],
)
def test_manual_flags_are_refused_without_head_dim(capsys, tmp_path, source, extra, named):
    src = (
        ["--preset", "llama-2-7b"] if source == "preset" else ["--hf-config", _hf(tmp_path, HF_NO_MODEL_TYPE)]
    )
    status, out, err = _run(capsys, [*src, *extra])
    assert status == 2 and out == ""
    assert (
        err
        == f"rope-ref table: error: {named} only applies with --head-dim (a preset or HF config fixes it)\n"
    )


def test_hf_config_takes_the_layout_flag(capsys, tmp_path):
    path = _hf(tmp_path, HF_NO_MODEL_TYPE)
    status, out, _ = _run(capsys, ["--hf-config", path, "--layout", "interleaved", "--positions", "0"])
    assert status == 0
    assert out.splitlines()[0].startswith("head_dim=128 rotary_dim=128 layout=interleaved base=20000 ")
    # Without --layout a config that has no model_type cannot be paired: the error names the file.
    status, _, err = _run(capsys, ["--hf-config", path])
    assert status == 2
    assert err.startswith(f"rope-ref table: error: --hf-config {path}: layout is required")


@pytest.mark.parametrize("exc", [OverflowError("int too large"), RecursionError("too deep")])
def test_hf_config_values_out_of_range_name_the_file(capsys, tmp_path, monkeypatch, exc):
    def explode(config, layout=None):
        raise exc

    monkeypatch.setattr(table.RopeConfig, "from_hf", staticmethod(explode))
    path = _hf(tmp_path, HF_NO_MODEL_TYPE)
    status, _, err = _run(capsys, ["--hf-config", path])
    assert status == 2
    assert err == f"rope-ref table: error: --hf-config {path}: a value is out of range ({exc})\n"


def test_no_config_source_says_which_flags_give_one(capsys):
    status, _, err = _run(capsys, ["--positions", "0"])
    assert status == 2
    assert err == "rope-ref table: error: give the config: --head-dim D, --preset NAME or --hf-config FILE\n"


def test_config_sources_are_mutually_exclusive(capsys):
    with pytest.raises(SystemExit) as info:
        main(["table", "--head-dim", "8", "--preset", "llama-2-7b"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(("requested", "ok"), [(39, False), (40, True), (100_000, True), (100_001, False)])
def test_width_limits_are_inclusive(requested, ok):
    assert (table.MIN_WIDTH, table.MAX_WIDTH) == (40, 100_000)
    if ok:
        assert table._width(requested) == requested
    else:
        with pytest.raises(ValueError, match=f"^--width must be between 40 and 100000, got {requested}$"):
            table._width(requested)


@pytest.mark.parametrize(("columns", "want"), [(25, 40), (40, 40), (133, 133)])
def test_default_width_is_the_terminal_at_least_40(monkeypatch, columns, want):
    asked = []

    def fake_size(fallback=(80, 24)):
        asked.append(fallback)
        return os.terminal_size((columns, 24))

    monkeypatch.setattr(table.shutil, "get_terminal_size", fake_size)
    assert table._width(None) == want
    assert asked == [(120, 24)]


@pytest.mark.parametrize(
    ("width", "per_block", "blocks"),
    [
        (67, 3, ["pairs 0..2 of 4:", "pairs 3..3 of 4:"]),
        (66, 2, ["pairs 0..1 of 4:", "pairs 2..3 of 4:"]),
        (86, 4, []),
    ],
)
def test_blocks_fill_the_width(capsys, width, per_block, blocks):
    # digits 4: a cell '(+0.5403,+0.8415)' has 17 columns; a row is 10 + k * (17 + 2) columns wide.
    status, out, _ = _run(
        capsys, ["--head-dim", "8", "--positions", "0:2", "--digits", "4", "--width", str(width)]
    )
    assert status == 0
    grid = out[out.index("(cos, sin) per pair:") :].splitlines()[1:]
    assert [ln for ln in grid if ln.startswith("pairs ")] == blocks
    rows = [ln for ln in grid if not ln.startswith("pairs ")]
    assert max(len(ln) for ln in rows) == 10 + per_block * 19
    header = [ln for ln in rows if ln.lstrip().startswith("position")]
    assert header[0].startswith("  position  ") and header[0].endswith(f"pair {per_block - 1}")
    assert len(rows) == 3 * max(1, len(blocks))  # a header and 2 positions per block


def test_non_finite_tables_exit_1(capsys, monkeypatch):
    def nan_cos_sin(positions, cfg):
        shape = (np.size(positions), cfg.rotary_dim // 2)
        return np.full(shape, np.nan), np.zeros(shape)

    monkeypatch.setattr(table, "cos_sin", nan_cos_sin)
    status, out, _ = _run(capsys, ["--head-dim", "4", "--positions", "0"])
    assert status == 1 and "(+nan,+0.000000)" in out


def test_an_unreadable_hf_config_is_named_as_the_flag(capsys, tmp_path):
    missing = tmp_path / "absent.json"
    status, out, err = _run(capsys, ["--hf-config", str(missing), "--layout", "half"])
    assert status == 2 and out == ""
    assert err.startswith(f"rope-ref table: error: --hf-config {missing}: cannot read it")
