"""``rope_ref.kernel_args``: each host-side check of a kernel-style call, called directly with bad input.

Every check is reached here at the helper (the adapters and ``rope_ref.positions`` call them after their
own conversions); the accepted values are worked out by hand.
"""

import numpy as np
import pytest

from rope_ref import kernel_args as ka

IDS, OFF, CU = np.arange(4), np.int64(3), np.array([0, 2, 5])


@pytest.mark.parametrize(
    ("args", "kwargs", "want"),
    [
        ((IDS, None, None), {}, "positions"),
        ((None, OFF, None), {"axes": "bshd"}, "offset"),
        ((None, None, CU, 1, 4), {"axes": "thd"}, "cu_seqlens"),
        ((None, OFF, None), {}, "offset"),
    ],
)
def test_position_form_names_the_form(args, kwargs, want):
    assert ka.position_form(*args, **kwargs) == want


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((None, None, None), {}, "give exactly one of positions, offset, cu_seqlens; got none"),
        ((IDS, OFF, None), {}, "got \\['positions', 'offset'\\]"),
        ((IDS, None, CU), {}, "got \\['positions', 'cu_seqlens'\\]"),
        ((None, OFF, None, 2), {}, "start_offsets goes with cu_seqlens"),
        ((None, OFF, None, None, 4), {}, "max_seqlen goes with cu_seqlens"),
        ((None, OFF, None), {"axes": "thd"}, "offset needs batch and sequence axes"),
        ((None, OFF, None), {"axes": "shd"}, "offset needs batch and sequence axes"),
        ((None, None, CU), {"axes": "bshd"}, "cu_seqlens needs packed tokens"),
    ],
)
def test_position_form_refuses(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ka.position_form(*args, **kwargs)


def test_check_cu_seqlens():
    assert ka.check_cu_seqlens(np.array([0, 2, 2, 5]), tokens=5).tolist() == [2, 0, 3]  # empty allowed
    assert ka.check_cu_seqlens(np.array([0])).tolist() == []
    for cu, tokens, match in [
        (np.array([[0, 2]]), None, "1-D with at least one entry"),
        (np.array([], dtype=np.int64), None, "1-D with at least one entry"),
        (np.array([1, 2]), None, "must start at 0"),
        (np.array([0, 3, 2]), None, "non-decreasing, got 3 then 2 at 1"),
        (np.array([0, 2, 5]), 6, "cu_seqlens\\[-1\\] = 5 must equal the token count x.shape\\[1\\] = 6"),
    ]:
        with pytest.raises(ValueError, match=match):
            ka.check_cu_seqlens(cu, tokens, t_axis=1)


def test_check_non_negative():
    ka.check_non_negative(np.array([0, 3]), "offset")
    ka.check_non_negative(np.array([], dtype=np.int64), "offset")
    with pytest.raises(ValueError, match="start_offsets must be >= 0 \\(a cache offset\\), got -2"):
        ka.check_non_negative(np.array([4, -2, 1]), "start_offsets")


def test_check_start_offsets():
    got = ka.check_start_offsets(np.int64(7), 3)
    assert got.dtype == np.int64 and got.tolist() == [7, 7, 7]
    assert ka.check_start_offsets(np.array([1, 0, 4], dtype=np.int32), 3).tolist() == [1, 0, 4]
    with pytest.raises(ValueError, match="a scalar or have 3 entries, got shape \\(2,\\)"):
        ka.check_start_offsets(np.array([1, 2]), 3)
    with pytest.raises(ValueError, match="start_offsets must be >= 0"):
        ka.check_start_offsets(np.array([1, -1, 2]), 3)
    with pytest.raises(ValueError, match="start_offsets must be >= 0"):
        ka.check_start_offsets(np.int64(-3), 2)


def test_check_max_seqlen():
    lengths = np.array([2, 5, 3])
    ka.check_max_seqlen(None, lengths)
    ka.check_max_seqlen(5, lengths)
    ka.check_max_seqlen(np.int32(9), lengths)
    ka.check_max_seqlen(0, np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="max_seqlen = 4 is shorter than the longest sequence \\(5\\)"):
        ka.check_max_seqlen(4, lengths)
    for bad in (True, 5.0, "5"):
        with pytest.raises(ValueError, match="max_seqlen must be an int"):
            ka.check_max_seqlen(bad, lengths)


def test_check_offset():
    ka.check_offset(np.int64(4), 3, "bshd")
    ka.check_offset(np.array([0, 1, 2]), 3, "bshd")
    with pytest.raises(ValueError, match="offset must be a scalar or 1-D"):
        ka.check_offset(np.zeros((3, 1), dtype=np.int64), 3, "bshd")
    with pytest.raises(ValueError, match="offset has 2 entries but x has batch 3 \\(axes='sbhd'\\)"):
        ka.check_offset(np.array([0, 1]), 3, "sbhd")
    with pytest.raises(ValueError, match="offset must be >= 0"):
        ka.check_offset(np.array([0, -1, 2]), 3, "bshd")


@pytest.mark.parametrize(
    ("offset_shape", "axes", "shape", "want"),
    [
        ((), "bshd", (2, 5, 3, 8), ((1, 5, 1), False)),
        ((2,), "bshd", (2, 5, 3, 8), ((2, 5, 1), False)),
        ((2,), "bhsd", (2, 3, 5, 8), ((2, 1, 5), False)),
        ((2,), "sbhd", (5, 2, 3, 8), ((5, 2, 1), True)),
        ((), "thd", (7, 3, 8), ((7, 1), False)),
    ],
)
def test_offset_placement(offset_shape, axes, shape, want):
    assert ka.offset_placement(offset_shape, axes, shape) == want


def test_offset_placement_refuses():
    with pytest.raises(ValueError, match="is per batch row but axes='thd' has no 'b' axis"):
        ka.offset_placement((2,), "thd", (7, 3, 8))
    with pytest.raises(ValueError, match="offset has 3 entries but x has batch 2 \\(axes='bhsd'\\)"):
        ka.offset_placement((3,), "bhsd", (2, 3, 5, 8))
