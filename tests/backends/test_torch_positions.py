"""The torch adapter's position helpers (``backends/_torch_positions.py``), each called directly with
hand-written ids: placement on named axes, KV-cache offsets, varlen restarts, and their checks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from rope_ref.backends import _torch_positions as tp  # noqa: E402

CPU = torch.device("cpu")
X_BSHD = (2, 4, 3, 8)  # B = 2, S = 4, H = 3: no two equal
X_SBHD = (4, 2, 3, 8)


def test_place_positions_forms():
    assert tp.place_positions(torch.tensor(7), "bshd", X_BSHD).shape == ()
    tok = tp.place_positions(torch.tensor([5, 6, 7, 8]), "bshd", X_BSHD)
    assert tok.shape == (1, 4, 1) and tok.flatten().tolist() == [5, 6, 7, 8]
    assert tp.place_positions(torch.tensor([5, 6, 7, 8]), "thd", (4, 3, 8)).shape == (4, 1)
    hf = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    assert tp.place_positions(hf, "bshd", X_BSHD).tolist() == [[[0], [1], [2], [3]], [[10], [11], [12], [13]]]
    # sbhd: the (B, S) ids are transposed onto (S, B)
    placed = tp.place_positions(hf, "sbhd", X_SBHD)
    assert placed.shape == (4, 2, 1) and placed[2, 1, 0].item() == 12
    full = torch.zeros(2, 1, 3, dtype=torch.int64)
    assert tp.place_positions(full, "bshd", X_BSHD) is full
    for bad in (torch.zeros(2, 4, 2), torch.arange(5), torch.zeros(3, 4)):
        with pytest.raises(
            ValueError, match=r"ids of shape .* do not fit x of shape \(2, 4, 3, 8\) with axes='bshd'"
        ):
            tp.place_positions(bad, "bshd", X_BSHD, "ids")


def test_offset_positions():
    assert tp.offset_positions(3, "bshd", X_BSHD, CPU).flatten().tolist() == [3, 4, 5, 6]
    per_row = tp.offset_positions(torch.tensor([2, 9]), "bshd", X_BSHD, CPU)
    assert per_row.shape == (2, 4, 1) and per_row[:, :, 0].tolist() == [[2, 3, 4, 5], [9, 10, 11, 12]]
    sb = tp.offset_positions(torch.tensor([2, 9]), "sbhd", X_SBHD, CPU)
    assert sb.shape == (4, 2, 1) and sb[:, :, 0].tolist() == [[2, 9], [3, 10], [4, 11], [5, 12]]
    assert tp.offset_positions(torch.tensor(4), "thd", (3, 2, 8), CPU).flatten().tolist() == [4, 5, 6]
    for bad, err, msg in (
        (-1, ValueError, "offset must be >= 0 \\(a cache offset\\), got -1"),
        (torch.tensor([1, -2]), ValueError, "offset must be >= 0 \\(a cache offset\\), got -2"),
        (True, ValueError, "offset must be an integer or integer tensor, got True"),
        (torch.tensor([1.0, 2.0]), ValueError, "offset must hold integers, got dtype torch.float32"),
        (torch.zeros(2, 1, dtype=torch.int64), ValueError, r"offset must be a scalar or 1-D .* got \(2, 1\)"),
    ):
        with pytest.raises(err, match=msg):
            tp.offset_positions(bad, "bshd", X_BSHD, CPU)


def test_varlen_positions():
    pos = tp.varlen_positions(torch.tensor([0, 3, 3, 7]), None, "thd", (7, 2, 8), CPU)
    assert pos.shape == (7, 1) and pos.flatten().tolist() == [0, 1, 2, 0, 1, 2, 3]  # the empty one is skipped
    starts = tp.varlen_positions([0, 3, 3, 7], torch.tensor([10, 20, 30]), "thd", (7, 2, 8), CPU)
    assert starts.flatten().tolist() == [10, 11, 12, 30, 31, 32, 33]
    assert tp.varlen_positions([0, 2, 5], 4, "thd", (5, 1, 8), CPU).flatten().tolist() == [4, 5, 4, 5, 6]
    with pytest.raises(ValueError, match="cu_seqlens needs packed tokens \\('t' in axes\\), got axes='bshd'"):
        tp.varlen_positions([0, 4], None, "bshd", X_BSHD, CPU)
    with pytest.raises(ValueError, match="start_offsets must be a scalar or have 3 entries, got \\(4,\\)"):
        tp.varlen_positions([0, 3, 3, 7], [1, 2, 3, 4], "thd", (7, 2, 8), CPU)
    with pytest.raises(ValueError, match="start_offsets must be a scalar or have 2 entries, got \\(1,\\)"):
        tp.varlen_positions([0, 2, 5], [1], "thd", (5, 1, 8), CPU)
    with pytest.raises(ValueError, match="cu_seqlens\\[-1\\] = 6 must equal the token count"):
        tp.varlen_positions([0, 2, 6], None, "thd", (5, 1, 8), CPU)
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D with at least one entry"):
        tp.varlen_positions(torch.zeros(0, dtype=torch.int64), None, "thd", (5, 1, 8), CPU)


def test_resolve_positions_needs_axes_for_offsets():
    x = torch.zeros(X_BSHD)
    with pytest.raises(ValueError, match="offset= and cu_seqlens= need axes="):
        tp.resolve_positions(x, None, None, 3, None, None)
    assert tp.resolve_positions(x, torch.arange(4), "bshd", None, None, None).shape == (1, 4, 1)
    assert tp.resolve_positions(x, torch.arange(3), None, None, None, None).shape == (3,)  # as given
