"""The oracle's rotation (rope_ref.rotation): blocking of large inputs, broadcast positions, the table
cache it shares, keyword-only options and the inverse. Expected values are derived by hand (RoFormer
eq. 34 pair by pair, mpmath) or from the same rotation of a smaller piece, never from golden files.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from equal_strings import fresh as _fresh
from mp_reference import (
    U64,
    _close,
    _rotated_by_hand,
    _tables_key_args,
    mp_default_freqs,
    mp_rotation,
    rotation_tol,
)

import rope_ref
from rope_ref import RopeConfig


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_many_rows_with_one_scalar_position(layout):
    """20000 rows span several blocks; the (1, n) table broadcasts and must not be sliced per block."""
    cfg = RopeConfig(8, layout=layout)
    freqs = mp_default_freqs(10000.0, 8)
    y = rope_ref.apply(np.ones((20000, 8)), 5, cfg)
    want = mp_rotation(5.0, freqs, 1.0, 8, layout) @ np.ones(8)
    np.testing.assert_allclose(
        y, np.broadcast_to(want, y.shape), rtol=0, atol=rotation_tol(np.ones(8), 5, freqs, 1)
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_blocked_axis_broadcast_per_batch_positions(layout):
    """x (3, 20000, 8) is blocked along axis 1 while positions (3, 1) broadcast along it."""
    cfg = RopeConfig(8, layout=layout)
    freqs = mp_default_freqs(10000.0, 8)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 20000, 8))
    pos = np.array([[2.0], [-7.0], [301.0]])
    y = rope_ref.apply(x, pos, cfg)
    for b in range(3):
        r = mp_rotation(pos[b, 0], freqs, 1.0, 8, layout)
        np.testing.assert_allclose(y[b], x[b] @ r.T, rtol=0, atol=4 * rotation_tol(x[b], pos[b, 0], freqs, 1))


def test_layout_compared_by_value_not_identity():
    """A layout string built at run time (not the interned literal) must select the same kernel."""
    from rope_ref.rotation import _TableCache, _Tables

    half = "".join(["ha", "lf"])
    pos, freqs = _tables_key_args(2, 4)
    tables = _Tables(pos, freqs, 1.0, half)
    assert tables.parts[1].dtype == np.float64 and tables.parts[0].shape == (2, 8)
    np.testing.assert_array_equal(tables.parts[1][:, 4:], -tables.parts[1][:, :4])
    assert _TableCache(1 << 20).get(pos[:1], freqs, 1.0, half).parts[1].dtype == np.float64
    cfg = RopeConfig(8, layout=half)
    x = np.random.default_rng(3).standard_normal((5, 8))
    want = rope_ref.apply(x, 7.0, RopeConfig(8, layout="half"))
    np.testing.assert_array_equal(rope_ref.apply(x, 7.0, cfg), want)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("shape", "blocks"),
    # 8 elements per row: 8192 rows per block. (3, 40000, 4): rows along axis 1 hold 12 elements, 5461 of
    # them per block (65532 elements), 7 full blocks and 1773 rows left.
    [((20000, 8), [8192, 8192, 3616]), ((3, 40000, 4), [5461] * 7 + [1773])],
)
def test_blocks_hold_at_most_2_16_elements_and_no_more_blocks_than_needed(monkeypatch, layout, shape, blocks):
    """Blocking runs over the longest leading axis in blocks of 2**16 elements (512 KiB of float64)."""
    from rope_ref import rotation

    seen = []
    name = "_rotate_half_block" if layout == "half" else "_rotate_interleaved_block"
    real = getattr(rotation, name)

    def recording(out, x, *rest):
        seen.append(x.shape)
        return real(out, x, *rest)

    monkeypatch.setattr(rotation, name, recording)
    cfg = RopeConfig(shape[-1], layout=layout)
    x = np.ones(shape)
    y = rope_ref.apply(x, 2.0, cfg)
    axis = int(np.argmax(shape[:-1]))
    assert [s[axis] for s in seen] == blocks
    assert all(math.prod(s) <= 1 << 16 for s in seen)
    np.testing.assert_array_equal(y, np.broadcast_to(y[(0,) * (len(shape) - 1)], shape))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_position_zero_is_the_identity_in_every_block_when_positions_broadcast(layout):
    """20000 rows span several blocks; the scalar position 0 broadcasts along them. Every row must come
    back bit for bit, including -0.0 (x*1 - y*0 would give +0.0) and an infinity's partner (inf*0 is NaN)."""
    cfg = RopeConfig(8, layout=layout)
    x = np.random.default_rng(31).standard_normal((20000, 8))
    x[::997, 0] = -0.0
    x[19999, 1] = -0.0
    x[15000] = [np.inf, 2.0, -3.0, 4.0, 5.0, -np.inf, 7.0, 8.0]
    for pos in (0, np.zeros(1), np.zeros(20000)):
        with np.errstate(invalid="ignore"):  # inf * 0 in the formula, before the identity copy
            y = rope_ref.apply(x, pos, cfg)
        assert np.array_equal(y, x) and np.array_equal(np.signbit(y), np.signbit(x))
    # Per-batch positions (3, 1) broadcast along a blocked axis of 20000: batch 1 is at position 0.
    xb = np.stack([x, x, x])
    with np.errstate(invalid="ignore"):
        y = rope_ref.apply(xb, np.array([[5.0], [0.0], [7.0]]), cfg)
    assert np.array_equal(y[1], x) and np.array_equal(np.signbit(y[1]), np.signbit(x))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_position_zero_is_the_identity_in_whichever_block_holds_it(layout):
    """Full-length positions along the blocked axis (1024 rows a block here) with 0 only at rows 7000 and
    19999: those rows come back bit for bit, -0.0 whose partner is negative included (there the formula
    gives -0.0 + 0.0 = +0.0); every other row is rotated as a call for that row alone rotates it."""
    cfg = RopeConfig(8, layout=layout)
    x = np.random.default_rng(37).standard_normal((1, 20000, 8, 8))
    x[..., 0], x[..., 1], x[..., 4] = -0.0, -2.0, -1.0  # channel 0's partner: 4 (half) or 1 (interleaved)
    pos = np.arange(1.0, 20001.0)
    pos[[7000, 19999]] = 0.0
    y = rope_ref.apply(x, pos[:, None], cfg)
    for row in (7000, 19999):
        assert y[0, row].tobytes() == x[0, row].tobytes()  # bytes: signed zeros count
    for row in (0, 6999, 7001, 19998):
        assert y[0, row].tobytes() == rope_ref.apply(x[0, row], pos[row], cfg).tobytes()


