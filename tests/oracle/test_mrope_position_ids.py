"""M-RoPE position ids (``rope_ref.mrope.position_ids``) on prompts like the processors write them.

Several images and a video in one prompt, non-square grids (merged ``h != w``), merge sizes other than 2,
``tokens_per_second`` other than ``temporal_patch_size`` (2), left-padded batches whose grid rows are
consumed across rows, and custom token ids. Expected ids come from ``mrope_reference.get_rope_index`` (the
released loops restated) and, for the small cases, from ids written out by hand here.
"""

import numpy as np
import pytest
from mrope_reference import (
    GLM_BOI,
    GLM_EOI,
    GLM_IMAGE,
    GLM_VIDEO_END,
    GLM_VIDEO_START,
    QWEN_IMAGE,
    QWEN_VIDEO,
    QWEN_VISION_END,
    QWEN_VISION_START,
    get_rope_index,
)

from rope_ref import mrope

T, PAD, TS = 9, 0, 77  # a text token, padding, a timestamp text token


def run(kind, grid, merge, tok=None):
    """``<vision_start> tok * t(h/m)(w/m) <vision_end>`` (Qwen processors)."""
    t, h, w = grid
    tok = tok or (QWEN_IMAGE if kind == "image" else QWEN_VIDEO)
    return [QWEN_VISION_START] + [tok] * (t * (h // merge) * (w // merge)) + [QWEN_VISION_END]


def qwen3_video(grid, merge):
    """Qwen3-VL's processor: one ``<vision_start>`` run per temporal patch, a timestamp before each."""
    t, h, w = grid
    out = []
    for _ in range(t):
        out += [TS] + run("video", (1, h, w), merge)
    return out


def left_pad(rows):
    seq = max(len(r) for r in rows)
    padded = np.array([[PAD] * (seq - len(r)) + r for r in rows], dtype=np.int64)
    mask = np.array([[0] * (seq - len(r)) + [1] * len(r) for r in rows], dtype=np.int64)
    return padded, mask


IMAGES = [(1, 4, 6), (1, 8, 4), (1, 6, 4)]  # merged 2x3, 4x2, 3x2
VIDEOS = [(4, 12, 20), (2, 4, 8)]  # merged 4 x 6x10, 2 x 2x4
SECONDS = [0.7, 0.9]  # float32 products truncate below the float64 ones at k = 3 with 10 tokens/s


def qwen_batch(rule, merge=2):
    video = qwen3_video if rule == "qwen3-vl" else (lambda grid, m: run("video", grid, m))
    rows = [
        [T, T] + run("image", IMAGES[0], merge) + [T] + run("image", IMAGES[1], merge) + [T, T]
        + video(VIDEOS[0], merge) + [T],
        [T] + video(VIDEOS[1], merge) + [T] + run("image", IMAGES[2], merge),
    ]  # fmt: skip
    return left_pad(rows)


@pytest.mark.parametrize("rule", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_two_images_and_a_video_per_row_in_a_padded_batch(rule):
    ids, mask = qwen_batch(rule)
    seconds = SECONDS if rule == "qwen2.5-vl" else None
    pos, delta = mrope.position_ids(
        ids, IMAGES, VIDEOS, mask, rule=rule, second_per_grid_ts=seconds, tokens_per_second=10
    )
    want_pos, want_delta = get_rope_index(
        ids, IMAGES, VIDEOS, mask, rule=rule, merge=2, seconds=seconds, tps=10
    )
    assert pos.dtype == np.int64 and delta.dtype == np.int64
    assert pos.tolist() == want_pos and delta.tolist() == want_delta
    # Hand-derived: the first image (merged 2 x 3) starts at 3 after "T T <vs>".
    assert pos[:, 0, 3:9].tolist() == [[3] * 6, [3, 3, 3, 4, 4, 4], [3, 4, 5, 3, 4, 5]]
    # The second image (merged 4 x 2) starts at max(5) + 1 + 3 text tokens ("<ve> T <vs>") = 9.
    assert pos[:, 0, 12:20].tolist() == [[9] * 8, [9, 9, 10, 10, 11, 11, 12, 12], [9, 10] * 4]
    # The padded row: masked slots are 1.
    n_pad = int((mask[1] == 0).sum())
    assert n_pad > 0 and np.all(pos[:, 1, :n_pad] == 1)


def test_qwen2_5_vl_video_time_ids_by_hand():
    # Video 0 of grid (4, 12, 20) -> 4 temporal patches of 6 x 10 tokens, 0.7 s per grid, 10 tokens/s:
    # float32 k * 0.7 * 10 = 0, 7, 14, 21 (float64 would give 20.999... -> 20 at k = 3).
    ids, mask = qwen_batch("qwen2.5-vl")
    pos, _ = mrope.position_ids(
        ids, IMAGES, VIDEOS, mask, rule="qwen2.5-vl", second_per_grid_ts=SECONDS, tokens_per_second=10
    )
    start = 17  # the second image's ids end at 12; "<ve> T T <vs>" take 13..16
    first = 24  # index of the video's first token in row 0
    t_ids = pos[0, 0, first : first + 240 : 60]
    assert t_ids.tolist() == [start + 0, start + 7, start + 14, start + 21]
    assert pos[1, 0, first : first + 60 : 10].tolist() == [start + r for r in range(6)]
    assert pos[2, 0, first : first + 10].tolist() == [start + c for c in range(10)]
    # Video 1 (row 1), 0.9 s per grid: 0, 9 (two temporal patches of 2 x 4).
    row1 = pos[0, 1][mask[1] == 1]
    assert row1[2:18].tolist() == [2] * 8 + [2 + 9] * 8


def test_qwen2_5_vl_images_keep_t_id_zero_whatever_their_t():
    # get_rope_index sets second_per_grid_t = 0 for an image, so even a grid with t = 2 has t id 0.
    row = [T] + run("image", (2, 4, 6), 2) + [T]
    pos, delta = mrope.position_ids([row], [[2, 4, 6]], rule="qwen2.5-vl", tokens_per_second=10)
    assert pos[0, 0, 2:14].tolist() == [2] * 12
    assert pos[1, 0, 2:14].tolist() == [2, 2, 2, 3, 3, 3] * 2 and pos[2, 0, 2:14].tolist() == [2, 3, 4] * 4
    assert pos[:, 0, 14].tolist() == [5, 5, 5] and delta.tolist() == [[7 - 16]]
    # Qwen2-VL counts the two temporal patches.
    pos, _ = mrope.position_ids([row], [[2, 4, 6]], rule="qwen2-vl")
    assert pos[0, 0, 2:14].tolist() == [2] * 6 + [3] * 6


@pytest.mark.parametrize("merge", [1, 3])
@pytest.mark.parametrize("rule", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_merge_sizes_other_than_two(rule, merge):
    images, videos = [(1, 2 * merge, 3 * merge)], [(3, merge, 4 * merge)]
    video = qwen3_video(videos[0], merge) if rule == "qwen3-vl" else run("video", videos[0], merge)
    rows = [[T] + run("image", images[0], merge) + video + [T]]
    pos, delta = mrope.position_ids(
        rows, images, videos, rule=rule, spatial_merge_size=merge, tokens_per_second=3
    )
    want_pos, want_delta = get_rope_index(rows, images, videos, rule=rule, merge=merge, tps=3)
    assert pos.tolist() == want_pos and delta.tolist() == want_delta
    assert pos[1, 0, 2:8].tolist() == [2, 2, 2, 3, 3, 3] and pos[2, 0, 2:8].tolist() == [2, 3, 4] * 2


def test_merge_size_one_by_hand():
    # A (1, 3, 5) image unmerged: 15 tokens, rows 0..2 and columns 0..4.
    row = [T] + run("image", (1, 3, 5), 1)
    pos, delta = mrope.position_ids([row], [[1, 3, 5]], spatial_merge_size=1)
    assert pos[1, 0, 2:17].tolist() == [2] * 5 + [3] * 5 + [4] * 5
    assert pos[2, 0, 2:17].tolist() == [2, 3, 4, 5, 6] * 3
    assert pos[:, 0, 17].tolist() == [7, 7, 7] and delta.tolist() == [[8 - 18]]


def test_custom_qwen_token_ids():
    image, video, start, end = 23, 21, 22, 24
    rows = [[T, start] + [image] * 6 + [end, start] + [video] * 16 + [end, T]]
    kwargs = {"image_token_id": image, "video_token_id": video, "vision_start_token_id": start}
    pos, delta = mrope.position_ids(rows, [[1, 4, 6]], [[2, 4, 8]], **kwargs)
    want_pos, want_delta = get_rope_index(
        rows, [[1, 4, 6]], [[2, 4, 8]], image_tok=image, video_tok=video, start_tok=start
    )
    assert pos.tolist() == want_pos and delta.tolist() == want_delta
    # The released default ids are text under custom ids: the image grid row is left over.
    row = [[T, QWEN_VISION_START, QWEN_IMAGE, QWEN_VISION_END]]
    with pytest.raises(ValueError, match="image_grid_thw has 1 rows but input_ids use 0"):
        mrope.position_ids(row, [[1, 2, 2]], **kwargs)


def glm_batch(image, video_start, video_end):
    def item(grid):
        t, h, w = grid
        return [GLM_BOI] + [image] * (t * (h // 2) * (w // 2)) + [GLM_EOI]

    frames = []
    for _ in range(VIDEOS[1][0]):
        frames += [TS] + item((1,) + VIDEOS[1][1:])
    rows = [
        [T] + item(IMAGES[0]) + [T, video_start] + frames + [video_end, T] + item(IMAGES[1]) + [T],
        [T, T] + item(IMAGES[2]),
    ]
    return left_pad(rows)


@pytest.mark.parametrize(
    "tokens",
    [
        {},
        {"image_token_id": 13, "video_start_token_id": 11, "video_end_token_id": 12},
    ],
    ids=["released-ids", "custom-ids"],
)
def test_glm4v_two_images_and_a_non_square_video(tokens):
    image = tokens.get("image_token_id", GLM_IMAGE)
    v_start = tokens.get("video_start_token_id", GLM_VIDEO_START)
    v_end = tokens.get("video_end_token_id", GLM_VIDEO_END)
    ids, mask = glm_batch(image, v_start, v_end)
    images = [IMAGES[0], IMAGES[1], IMAGES[2]]
    pos, delta = mrope.position_ids(ids, images, [VIDEOS[1]], mask, rule="glm4v", **tokens)
    want_pos, want_delta = get_rope_index(
        ids, images, [VIDEOS[1]], mask, rule="glm4v", image_tok=image, video_start=v_start, video_end=v_end
    )
    assert pos.tolist() == want_pos and delta.tolist() == want_delta
    # Hand-derived: each video frame is a 2 x 4 grid with t id 0 at its own start.
    first = 1 + 8 + 2 + 2  # "T", image 0 with BOI/EOI (8), "T <video_start>", "TS <boi>"
    start = int(pos[0, 0, first - 1]) + 1
    assert pos[:, 0, first : first + 8].tolist() == [
        [start] * 8,
        [start] * 4 + [start + 1] * 4,
        [start + c for c in range(4)] * 2,
    ]


def test_glm4v_video_with_more_patches_than_runs():
    row = [T, GLM_VIDEO_START, GLM_BOI] + [GLM_IMAGE] * 8 + [GLM_EOI, GLM_VIDEO_END]
    with pytest.raises(ValueError, match="video_grid_thw\\[0\\] has more temporal patches than runs"):
        mrope.position_ids([row], None, [[2, 4, 8]], rule="glm4v")
    # The same run with a (1, 8, 4) grid (transposed) has the right count but other ids.
    pos, _ = mrope.position_ids([row], None, [[1, 8, 4]], rule="glm4v")
    assert pos[1, 0, 3:11].tolist() == [3, 3, 4, 4, 5, 5, 6, 6]
    pos, _ = mrope.position_ids([row], None, [[1, 4, 8]], rule="glm4v")
    assert pos[1, 0, 3:11].tolist() == [3, 3, 3, 3, 4, 4, 4, 4]


@pytest.mark.parametrize("rule", mrope.RULES)
def test_decode_after_a_padded_multimodal_prefill(rule):
    if rule == "glm4v":
        ids, mask = glm_batch(GLM_IMAGE, GLM_VIDEO_START, GLM_VIDEO_END)
        grids = {"image_grid_thw": IMAGES, "video_grid_thw": [VIDEOS[1]]}
    else:
        ids, mask = qwen_batch(rule)
        grids = {"image_grid_thw": IMAGES, "video_grid_thw": VIDEOS, "tokens_per_second": 10}
        if rule == "qwen2.5-vl":
            grids["second_per_grid_ts"] = SECONDS
    _, delta = mrope.position_ids(ids, attention_mask=mask, rule=rule, **grids)
    extra = np.full((2, 3), T)
    longer = np.concatenate([ids, extra], axis=1)
    full, _ = mrope.position_ids(
        longer, attention_mask=np.concatenate([mask, np.ones_like(extra)], axis=1), rule=rule, **grids
    )
    got = mrope.decode_position_ids(delta, cache_position=ids.shape[1], n_new=3)
    assert np.array_equal(got, full[:, :, ids.shape[1] :])
    # A 1-D delta per row is accepted as (batch, 1).
    assert np.array_equal(mrope.decode_position_ids(delta[:, 0], ids.shape[1], 3), got)


@pytest.mark.parametrize(
    ("deltas", "cache_position", "n_new", "match"),
    [
        (np.zeros((2, 1)), 4, 1, "integers of shape"),
        (np.zeros((2, 1, 1), dtype=np.int64), 4, 1, "shape \\(batch, 1\\)"),
        (np.zeros((2, 1), dtype=np.int64), 4, 0, "n_new"),
        (np.zeros((2, 1), dtype=np.int64), -1, 1, "cache_position"),
    ],
)
def test_decode_refuses_bad_arguments(deltas, cache_position, n_new, match):
    with pytest.raises(ValueError, match=match):
        mrope.decode_position_ids(deltas, cache_position, n_new)


GOOD = [T] + run("image", (1, 4, 6), 2)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (([GOOD], [[1, 4, 5]]), {}, ValueError, "image_grid_thw\\[0\\].*divisible by spatial_merge_size=2"),
        (
            ([GOOD], None, [[1, 6, 4]]),
            {"spatial_merge_size": 4},
            ValueError,
            "video_grid_thw\\[0\\].*divisible",
        ),
        (([GOOD], [[1, 4, 0]]), {}, ValueError, "image_grid_thw\\[0\\].*must be positive"),
        (([GOOD], [[1, 0, 6]]), {}, ValueError, "must be positive"),
        (([GOOD], [[0, 4, 6]]), {}, ValueError, "must be positive"),
        (([GOOD], [[1.0, 4.0, 6.0]]), {}, TypeError, "image_grid_thw must be an integer array"),
        (([GOOD], [[1, 4, 6]], None, [[1] * 8 + [2]]), {}, ValueError, "only 0 and 1"),
        (([GOOD], [[1, 4, 6]], None, [[1.0] * 9]), {}, ValueError, "only 0 and 1"),
        (([GOOD + [QWEN_VISION_START]], [[1, 4, 6]]), {}, ValueError, "ends with a vision_start"),
        (
            ([[T] + run("video", (1, 4, 6), 2) + run("video", (1, 2, 4), 2)], None, [[1, 4, 6], [1, 2, 4]]),
            {"rule": "qwen2.5-vl", "second_per_grid_ts": [1.0]},
            ValueError,
            "second_per_grid_ts has 1 entries, video 1 needs one",
        ),
        (
            ([[T] + run("video", (1, 4, 6), 2)], None, [[1, 4, 6]]),
            {"rule": "qwen2.5-vl", "second_per_grid_ts": [[1.0]]},
            ValueError,
            "second_per_grid_ts must be a 1-D real array",
        ),
        (([GOOD], [[1, 4, 6]]), {"spatial_merge_size": 0}, ValueError, "spatial_merge_size"),
        (([[T, QWEN_VISION_START, QWEN_VIDEO, QWEN_VISION_END]], [[1, 2, 2]]), {}, ValueError, "video"),
    ],
)
def test_bad_inputs_name_the_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        mrope.position_ids(*args, **kwargs)


@pytest.mark.parametrize(
    ("grid", "merge", "error", "match"),
    [
        ([[1, 4, 5]], 2, ValueError, "divisible by spatial_merge_size=2"),
        ([[1, 5, 4]], 2, ValueError, "divisible by spatial_merge_size=2"),
        ([[1, 6, 4]], 3, ValueError, "divisible by spatial_merge_size=3"),
        ([[1, 4, 0]], 2, ValueError, "must be positive"),
        ([[1, -2, 4]], 2, ValueError, "must be positive"),
        ([[1.0, 4.0, 6.0]], 2, TypeError, "integer array"),
        ([1, 4, 6], 2, ValueError, "shape \\(n, 3\\)"),
        ([[1, 4]], 2, ValueError, "shape \\(n, 3\\)"),
    ],
)
def test_grid_check_at_the_helper(grid, merge, error, match):
    with pytest.raises(error, match=match):
        mrope._check_grid(np.asarray(grid), "grid", merge)


def test_grid_check_at_the_helper_accepts_and_copies():
    grid = np.array([[2, 6, 9]], dtype=np.int32)
    got = mrope._check_grid(grid, "grid", 3)
    assert (
        got.dtype == np.int64 and got.tolist() == [[2, 6, 9]] and mrope._check_grid(None, "grid", 3) is None
    )


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        ([[1, 1, 2]], "only 0 and 1"),
        ([[1, -1, 1]], "only 0 and 1"),
        ([[1.0, 1.0, 1.0]], "only 0 and 1"),
        ([[1, 1]], "shape of input_ids \\(1, 3\\)"),
    ],
)
def test_mask_check_at_the_helper(mask, match):
    with pytest.raises(ValueError, match=match):
        mrope._check_mask(np.asarray(mask), (1, 3))


def test_mask_check_at_the_helper_gives_booleans():
    got = mrope._check_mask(np.array([[0, 1, 1]], dtype=np.uint8), (1, 3))
    assert got.dtype == bool and got.tolist() == [[False, True, True]]
    assert mrope._check_mask(None, (1, 3)) is None


def test_model_position_ids_use_the_models_merge_size_and_tokens_per_second():
    spec = mrope.preset("qwen2.5-vl-7b").rope
    model = mrope.MRopeModel("merge-1", spec, "qwen2.5-vl", spatial_merge_size=1, tokens_per_second=10.0)
    row = [T] + run("video", (4, 1, 2), 1)
    pos, _ = model.position_ids([row], None, [[4, 1, 2]], second_per_grid_ts=[0.7])
    want, _ = get_rope_index([row], None, [[4, 1, 2]], rule="qwen2.5-vl", merge=1, seconds=[0.7], tps=10)
    assert pos.tolist() == want
    assert pos[0, 0, 2:10].tolist() == [2, 2, 9, 9, 16, 16, 23, 23]
    # Keyword arguments override the model's constants.
    pos, _ = model.position_ids([row], None, [[4, 1, 2]], second_per_grid_ts=[0.7], tokens_per_second=3)
    assert pos[0, 0, 2:10].tolist() == [2, 2, 4, 4, 6, 6, 8, 8]
    # Other rules ignore tokens_per_second.
    qwen2 = mrope.MRopeModel("q2", spec, "qwen2-vl", spatial_merge_size=1, tokens_per_second=10.0)
    assert qwen2.position_ids([row], None, [[4, 1, 2]])[0][0, 0, 2:10].tolist() == [2, 2, 3, 3, 4, 4, 5, 5]
