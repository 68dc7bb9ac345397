"""2D vision RoPE (rope_ref.vision_rope): Qwen2-VL's ViT and Pixtral.

Expected values restate the released code in plain loops: ``rot_pos_emb`` (merge-window order, table
``[h * inv, w * inv]`` doubled, ``rotate_half``) and ``PixtralRotaryEmbedding`` (``[h * f[::2], w * f[1::2]]``
doubled, ``rotate_half``; Mistral's complex form on adjacent pairs).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_ref import multiaxis, vision_rope


def ref_merge_window_ids(grids, m):
    rows, cols = [], []
    for t, h, w in grids:
        for _ in range(t):
            for bh in range(h // m):
                for bw in range(w // m):
                    for ih in range(m):
                        for iw in range(m):
                            rows.append(bh * m + ih)
                            cols.append(bw * m + iw)
    return [rows, cols]


def test_qwen2_vl_ids_hand_example():
    # grid (1, 4, 4), merge 2: four 2x2 windows, each listed row-major.
    got = vision_rope.qwen2_vl_ids([[1, 4, 4]], 2)
    assert got.tolist() == [
        [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3],
        [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3],
    ]


@pytest.mark.parametrize("m", [1, 2, 3])
def test_qwen2_vl_ids_match_the_loops(m):
    grids = [(2, 2 * m, 3 * m), (1, m, m), (3, 3 * m, m)]
    assert vision_rope.qwen2_vl_ids(np.array(grids), m).tolist() == ref_merge_window_ids(grids, m)


def test_pixtral_ids_are_row_major_per_image():
    assert vision_rope.pixtral_ids([[2, 3], [1, 2]]).tolist() == [
        [0, 0, 0, 1, 1, 1, 0, 0],
        [0, 1, 2, 0, 1, 2, 0, 1],
    ]


def rotate_half_ref(x, angles):
    """HF: emb = cat(angles, angles); y = x * cos(emb) + rotate_half(x) * sin(emb)."""
    n = len(x)
    emb = list(angles) + list(angles)
    out = []
    for c in range(n):
        rot = -x[c + n // 2] if c < n // 2 else x[c - n // 2]
        out.append(x[c] * math.cos(emb[c]) + rot * math.sin(emb[c]))
    return out


def complex_ref(x, angles):
    """Mistral: adjacent pairs as complex numbers times exp(i * angle)."""
    out = []
    for j, a in enumerate(angles):
        z = complex(x[2 * j], x[2 * j + 1]) * complex(math.cos(a), math.sin(a))
        out += [z.real, z.imag]
    return out


@pytest.mark.parametrize("head_dim", [80, 72, 16])
def test_qwen2_vl_rotation_matches_rot_pos_emb(head_dim):
    spec = vision_rope.qwen2_vl(head_dim)
    ids = vision_rope.qwen2_vl_ids([[1, 4, 6]], 2)
    x = np.random.default_rng(head_dim).standard_normal((ids.shape[1], head_dim))
    got = multiaxis.apply(x, ids, spec)
    dim = head_dim // 2
    inv = [1.0 / 10000.0 ** (k / dim) for k in range(0, dim, 2)]
    for n in range(ids.shape[1]):
        h, w = ids[:, n]
        angles = [h * f for f in inv] + [w * f for f in inv]
        np.testing.assert_allclose(got[n], rotate_half_ref(list(x[n]), angles), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_pixtral_rotation_matches_both_released_forms(layout):
    spec = vision_rope.pixtral(64, layout=layout)
    ids = vision_rope.pixtral_ids([[5, 7]])
    x = np.random.default_rng(1).standard_normal((ids.shape[1], 64))
    got = multiaxis.apply(x, ids, spec)
    freqs = [1.0 / 10000.0 ** (k / 64) for k in range(0, 64, 2)]
    for n in range(ids.shape[1]):
        h, w = ids[:, n]
        angles = [h * f for f in freqs[::2]] + [w * f for f in freqs[1::2]]
        ref = rotate_half_ref if layout == "half" else complex_ref
        np.testing.assert_allclose(got[n], ref(list(x[n]), angles), rtol=1e-12, atol=1e-12)


def test_the_two_conventions_differ():
    x = np.random.default_rng(2).standard_normal(64)
    pos = [3, 5]
    a = multiaxis.apply(x, pos, vision_rope.qwen2_vl(64))
    b = multiaxis.apply(x, pos, vision_rope.pixtral(64))
    assert np.abs(a - b).max() > 0.1


@settings(deadline=None)
@given(
    name=st.sampled_from(vision_rope.preset_names()),
    seed=st.integers(0, 2**16),
    rq=st.integers(0, 100),
    cq=st.integers(0, 100),
    rk=st.integers(0, 100),
    ck=st.integers(0, 100),
    dr=st.integers(-100, 100),
    dc=st.integers(-100, 100),
)
def test_relative_property_in_both_axes(name, seed, rq, cq, rk, ck, dr, dc):
    spec = vision_rope.preset(name)
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, spec.head_dim))
    a, b = spec.pair_indices()

    def axis_dots(pq, pk):
        yq = multiaxis.apply(q, pq, spec)
        yk = multiaxis.apply(k, pk, spec)
        return [
            math.fsum(
                yq[c] * yk[c] for i in range(spec.n_pairs) if spec.streams[i] == s for c in (a[i], b[i])
            )
            for s in (0, 1)
        ]

    base = axis_dots([rq, cq], [rk, ck])
    moved = axis_dots([rq + dr, cq + dc], [rk + dr, ck + dc])
    rel = axis_dots([rq - rk, cq - ck], [0, 0])
    scale = math.fsum(abs(v) for v in q * k) + 1.0
    for s in (0, 1):
        assert abs(base[s] - moved[s]) <= 1e-10 * scale
        assert abs(base[s] - rel[s]) <= 1e-10 * scale


@pytest.mark.parametrize(
    ("grid", "merge", "error", "match"),
    [
        ([[1, 3, 4]], 2, ValueError, "grid_thw\\[0\\] = \\(1, 3, 4\\).*divisible by spatial_merge_size=2"),
        ([[1, 4, 6], [2, 4, 3]], 2, ValueError, "grid_thw\\[1\\] = \\(2, 4, 3\\).*divisible"),
        ([[1, 6, 4]], 3, ValueError, "divisible by spatial_merge_size=3"),
        ([[0, 4, 4]], 2, ValueError, "grid_thw\\[0\\] = \\(0, 4, 4\\) must be positive"),
        ([[1, 4, -2]], 2, ValueError, "must be positive"),
        ([[1.0, 4.0, 4.0]], 2, TypeError, "grid_thw must be an integer array"),
        ([[1, 4]], 2, ValueError, "grid_thw must have shape \\(n, 3\\)"),
        ([[1, 4, 4]], 0, ValueError, "spatial_merge_size"),
    ],
)
def test_qwen2_vl_ids_refuse_bad_grids(grid, merge, error, match):
    with pytest.raises(error, match=match):
        vision_rope.qwen2_vl_ids(np.asarray(grid), merge)


@pytest.mark.parametrize(
    ("grids", "error", "match"),
    [
        ([[3, 0]], ValueError, "patch_grids\\[0\\] = \\(3, 0\\) must be positive"),
        ([[2.0, 3.0]], TypeError, "patch_grids must be an integer array"),
        ([[2, 3, 1]], ValueError, "patch_grids must have shape \\(n, 2\\)"),
    ],
)
def test_pixtral_ids_refuse_bad_grids(grids, error, match):
    with pytest.raises(error, match=match):
        vision_rope.pixtral_ids(np.asarray(grids))


def test_bad_inputs():
    with pytest.raises(ValueError, match="divisible by spatial_merge_size"):
        vision_rope.qwen2_vl_ids([[1, 3, 4]], 2)
    with pytest.raises(ValueError, match="grid_thw must have shape"):
        vision_rope.qwen2_vl_ids([1, 4, 4])
    with pytest.raises(ValueError, match="positive"):
        vision_rope.pixtral_ids([[0, 3]])
    with pytest.raises(ValueError, match="multiple of 4"):
        vision_rope.qwen2_vl(70)
    with pytest.raises(ValueError, match="unknown vision RoPE preset"):
        vision_rope.preset("clip")
