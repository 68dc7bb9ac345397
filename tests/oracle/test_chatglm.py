"""ChatGLM-6B 2D positions and rotation (rope_ref.chatglm).

Expected ids are written by hand from the rules of the released ``modeling_chatglm.py``
(``get_position_ids``, ``prepare_inputs_for_generation``); rotations are checked against explicit
per-pair loops written here, never against rope_ref itself.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mp_reference import DPS, half_layout_loop
from strategies import seeds

import rope_ref
from rope_ref import chatglm

BOS, MASK, GMASK, PAD = 130004, 130000, 130001, 3
A, B, C, D, Y = 5, 6, 7, 8, 9  # ordinary tokens


def ids(*rows):
    return np.array(rows, dtype=np.int64)


# -- position ids: hand-written cases ------------------------------------------------------------------


def test_issue_example_gmask_2d():
    got = chatglm.position_ids(ids([A, B, C, GMASK, BOS, Y, Y]))
    assert got.dtype == np.int64
    assert got.shape == (1, 2, 7)
    assert got[0, 0].tolist() == [0, 1, 2, 3, 3, 3, 3]
    assert got[0, 1].tolist() == [0, 0, 0, 0, 1, 2, 3]


def test_mask_token_2d_and_1d():
    row = [A, MASK, B, BOS, Y, Y]
    two = chatglm.position_ids(ids(row))
    assert two[0, 0].tolist() == [0, 1, 2, 1, 1, 1]
    assert two[0, 1].tolist() == [0, 0, 0, 1, 2, 3]
    one = chatglm.position_ids(ids(row), position_encoding_2d=False)
    assert one.shape == (1, 6)
    assert one[0].tolist() == [0, 1, 2, 1, 1, 1]


def test_gmask_1d_is_not_overwritten():
    one = chatglm.position_ids(ids([A, B, GMASK, BOS, Y]), position_encoding_2d=False)
    assert one[0].tolist() == [0, 1, 2, 3, 4]


def test_batch_with_different_context_lengths_and_mask_types():
    batch = ids(
        [A, B, GMASK, BOS, Y, Y, Y],  # context 3, [gMASK] at 2
        [A, MASK, B, C, D, BOS, Y],  # context 5, [MASK] at 1
        [MASK, A, GMASK, BOS, Y, Y, Y],  # both: [gMASK] wins, at 2
        [A, B, C, D, MASK, GMASK, BOS],  # [gMASK] at 5, context 6
    )
    got = chatglm.position_ids(batch)
    assert got[:, 0].tolist() == [
        [0, 1, 2, 2, 2, 2, 2],
        [0, 1, 2, 3, 4, 1, 1],
        [0, 1, 2, 2, 2, 2, 2],
        [0, 1, 2, 3, 4, 5, 5],
    ]
    assert got[:, 1].tolist() == [
        [0, 0, 0, 1, 2, 3, 4],
        [0, 0, 0, 0, 0, 1, 2],
        [0, 0, 0, 1, 2, 3, 4],
        [0, 0, 0, 0, 0, 0, 1],
    ]
    one = chatglm.position_ids(batch, position_encoding_2d=False)
    assert one.tolist() == [
        [0, 1, 2, 3, 4, 5, 6],  # [gMASK]: plain arange
        [0, 1, 2, 3, 4, 1, 1],  # [MASK]: overwritten
        [0, 1, 2, 3, 4, 5, 6],
        [0, 1, 2, 3, 4, 5, 6],
    ]


def test_left_padded_batch_uses_absolute_indices():
    # The model's get_position_ids indexes the padded row: pads take 0, 1, ... and shift the rest.
    batch = ids(
        [A, B, C, GMASK, BOS, Y],
        [PAD, PAD, A, GMASK, BOS, Y],
        [PAD, PAD, PAD, MASK, BOS, Y],
    )
    got = chatglm.position_ids(batch)
    assert got[:, 0].tolist() == [[0, 1, 2, 3, 3, 3], [0, 1, 2, 3, 3, 3], [0, 1, 2, 3, 3, 3]]
    assert got[:, 1].tolist() == [[0, 0, 0, 0, 1, 2], [0, 0, 0, 0, 1, 2], [0, 0, 0, 0, 1, 2]]


def test_custom_token_ids_of_early_releases():
    got = chatglm.position_ids(
        ids([A, 150001, 150004, Y]), bos_token_id=150004, mask_token_id=150000, gmask_token_id=150001
    )
    assert got[0].tolist() == [[0, 1, 1, 1], [0, 0, 1, 2]]


def test_missing_bos_names_the_row():
    with pytest.raises(ValueError, match="row 1 has no bos"):
        chatglm.position_ids(ids([A, GMASK, BOS], [A, GMASK, B]))


def test_missing_mask_names_the_row():
    with pytest.raises(ValueError, match=r"row 0 has neither a \[gMASK\]"):
        chatglm.position_ids(ids([A, B, BOS], [A, GMASK, BOS]))
    with pytest.raises(ValueError, match="row 2"):
        chatglm.next_position_ids(ids([A, GMASK, BOS], [A, MASK, BOS], [A, B, BOS]))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"input_ids": np.array([A, GMASK, BOS])}, ValueError, "shape"),
        ({"input_ids": np.array([[1.0, 2.0]])}, TypeError, "integer"),
        ({"input_ids": "abc"}, TypeError, "input_ids"),
        ({"input_ids": ids([A, GMASK, BOS]), "bos_token_id": 1.5}, TypeError, "bos_token_id"),
        ({"input_ids": ids([A, GMASK, BOS]), "mask_token_id": GMASK}, ValueError, "must differ"),
        ({"input_ids": ids([A, GMASK, BOS]), "position_encoding_2d": 1}, TypeError, "position_encoding_2d"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        chatglm.position_ids(**kwargs)


# -- incremental decoding ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.lists(st.integers(10, 20), min_size=0, max_size=6),
    mask_at=st.integers(0, 6),
    use_gmask=st.booleans(),
    gap=st.integers(0, 3),
    steps=st.integers(1, 6),
    two_d=st.booleans(),
)
def test_step_by_step_decoding_matches_full_recompute(prompt, mask_at, use_gmask, gap, steps, two_d):
    mask_at = min(mask_at, len(prompt))
    row = [*prompt[:mask_at], GMASK if use_gmask else MASK, *prompt[mask_at:], *([A] * gap), BOS]
    for step in range(steps):
        row.append(20 + step)  # the newly generated token
        inc = chatglm.next_position_ids(ids(row), position_encoding_2d=two_d)
        full = chatglm.position_ids(ids(row), position_encoding_2d=two_d)
        context_length = row.index(BOS)
        if two_d:
            assert inc.shape == (1, 2, 1)
            assert inc[0, :, 0].tolist() == [mask_at, len(row) - context_length]
            assert np.array_equal(inc, full[..., -1:])
        elif not use_gmask:
            assert inc.shape == (1, 1)
            assert np.array_equal(inc, full[..., -1:])
        else:
            # Released quirk (1D + [gMASK]): incremental gives the mask position, a recompute does not.
            assert inc.tolist() == [[mask_at]]
            assert full[0, -1] == len(row) - 1


def test_next_position_ids_batch():
    batch = ids([A, B, GMASK, BOS, Y, Y], [PAD, A, MASK, BOS, Y, Y])
    got = chatglm.next_position_ids(batch)
    assert got[:, :, 0].tolist() == [[2, 3], [2, 3]]


# -- rotation: float64 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim", [8, 128])
def test_apply_2d_is_two_independent_half_rotations(head_dim):
    rng = np.random.default_rng(head_dim)
    x = rng.standard_normal((3, 5, head_dim))
    pos = rng.integers(0, 3000, size=(3, 5))
    blk = rng.integers(0, 50, size=(3, 5))
    got = chatglm.apply_2d(x, pos, blk, base=500.0)
    h = head_dim // 2
    for i in range(3):
        for t in range(5):
            want = half_layout_loop(list(x[i, t, :h]), pos[i, t], 500.0) + half_layout_loop(
                list(x[i, t, h:]), blk[i, t], 500.0
            )
            np.testing.assert_allclose(got[i, t], want, rtol=0, atol=1e-12)


def test_apply_2d_broadcasts_ids_over_heads():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 3, 16))  # (batch, seq, heads, head_dim)
    pos = np.array([[0, 1, 2, 2], [0, 1, 1, 1]])[..., None]
    blk = np.array([[0, 0, 1, 2], [0, 0, 1, 2]])[..., None]
    got = chatglm.apply_2d(x, pos, blk)
    for b in range(2):
        for t in range(4):
            for hd in range(3):
                want = half_layout_loop(list(x[b, t, hd, :8]), pos[b, t, 0]) + half_layout_loop(
                    list(x[b, t, hd, 8:]), blk[b, t, 0]
                )
                np.testing.assert_allclose(got[b, t, hd], want, atol=1e-12)


def test_block_ids_zero_leave_second_half_unchanged():
    x = np.random.default_rng(2).standard_normal((4, 64))
    got = chatglm.apply_2d(x, np.arange(4), np.zeros(4, dtype=int))
    assert np.array_equal(got[:, 32:], x[:, 32:])
    assert not np.allclose(got[1:, :32], x[1:, :32])


# first-half positions and block ids of the two tokens, and the shift both get
_POSITIONS, _SHIFTS = st.integers(0, 4000), st.integers(-1000, 1000)
_BLOCKS, _BLOCK_SHIFTS = st.integers(0, 500), st.integers(-100, 100)


@settings(max_examples=50, deadline=None)
@given(m=_POSITIONS, n=_POSITIONS, bm=_BLOCKS, bn=_BLOCKS, shift=_SHIFTS, bshift=_BLOCK_SHIFTS, seed=seeds)
def test_relative_property_holds_within_each_half(m, n, bm, bn, shift, bshift, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 32))
    rq = chatglm.apply_2d(q, m, bm)
    rk = chatglm.apply_2d(k, n, bn)
    rq2 = chatglm.apply_2d(q, m + shift, bm + bshift)
    rk2 = chatglm.apply_2d(k, n + shift, bn + bshift)
    for sl in (slice(0, 16), slice(16, 32)):
        assert math.isclose(rq[sl] @ rk[sl], rq2[sl] @ rk2[sl], rel_tol=1e-9, abs_tol=1e-9)
    # Each half's score depends on its own offset only: first half on m - n, second on bm - bn.
    first = np.dot(half_layout_loop(list(q[:16]), m - n), k[:16])
    second = np.dot(half_layout_loop(list(q[16:]), bm - bn), k[16:])
    assert math.isclose(rq[:16] @ rk[:16], first, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(rq[16:] @ rk[16:], second, rel_tol=1e-9, abs_tol=1e-9)


def test_left_padding_convention_does_not_change_attention_scores():
    # The model's absolute ids vs the tokenizer's (ids of the unpadded row, padded with zeros): the
    # first-half positions of real tokens differ by the pad count, block ids agree -> same q.k.
    padded = ids([PAD, PAD, A, GMASK, BOS, Y, Y])
    model_ids = chatglm.position_ids(padded)[0]
    tok_ids = np.pad(chatglm.position_ids(ids([A, GMASK, BOS, Y, Y]))[0], [(0, 0), (2, 0)])
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 7, 64))
    s_model = chatglm.apply_2d(q, *model_ids) @ chatglm.apply_2d(k, *model_ids).T
    s_tok = chatglm.apply_2d(q, *tok_ids) @ chatglm.apply_2d(k, *tok_ids).T
    np.testing.assert_allclose(s_model[2:, 2:], s_tok[2:, 2:], rtol=1e-10, atol=1e-10)


def test_apply_2d_argument_errors():
    x = np.zeros((2, 8))
    with pytest.raises(ValueError, match="multiple of 4"):
        chatglm.apply_2d(np.zeros((2, 6)), 0, 0)
    with pytest.raises(ValueError, match="precision"):
        chatglm.apply_2d(x, 0, 0, precision="fp16")
    with pytest.raises(ValueError, match="block_position_ids"):
        chatglm.apply_2d(x, [0, 1], [0, 1, 2])
    with pytest.raises(TypeError, match="x"):
        chatglm.apply_2d(np.zeros((2, 8), dtype=int), 0, 0)
    with pytest.raises(ValueError, match="base"):
        chatglm.apply_2d(x, 0, 0, base=1.0)
    with pytest.raises(ValueError, match="non-negative integers"):
        chatglm.apply_2d(x, [0, 1.5], 0, precision="chatglm-6b-fp16")
    with pytest.raises(ValueError, match="block_position_ids"):
        chatglm.apply_2d(x, 0, [0, -1], precision="chatglm-6b-fp16")


# -- rotation: the released model's fp16 arithmetic ----------------------------------------------------


def test_fp16_table_hand_computed_entries():
    cos16, sin16 = chatglm.fp16_cos_sin(np.array([1000, 2047]), 64)
    assert cos16.dtype == np.float16 and cos16.shape == (2, 64)
    # Pair 1 at position 1000: inv_freq = 10000**(-1/32) = 0.749894 rounds to 0.75 in fp16, so the angle
    # is 750 exactly (true angle 749.894...): the table holds cos(750) and sin(750), rounded to fp16.
    assert cos16[0, 1] == np.float16(math.cos(750.0)) and sin16[0, 1] == np.float16(math.sin(750.0))
    assert cos16[0, 33] == cos16[0, 1]  # emb = cat(freqs, freqs)
    # Pair 0 (inv_freq 1) at 2047: fp16 holds 2047 exactly.
    assert cos16[1, 0] == np.float16(math.cos(2047.0)) and sin16[1, 0] == np.float16(math.sin(2047.0))
    # Position 2049 is not representable in fp16 (spacing 2 above 2048): it becomes 2048.
    c_hi, _ = chatglm.fp16_cos_sin(np.array(2049), 64)
    assert c_hi[0] == np.float16(math.cos(2048.0))


def _released_table_torch(torch, n_positions, dim=64, base=10000):
    """The released RotaryEmbedding(precision=torch.half) arithmetic, rewritten in torch for this test."""
    inv = (1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))).half()
    t = torch.arange(n_positions, dtype=torch.float16)
    angle = torch.outer(t, inv)  # fp16 product
    emb = torch.cat((angle, angle), dim=-1)
    return emb.cos(), emb.sin()


def _released_inv16(torch, dim=64, base=10000):
    return (1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))).half()


def _float32_ulps_from_fp16_midpoint(v: np.ndarray) -> np.ndarray:
    """Distance of each float64 value from the nearest float16 rounding midpoint, in float32 ulps."""
    h = v.astype(np.float16)
    lo = np.where(h.astype(np.float64) <= v, h, np.nextafter(h, np.float16(-np.inf)))
    mid = (lo.astype(np.float64) + np.nextafter(lo, np.float16(np.inf)).astype(np.float64)) / 2
    return np.abs(v - mid) / np.spacing(np.abs(v).astype(np.float32)).astype(np.float64)


def test_fp16_matches_a_torch_rewrite_of_the_released_arithmetic():
    torch = pytest.importorskip("torch")
    cos_t, sin_t = _released_table_torch(torch, 2048)
    cos16, sin16 = chatglm.fp16_cos_sin(np.arange(2048), 64)
    emb = torch.cat([torch.outer(torch.arange(2048, dtype=torch.float16), _released_inv16(torch))] * 2, -1)
    emb = emb.double().numpy()
    for ours, theirs, exact in ((cos16, cos_t.numpy(), np.cos(emb)), (sin16, sin_t.numpy(), np.sin(emb))):
        # Why entries may differ: ours rounds the correctly rounded float32 value to fp16; PyTorch's half
        # kernel rounds its own float32 result, which can be off by a fraction of a float32 ulp. That can
        # change the fp16 rounding only where the exact value lies within one float32 ulp of an fp16
        # rounding midpoint. Everywhere else the two must agree bit for bit; there, by one fp16 ulp.
        near = _float32_ulps_from_fp16_midpoint(exact) < 1.0
        assert np.array_equal(ours[~near], theirs[~near])
        ulp = np.spacing(np.abs(theirs[near]).astype(np.float16)).astype(np.float64)
        assert np.all(np.abs(ours[near].astype(np.float64) - theirs[near]) <= ulp)
        assert near.sum() < 0.001 * near.size  # the exemption stays tiny (measured: 26 cos, 74 sin)
    # With the same table, the rotation arithmetic is bit for bit the released one.
    rng = np.random.default_rng(4)
    x16 = rng.standard_normal((256, 2, 128)).astype(np.float16)
    pos = rng.integers(0, 2048, (256, 2))
    blk = rng.integers(0, 2048, (256, 2))
    got = chatglm.apply_2d(x16.astype(np.float64), pos, blk, precision="chatglm-6b-fp16")
    table_cos, table_sin = torch.from_numpy(cos16), torch.from_numpy(sin16)

    def rotate(q, pid):
        c = table_cos[torch.from_numpy(pid)]
        s = table_sin[torch.from_numpy(pid)]
        rot = torch.cat((-q[..., 32:], q[..., :32]), dim=-1)
        return q * c + rot * s

    q = torch.from_numpy(x16)
    want = torch.cat((rotate(q[..., :64], pos), rotate(q[..., 64:], blk)), dim=-1).double().numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize(
    ("position", "min_err", "max_err"),
    # Measured max |cos/sin(fp16) - cos/sin(float64)| over the 64 channels (docs/chatglm.md):
    # 0.0152 at 100, 0.158 at 1000, 0.317 at 2047.
    [(100, 0.005, 0.02), (1000, 0.1, 0.2), (2047, 0.2, 0.4)],
)
def test_fp16_departure_from_the_float64_oracle(position, min_err, max_err):
    cos16, sin16 = chatglm.fp16_cos_sin(np.array(position), 64)
    j = np.arange(32)
    theta = position * 10000.0 ** (-2.0 * j / 64)  # float64 angles, written out here
    want_c, want_s = np.tile(np.cos(theta), 2), np.tile(np.sin(theta), 2)
    err = max(np.abs(cos16 - want_c).max(), np.abs(sin16 - want_s).max())
    assert min_err < err < max_err
    # Independent bound: angle error <= half an fp16 ulp of the angle + position * |inv16 - inv|
    # (+ half an fp16 ulp of the result), and |d cos|, |d sin| <= |d theta|.
    inv = 10000.0 ** (-2.0 * j / 64)
    inv16 = inv.astype(np.float16).astype(np.float64)
    bound = np.spacing(np.float16(position * inv16)).astype(np.float64) / 2 + position * np.abs(inv16 - inv)
    bound = np.tile(bound, 2) + 2.0**-11 + 1e-7
    assert np.all(np.abs(cos16 - want_c) <= bound) and np.all(np.abs(sin16 - want_s) <= bound)
    # The rotation inherits it: relative error of a rotated fp16 vector.
    x = np.random.default_rng(position).standard_normal((200, 128)).astype(np.float16).astype(np.float64)
    fp16 = chatglm.apply_2d(x, position, position, precision="chatglm-6b-fp16")
    exact = chatglm.apply_2d(x, position, position)
    rel = np.linalg.norm(fp16 - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert rel.max() < 2 * max_err


def test_fp16_results_are_float16_values_in_float64():
    x = np.random.default_rng(5).standard_normal((10, 64))
    got = chatglm.apply_2d(x, np.arange(10), np.arange(10), precision="chatglm-6b-fp16")
    assert got.dtype == np.float64
    assert np.array_equal(got.astype(np.float16).astype(np.float64), got)


def test_module_is_an_attribute_of_the_package():
    assert rope_ref.chatglm is chatglm


@pytest.mark.parametrize("precision", chatglm.PRECISIONS)
@pytest.mark.parametrize("base", [1.0, 0.5, -3.0])
def test_base_must_exceed_one_on_both_paths(precision, base):
    """The ChatGLM entry points check the base themselves (the fp16 path builds no RopeConfig)."""
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        chatglm.apply_2d(np.ones((2, 8)), 0, 0, base=base, precision=precision)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        chatglm.fp16_cos_sin(np.arange(3), 8, base)


@pytest.mark.parametrize("precision", chatglm.PRECISIONS)
@pytest.mark.parametrize("head_dim", [0, 2, 6, 10])
def test_head_dim_must_be_a_multiple_of_four_on_both_paths(precision, head_dim):
    with pytest.raises(ValueError, match="positive multiple of 4"):
        chatglm.apply_2d(np.ones((2, head_dim)), 0, 0, precision=precision)


@pytest.mark.parametrize(
    ("positions", "shown"),
    [([0, 5, -3], "-3.0"), ([0, 2.5, -1], "2.5"), ([[4, 0], [1, -2]], "-2.0"), ([0.0, 1.0, 0.25], "0.25")],
)
def test_fp16_table_names_the_first_bad_position(positions, shown):
    """Position 0 is valid (it indexes the first table row); the message shows the first invalid one."""
    with pytest.raises(ValueError, match=rf"non-negative integers .*got {shown}$"):
        chatglm.fp16_cos_sin(positions, 8)
    with pytest.raises(ValueError, match=rf"got {shown}$"):
        chatglm.apply_2d(np.ones((*np.shape(positions), 8)), positions, 0, precision="chatglm-6b-fp16")


def test_fp16_table_accepts_up_to_the_largest_float16_and_widths_from_two():
    cos, sin = chatglm.fp16_cos_sin([0, 65504], 8)
    assert cos.shape == (2, 8) and np.all(np.isfinite(cos.astype(np.float64)))
    with pytest.raises(ValueError, match="must be <= 65504 .*got 65505.0$"):
        chatglm.fp16_cos_sin([0, 65505], 8)
    # rotary_dim 2: one pair, inv_freq 1, so the entries are cos(3) and sin(3) rounded to float16.
    cos, sin = chatglm.fp16_cos_sin([3], 2)
    assert cos.tolist() == [[float(np.float16(math.cos(3.0)))] * 2]
    assert sin.tolist() == [[float(np.float16(math.sin(3.0)))] * 2]
    with pytest.raises(ValueError, match="rotary_dim must be >= 2, got 1"):
        chatglm.fp16_cos_sin([3], 1)


def test_chatglm_first_occurrence_of_each_special_token_wins():
    """``seq.index(bos)`` and ``seq.index(mask_token)`` take the first occurrence (released model)."""
    rows = np.array(
        [
            [5, 6, GMASK, 7, GMASK, BOS, 8, BOS, 9],  # [gMASK] at 2 and 4, <sop> at 5 and 7
            [MASK, 5, MASK, BOS, 6, BOS, 7, 8, 9],  # no [gMASK]: [MASK] at 0 and 2, <sop> at 3 and 5
        ]
    )
    got = chatglm.position_ids(rows)
    want = np.array(
        [
            [[0, 1, 2, 3, 4, 2, 2, 2, 2], [0, 0, 0, 0, 0, 1, 2, 3, 4]],
            [[0, 1, 2, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 2, 3, 4, 5, 6]],
        ]
    )
    np.testing.assert_array_equal(got, want)
    one_d = chatglm.position_ids(rows, position_encoding_2d=False)
    np.testing.assert_array_equal(one_d, [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(chatglm.next_position_ids(rows), [[[2], [4]], [[0], [6]]])
    np.testing.assert_array_equal(chatglm.next_position_ids(rows, position_encoding_2d=False), [[2], [0]])


def _fp16_midpoint_margin(v: float) -> float:
    """Distance of ``v`` from the nearest float16 rounding midpoint, in float32 ulps of ``v``."""
    h = np.float16(v)
    lo = h if float(h) <= v else np.nextafter(h, np.float16(-np.inf))
    hi = np.nextafter(lo, np.float16(np.inf))
    mid = (float(lo) + float(hi)) / 2
    return abs(v - mid) / float(np.spacing(np.float32(abs(v))))


def released_fp16_table(
    positions: np.ndarray, dim: int, base: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The released ``RotaryEmbedding(precision=half)`` table, derived with mpmath.

    Returns ``(cos, sin, uncertain)``: ``uncertain`` marks entries whose exact value lies within 2 float32
    ulps of a float16 midpoint, where a float32 libm that is not correctly rounded may round the other
    way (one float16 ulp). The float16 inverse frequencies are checked to be far from such midpoints.
    """
    n = dim // 2
    inv16 = []
    with mpmath.workdps(DPS):
        for i in range(n):
            exact = float(mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / dim))
            assert _fp16_midpoint_margin(exact) > 4, "choose a base whose fp16 inv_freq is unambiguous"
            inv16.append(np.float16(np.float32(exact)))
    cos = np.empty(positions.shape + (dim,), dtype=np.float16)
    sin = np.empty_like(cos)
    uncertain = np.zeros(cos.shape, dtype=bool)
    for idx in np.ndindex(positions.shape):
        t16 = np.float16(positions[idx])
        for i in range(n):
            ang = np.float16(float(t16) * float(inv16[i]))  # exact product, rounded once to fp16
            with mpmath.workdps(DPS):
                c, s = float(mpmath.cos(float(ang))), float(mpmath.sin(float(ang)))
            for j in (i, i + n):
                cos[idx + (j,)] = np.float16(np.float32(c))
                sin[idx + (j,)] = np.float16(np.float32(s))
                uncertain[idx + (j,)] = min(_fp16_midpoint_margin(c), _fp16_midpoint_margin(s)) < 2
    return cos, sin, uncertain


