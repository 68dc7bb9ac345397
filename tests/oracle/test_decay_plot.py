"""``rope_ref.decay.plot_decay``: figure size, line widths, axes, grid and labels (matplotlib, Agg)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rope_ref import RopeConfig, decay


def test_plot_decay_default_figure_size_is_7_by_4_inches():
    fig = decay.plot_decay(RopeConfig(16, layout="half"), 10)
    np.testing.assert_array_equal(fig.get_size_inches(), [7.0, 4.0])


def test_plot_decay_line_width_thin_for_raw_curves_thicker_for_moving_means():
    cfg = RopeConfig(16, layout="half")
    assert decay.plot_decay(cfg, 20).axes[0].get_lines()[0].get_linewidth() == 0.8
    assert decay.plot_decay(cfg, 20, window=2).axes[0].get_lines()[0].get_linewidth() == 1.2


def test_plot_decay_axes_png_size_and_window_limits(tmp_path):
    cfg = RopeConfig(16, layout="half")
    with pytest.raises(ValueError, match="at least one"):
        decay.plot_decay([], 10)
    fig = decay.plot_decay(cfg, 5, window=6, path=str(tmp_path / "a.png"))  # 6 distances, one mean
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [2.5]
    png = (tmp_path / "a.png").read_bytes()
    # IHDR: width and height big-endian at bytes 16..24; 7 x 4 inches at the default 100 dpi.
    assert int.from_bytes(png[16:20], "big") == 700 and int.from_bytes(png[20:24], "big") == 400
    ax = decay.plot_decay(cfg, 20, step=0.5, log_x=True).axes[0]
    assert ax.get_xscale() == "symlog" and ax.xaxis.get_transform().linthresh == 1.0
    ax = decay.plot_decay(cfg, 20, step=2.0, log_x=True).axes[0]
    assert ax.xaxis.get_transform().linthresh == 2.0
    assert ax.xaxis.get_gridlines()[0].get_alpha() == 0.3
    assert decay.plot_decay(cfg, 20).axes[0].get_xscale() == "linear"


def test_plot_decay_grid_and_labels():
    cfg = RopeConfig(16, layout="half")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "grid() is false, but line properties are supplied"
        ax = decay.plot_decay(cfg, 20).axes[0]
    assert ax.xaxis.get_gridlines()[0].get_visible() and ax.yaxis.get_gridlines()[0].get_visible()
    plain = "relative upper bound (1/(d/2)) sum |S_j|"
    assert ax.get_ylabel() == plain and ax.get_xlabel() == "relative distance m - n"
    assert ax.get_title() == "RoPE long-term decay (RoFormer §3.4.3)"
    ax2 = decay.plot_decay(cfg, 20, window=3, title="T").axes[0]
    assert ax2.get_ylabel() == plain + "\nmoving mean over 3 distances" and ax2.get_title() == "T"


def test_plot_decay_png_takes_the_figure_size_and_dpi(tmp_path):
    path = tmp_path / "s.png"
    decay.plot_decay(RopeConfig(8, layout="half"), 4, figsize=(3.0, 2.5), dpi=40, path=str(path))
    png = path.read_bytes()
    # IHDR width and height: 3 x 2.5 inches at 40 dpi.
    assert int.from_bytes(png[16:20], "big") == 120 and int.from_bytes(png[20:24], "big") == 100
