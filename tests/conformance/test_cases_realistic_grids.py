"""The multi-axis families on realistic grids (``multiaxis_realistic_cases`` in
conformance/cases/multiaxis.py): Pixtral's rotation on a 12 x 16 patch grid, GLM-4V and Qwen3-VL video ids,
M-RoPE streams that differ by up to 19. Ids are derived by hand from the released ``get_rope_index``
rules; rotations from the per-pair formulas of the models' code (explicit loops, float64).
"""

from __future__ import annotations

import broken_backends as bb
import numpy as np
import pytest
from rope_ref.conformance import catalogue
from rope_ref.conformance.runner import Runner

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DTYPES = {"float64", "float32", "float16", "bfloat16"}


def _rotate_pairs(x: np.ndarray, angles: np.ndarray, layout: str) -> np.ndarray:
    """Rotate pair i of every row of ``x`` (tokens, heads, d) by ``angles[token, i]``: channels (i, i + d/2)
    in the half layout, (2i, 2i + 1) interleaved."""
    out = np.array(x, dtype=np.float64, copy=True)
    n = angles.shape[1]
    for i in range(n):
        a, b = (i, i + x.shape[-1] // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = np.cos(angles[:, i])[:, None], np.sin(angles[:, i])[:, None]
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out


@pytest.mark.parametrize(
    ("family", "op"),
    [
        ("vision_rotation", "multiaxis_apply"),
        ("mrope_spatial_extent", "multiaxis_apply"),
        ("mrope_video_ids", "mrope_position_ids"),
    ],
)
def test_family_is_shipped_with_its_dtypes(cases, family, op):
    mine = [c for c in cases if c.bug_class == family]
    assert mine and family in catalogue.BUG_CLASSES and {c.op for c in mine} == {op}
    if op == "multiaxis_apply":
        assert {c.io_dtype for c in mine} == DTYPES and {c.tolerance for c in mine} == {"rotation"}
    else:
        assert {c.io_dtype for c in mine} == {None} and {c.tolerance for c in mine} == {"exact"}


def test_pixtral_rotation_by_hand(by_id):
    case = by_id["multiaxis_apply-pixtral_grid12x16_d64-fp64"]
    rows, cols = case.inputs["positions"][0, :, 0], case.inputs["positions"][1, :, 0]
    # A non-square grid: 4 distinct rows up to 11, 4 distinct columns up to 15.
    assert sorted(set(rows.tolist())) == [0, 4, 7, 11] and sorted(set(cols.tolist())) == [0, 5, 10, 15]
    # PixtralRotaryEmbedding: f_k = 10000^(-2k/64); rows take f_0, f_2, .. on pairs 0..15, columns
    # f_1, f_3, .. on pairs 16..31; rotate_half over the 64 channels.
    f = 10000.0 ** (-np.arange(0, 64, 2) / 64.0)
    angles = np.concatenate([np.outer(rows, f[0::2]), np.outer(cols, f[1::2])], axis=1)
    want = _rotate_pairs(case.inputs["x"], angles, "half")
    np.testing.assert_allclose(case.expected["out"], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("rule", "last", "n_tokens"), [("glm4v", 42, 109), ("qwen3vl", 39, 106)])
def test_video_frames_start_their_own_temporal_id(by_id, rule, last, n_tokens):
    case = by_id[f"mrope_position_ids-{rule}_video_3_frames"]
    ids = case.expected["position_ids"][:, 0]
    assert ids.shape == (3, n_tokens)
    # Both prompts put frame k (4 x 6 merged tokens) at start 11 + 10k: the image (4 x 4 tokens) and the
    # text before give ids 0..10, and each frame is followed by 4 text ids (its end marker, the timestamp
    # and the next frame's opening markers) before the next frame starts at (max so far) + 1.
    video = case.inputs["input_ids"][0] == (151343 if rule == "glm4v" else 151656)
    if rule == "glm4v":
        video[:20] = False  # GLM-4V's image uses the same token as its video frames
    frames = ids[:, video].reshape(3, 3, 24)
    for k in range(3):
        start = 11 + 10 * k
        i = np.arange(24)
        assert frames[0, k].tolist() == [start] * 24, (rule, k)  # not start + k
        assert frames[1, k].tolist() == (start + i // 6).tolist()
        assert frames[2, k].tolist() == (start + i % 6).tolist()
    assert ids[:, -1].tolist() == [last] * 3
    assert case.expected["deltas"].tolist() == [[last + 1 - n_tokens]]


# (t, h, w) of the 10 kept tokens of the 512-token chunk, before the 2000-token offset: text at 2; image 1
# (14 x 20 merged tokens) at 4: corners (0, 19), (13, 0), (13, 19); text 24..27; image 2 (6 x 8) at 28:
# (0, 7), (5, 0); text 34..38; video (3 frames of 8 x 12) at 39: frame 0 (0, 11), (7, 0), frame 1 (t 40)
# (0, 11) and its token 76 = (6, 4), where the chunk ends.
CHUNK_IDS = [
    [2, 4, 4, 4, 28, 28, 39, 39, 40, 40],
    [2, 4, 17, 17, 28, 33, 39, 46, 39, 45],
    [2, 23, 4, 23, 35, 28, 50, 39, 50, 43],
]


def _stream_of_pair(name: str) -> np.ndarray:
    if name.startswith("qwen2vl"):  # blocked sections [16, 24, 24]
        return np.repeat([0, 1, 2], [16, 24, 24])
    # Qwen3-VL apply_interleaved_mrope, sections [24, 20, 20]: pairs 1, 4, .. < 60 take h, 2, 5, .. take w.
    i = np.arange(64)
    return np.where(i < 60, i % 3, 0)


@pytest.mark.parametrize(
    ("name", "base"), [("qwen2vl_chunk_grids_d128", 1e6), ("qwen3vl_chunk_grids_d128", 5e6)]
)
def test_wide_stream_ids_and_rotation_by_hand(by_id, name, base):
    case = by_id[f"multiaxis_apply-{name}-fp64"]
    pos = case.inputs["positions"][..., 0]
    assert pos.tolist() == (np.array(CHUNK_IDS) + 2000).tolist()
    assert max(pos[1].max(), pos[2].max()) > pos[0].max()  # spatial ids past every temporal id
    assert np.abs(pos[2] - pos[1]).max() == 19
    phi = base ** (-np.arange(0, 128, 2) / 128.0)
    angles = pos[_stream_of_pair(name)].T * phi
    want = _rotate_pairs(case.inputs["x"], angles, "half")
    np.testing.assert_allclose(case.expected["out"], want, rtol=0, atol=1e-9)


class HeightWidthSwapped(bb.Float32Backend):
    """A stream mix-up (not a shipped broken port: the earlier cases fail it too, narrowly)."""

    def _ma_spec(self, spec):
        if spec.n_streams != 3:
            return spec
        return bb._respec(spec, streams=[(0, 2, 1)[s] for s in spec.streams])


def test_stream_mix_up_fails_by_a_clear_factor_at_bf16(by_id):
    """Qwen2-VL's height and width sections hold its lowest frequencies: with the (1, 4, 4) image an h/w
    swap is within about 1x of the bf16 tolerance; with the wide grids, 10x or more."""

    def ratio(cid):
        (result,) = Runner(HeightWidthSwapped("bfloat16")).run([by_id[cid]]).results
        return max(c.ratio for c in result.comparisons)

    narrow = ratio("multiaxis_apply-qwen2vl_sections_d128-bf16")
    wide = ratio("multiaxis_apply-qwen2vl_chunk_grids_d128-bf16")
    assert wide >= 10 and wide >= 5 * narrow, (narrow, wide)