def _fp16_ulp(v: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(v).astype(np.float16)).astype(np.float64)


@pytest.mark.parametrize("base", [500.0, 123456.0])
def test_chatglm_fp16_table_and_rotation_use_the_given_base(base):
    """``apply_2d(..., base=b, precision="chatglm-6b-fp16")`` must build its table with ``b``."""
    positions = np.array([0, 1, 3, 17, 250, 1999])
    cos, sin, uncertain = released_fp16_table(positions, 16, base)
    got_c, got_s = chatglm.fp16_cos_sin(positions, 16, base)
    for got, want in ((got_c, cos), (got_s, sin)):
        assert got.dtype == np.float16
        assert np.array_equal(got[~uncertain], want[~uncertain])
        assert np.all(np.abs(got.astype(np.float64) - want) <= _fp16_ulp(want))
    # The rotation: x (6 rows, head_dim 32); first half by position_ids, second by block ids.
    x = np.random.default_rng(13).standard_normal((6, 32)).astype(np.float16).astype(np.float64)
    blk = positions[::-1].copy()
    got = chatglm.apply_2d(x, positions, blk, base=base, precision="chatglm-6b-fp16")
    blk_c, blk_s, _ = released_fp16_table(blk, 16, base)
    want = np.empty_like(x)
    for part, c, s in ((slice(0, 16), cos, sin), (slice(16, 32), blk_c, blk_s)):
        q = x[:, part]
        rot = np.concatenate([-q[:, 8:], q[:, :8]], axis=-1)
        want[:, part] = q * c.astype(np.float64) + rot * s.astype(np.float64)
    radius = np.abs(x).max()
    # Three fp16 roundings of size <= |x|, plus one fp16 ulp of a table entry: a few fp16 ulps of |x|.
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-10 * radius)