def test_interleaved_rotation_with_an_infinite_input_uses_the_plain_formula():
    """An infinity makes the complex kernel raise (0 * inf); the block is recomputed pair by pair with
    y_a = x_a c - x_b s, y_b = x_b c + x_a s. The finite pairs must still be rotated exactly so."""
    cfg = RopeConfig(8, layout="interleaved")
    m = 3.0
    x = np.array([[np.inf, 1.0, 2.0, -3.0, 0.5, 4.0, -1.5, 2.5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    with np.errstate(invalid="ignore"):
        y = rope_ref.apply(x, m, cfg)
    with mpmath.workdps(40):
        for row in range(2):
            for i in range(1, 4):
                ang = m * mpmath.power(10000, -mpmath.mpf(2 * i) / 8)
                c, s = mpmath.cos(ang), mpmath.sin(ang)
                a, b = x[row, 2 * i], x[row, 2 * i + 1]
                want_a, want_b = float(a * c - b * s), float(b * c + a * s)
                tol = 8 * U64 * (abs(a) + abs(b))
                assert abs(y[row, 2 * i] - want_a) <= tol and abs(y[row, 2 * i + 1] - want_b) <= tol
    # Pair 0 of row 0: inf * cos(3) - 1 * sin(3) with cos(3) < 0 is -inf; 1 * cos(3) + inf * sin(3) is +inf.
    assert y[0, 0] == -np.inf and y[0, 1] == np.inf


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inverse_rotates_by_minus_m(layout):
    cfg = RopeConfig(8, layout=layout, rotary_dim=6)
    x = np.random.default_rng(41).standard_normal((3, 8))
    pos = np.array([2.0, 17.5, 300.0])
    for flag in (True, np.bool_(True)):
        y = rope_ref.apply(x, pos, cfg, inverse=flag)
        for row in range(3):
            _close(y[row], _rotated_by_hand(x[row], -pos[row], layout, 6), pos[row])
    forward = rope_ref.apply(x, pos, cfg)
    np.testing.assert_array_equal(rope_ref.apply(x, pos, cfg, inverse=np.bool_(False)), forward)
    for bad in (1, 0, "yes", None):
        with pytest.raises(TypeError, match="inverse must be a bool"):
            rope_ref.apply(x, pos, cfg, inverse=bad)


def test_inverse_keeps_the_forward_sequence_length():
    """Dynamic NTK: the inverse of a forward pass over positions up to 1000 uses the table of length 1001."""
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    x = np.random.default_rng(42).standard_normal((2, 8))
    pos = np.array([3.0, 1000.0])
    inv = rope_ref.apply(x, pos, cfg, inverse=True)
    np.testing.assert_array_equal(inv, rope_ref.apply(x, -pos, cfg, seq_len=1001))
    assert not np.allclose(inv, rope_ref.apply(x, -pos, cfg))  # negated positions alone see length 1


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_single_vector_and_hf_ids_with_axes(layout):
    cfg = RopeConfig(8, layout=layout)
    v = np.arange(1.0, 9.0)
    _close(rope_ref.apply(v, 9.0, cfg), _rotated_by_hand(v, 9.0, layout), 9.0)
    _close(rope_ref.apply_complex(v, 9.0, cfg), _rotated_by_hand(v, 9.0, layout), 9.0)
    # x (B=2, H=3, S=4, D=8) with HF (B, S) ids: every head of (b, s) rotates by ids[b, s].
    x = np.random.default_rng(43).standard_normal((2, 3, 4, 8))
    ids = np.array([[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 40.0, 7.0]])
    y = rope_ref.apply(x, ids, cfg, axes="bhsd")
    yc = rope_ref.apply_complex(x, ids, cfg, axes="bhsd")
    for b, h, s in [(0, 0, 0), (0, 2, 3), (1, 1, 2), (1, 2, 3)]:
        want = _rotated_by_hand(x[b, h, s], ids[b, s], layout)
        _close(y[b, h, s], want, ids[b, s])
        _close(yc[b, h, s], want, ids[b, s])
    # Per-token ids (S,) broadcast over B and H; positions with fewer axes than x broadcast on the left.
    y1 = rope_ref.apply_complex(x, ids[1], cfg, axes="bhsd")
    _close(y1[0, 1, 2], _rotated_by_hand(x[0, 1, 2], 40.0, layout), 40.0)
    y2 = rope_ref.apply_complex(x, ids[1], cfg)
    _close(y2[1, 0, 3], _rotated_by_hand(x[1, 0, 3], 7.0, layout), 7.0)


def test_empty_x_and_zero_dimensional_x():
    cfg = RopeConfig(8, layout="interleaved", rotary_dim=4)
    out = rope_ref.apply(np.ones((0, 8)), np.zeros(0), cfg)
    assert out.shape == (0, 8) and out.dtype == np.float64
    with pytest.raises(ValueError, match="head_dim"):
        rope_ref.apply(np.float64(1.0), 0.0, cfg)


def test_apply_complex_options_are_keyword_only():
    cfg = RopeConfig(8, layout="half")
    x = np.ones((2, 8))
    got = rope_ref.apply_complex(x=x, positions=[1.0, 2.0], cfg=cfg, seq_len=4)
    _close(got[1], _rotated_by_hand(x[1], 2.0, "half"), 2.0)
    with pytest.raises(TypeError):
        rope_ref.apply_complex(x, [1.0, 2.0], cfg, 4)


def test_interleaved_apply_reads_reversed_and_broadcast_channel_views():
    """Interleaved pairs are viewed as complex numbers, which needs a unit channel stride: a view with a
    negative or zero channel stride is copied first (its values, not its memory layout, count)."""
    import rope_ref

    cfg = RopeConfig(8, layout="interleaved")
    x = np.random.default_rng(9).standard_normal((3, 8))
    ids = np.array([0.0, 1.0, 70.0])
    for view in (x[:, ::-1], np.broadcast_to(x[:1, :1], (3, 8))):
        assert view.strides[-1] != view.itemsize
        want = rope_ref.apply(np.ascontiguousarray(view), ids, cfg)
        np.testing.assert_array_equal(rope_ref.apply(view, ids, cfg), want)


def test_rows_longer_than_a_block_are_blocked_one_row_each(monkeypatch):
    """A row of 3 * 32768 elements is past the 2**16-element block: each block holds exactly one row."""
    from rope_ref import rotation

    seen = []
    real = rotation._rotate_half_block

    def recording(out, x, *rest):
        seen.append(x.shape)
        return real(out, x, *rest)

    monkeypatch.setattr(rotation, "_rotate_half_block", recording)
    x = np.ones((4, 3, 32768))
    rope_ref.apply(x, np.arange(4.0)[:, None], RopeConfig(32768, layout="half"))
    assert seen == [(1, 3, 32768)] * 4


def test_oracle_options_compare_strings_by_value():
    x = np.random.default_rng(2).standard_normal((3, 8))
    ids = np.array([0.0, 1.0, 9.0])
    # the interleaved layout of a reversed channel view (copied before the complex view)
    got = rope_ref.apply(x[:, ::-1], ids, RopeConfig(8, layout=_fresh("interleaved")))
    np.testing.assert_array_equal(got, rope_ref.apply(x[:, ::-1], ids, RopeConfig(8, layout="interleaved")))
    # ChatGLM-6B 2D: the float64 oracle, not the fp16 emulation
    from rope_ref.chatglm import apply_2d

    np.testing.assert_array_equal(
        apply_2d(x, ids, ids, precision=_fresh("float64")), apply_2d(x, ids, ids, precision="float64")
    )


def test_layout_names_are_compared_by_value():
    from rope_ref import RopeConfig
    from rope_ref.rotation import pair_indices

    a, b = pair_indices(RopeConfig(8, layout=_fresh("half")))
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    np.testing.assert_array_equal(b, [4, 5, 6, 7])


def test_rows_longer_than_a_block_are_rotated_one_at_a_time():
    """A row of 9 * 8192 elements exceeds the 2**16-element block: one row per block, same bits as
    rotating each row alone (where no blocking happens)."""
    import rope_ref
    from rope_ref import RopeConfig

    cfg = RopeConfig(8192, layout="interleaved")
    x = np.linspace(-1.0, 1.0, 3 * 3 * 3 * 8192).reshape(3, 3, 3, 8192)
    pos = np.array([1.0, 700.0, 70000.0]).reshape(3, 1, 1)
    out = rope_ref.apply(x, pos, cfg)
    for i in range(3):
        np.testing.assert_array_equal(out[i], rope_ref.apply(x[i], pos[i], cfg))
