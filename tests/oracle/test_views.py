"""rope_ref.views: the exact overlap test of two strided views, and the adapters' in-place q/k refusal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_ref.views import View, check_disjoint, views_overlap


def _bytes(view: View) -> set[int]:
    """Every byte address of ``view``, enumerated (the independent answer)."""
    out = set()
    for index in itertools.product(*(range(n) for n in view.shape)):
        start = view.address + sum(i * s for i, s in zip(index, view.strides, strict=True))
        out.update(range(start, start + view.itemsize))
    return out


_views = st.builds(
    View,
    address=st.integers(1000, 1100),
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    strides=st.just(()),
    itemsize=st.sampled_from([1, 2, 4]),
).flatmap(
    lambda v: st.lists(st.integers(-24, 24), min_size=len(v.shape), max_size=len(v.shape)).map(
        lambda s: v._replace(strides=tuple(s))
    )
)


@settings(max_examples=300, deadline=None)
@given(a=_views, b=_views)
def test_overlap_matches_enumerated_addresses(a, b) -> None:
    assert views_overlap(a, b) == bool(_bytes(a) & _bytes(b))


def _np_view(x: np.ndarray) -> View:
    return View(x.__array_interface__["data"][0], x.shape, x.strides, x.itemsize)


def test_packed_head_slices_interleave_but_are_disjoint() -> None:
    buf = np.zeros((2, 5, 16 + 2 * 4, 8), dtype=np.float16)
    q, k, v = buf[:, :, :16], buf[:, :, 16:20], buf[:, :, 20:]
    assert not views_overlap(_np_view(q), _np_view(k))  # their byte ranges interleave token by token
    assert not views_overlap(_np_view(k), _np_view(v))
    assert views_overlap(_np_view(buf[:, :, :17]), _np_view(k))  # one head shared
    assert views_overlap(_np_view(q), _np_view(q))
    assert not views_overlap(_np_view(buf[..., 0::2]), _np_view(buf[..., 1::2]))  # even / odd channels
    assert views_overlap(_np_view(buf[:, :, ::-1]), _np_view(buf[:, :, 3:4]))  # negative strides
    assert not views_overlap(_np_view(buf[:, :0]), _np_view(buf))  # an empty view shares nothing


def test_check_disjoint_names_both_arguments_and_bad_views_raise() -> None:
    buf = np.zeros((3, 4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=r"in place, q and k must not share memory"):
        check_disjoint(_np_view(buf[:2]), _np_view(buf[1:]))
    check_disjoint(_np_view(buf[:1]), _np_view(buf[1:]))
    with pytest.raises(ValueError, match="one stride per axis"):
        views_overlap(View(0, (2, 2), (4,), 4), View(0, (2,), (4,), 4))
    with pytest.raises(ValueError, match="itemsize >= 1"):
        views_overlap(View(0, (2,), (4,), 0), View(0, (2,), (4,), 4))


def test_torch_apply_qk_in_place_refuses_overlapping_q_and_k() -> None:
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    import rope_ref

    cfg = rope_ref.RopeConfig(8, layout="half")
    buf = torch.randn(1, 4, 3, 8)
    before = buf.clone()
    ids = torch.arange(4)
    for q, k in ((buf, buf), (buf[:, :, :2], buf[:, :, 1:2])):
        with pytest.raises(ValueError, match="q and k must not share memory"):
            rt.apply_qk(q, k, ids, cfg, axes="bshd", inplace=True)
        assert torch.equal(buf, before)  # refused before anything was written
    q, k = rt.apply_qk(buf[:, :, :2], buf[:, :, 2:], ids, cfg, axes="bshd", inplace=True)  # disjoint: fine
    expect_q, expect_k = rt.apply_qk(before[:, :, :2], before[:, :, 2:], ids, cfg, axes="bshd")
    assert torch.equal(q, expect_q) and torch.equal(k, expect_k)


def test_an_undecided_overlap_is_an_error_never_disjoint(monkeypatch) -> None:
    import rope_ref.views as views

    a, b = View(0, (50, 50), (7, 11), 1), View(3, (50, 50), (13, 17), 1)
    monkeypatch.setattr(views, "MAX_WORK", 1)  # the solver gives up after one step
    with pytest.raises(ValueError, match="cannot decide whether the two views overlap"):
        views_overlap(a, b)


def test_touching_ranges_and_item_widths() -> None:
    # [1000, 1008) and [1008, 1016): adjacent, no shared byte; one byte more and they share one.
    assert not views_overlap(View(1000, (2,), (4,), 4), View(1008, (2,), (4,), 4))
    assert views_overlap(View(1000, (2,), (4,), 4), View(1007, (1,), (1,), 1))
    # Element 1 of a ends at byte 1015: an 8-byte item reaches a view starting at 1012 (4-byte items do not).
    assert views_overlap(View(1000, (2,), (8,), 8), View(1012, (1,), (4,), 4))
    assert not views_overlap(View(1000, (2,), (8,), 4), View(1012, (1,), (4,), 4))
    # Negative strides: element 0 is the highest address.
    assert views_overlap(View(1100, (3,), (-40,), 8), View(1020, (1,), (8,), 8))
    assert not views_overlap(View(1100, (3,), (-40,), 8), View(1010, (1,), (8,), 8))
    with pytest.raises(ValueError, match="in place, keys and queries must not share memory"):
        check_disjoint(View(0, (2,), (8,), 8), View(8, (1,), (8,), 8), names=("keys", "queries"))