def test_chatglm_apply_2d_options_are_keyword_only_and_scalars_are_refused():
    from rope_ref.chatglm import apply_2d

    x = np.ones((3, 8))
    ids = np.arange(3)
    assert apply_2d(x, ids, ids, base=500.0).shape == (3, 8)
    with pytest.raises(TypeError):
        apply_2d(x, ids, ids, 500.0)
    with pytest.raises(ValueError, match=r"head_dim\) must be a positive multiple of 4"):
        apply_2d(np.float64(1.0), 0, 0)


def test_chatglm_validation_edges():
    from rope_ref.chatglm import apply_2d, fp16_cos_sin, next_position_ids

    ids = np.array([[5, 6, 130001, 130004, 7]])
    with pytest.raises(TypeError):
        next_position_ids(ids, 130004)  # the token ids are keyword-only
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\)"):
        next_position_ids(ids[None])
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        fp16_cos_sin(np.arange(3), rotary_dim=7)
    cos, sin = fp16_cos_sin(np.arange(3))
    assert cos.shape == sin.shape == (3, 64)  # the released model's rotary width is the default
    # any base above 1 is a valid RoPE base, here 1.5: the table is finite, and cos^2 + sin^2 is 1
    cos, sin = fp16_cos_sin(np.arange(3), rotary_dim=8, base=1.5)
    np.testing.assert_allclose(cos.astype(np.float64) ** 2 + sin.astype(np.float64) ** 2, 1.0, atol=4e-3)
    assert apply_2d(np.ones((2, 8)), [0, 1], [0, 0], base=1.5).shape == (2, 8)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        apply_2d(np.ones((2, 8)), [0, 1], [0, 0], base=1.0)
