"""M-RoPE (rope_ref.mrope): position ids and rotation of Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4V.

Expected ids come from hand-worked examples (``docs/multimodal.md``) and from ``ref_ids`` below, a
token-by-token restatement of the released ``get_rope_index`` rules ("every segment starts at the
maximum id so far + 1"). Expected rotations come from restating HF's channel bookkeeping
(``apply_multimodal_rotary_pos_emb``: split the doubled cos table by ``mrope_section * 2`` and take chunk
j from stream j % 3; Qwen3-VL's ``apply_interleaved_mrope``; GLM-4V's first-half + repeat_interleave)
channel by channel with ``math.cos``.
"""

import math

import numpy as np
import pytest
from hf_configs import QWEN2_VL_7B, QWEN3_VL_8B
from hypothesis import given, settings
from hypothesis import strategies as st
from mrope_reference import hf_channel_streams

import rope_ref
from rope_ref import mrope

IMG, VID, VS, VE = 151655, 151656, 151652, 151653
G_IMG, G_VSTART, G_VEND, BOI, EOI = 151343, 151341, 151342, 151339, 151340
T, PAD, TS = 9, 0, 77  # text, pad, a timestamp text token


def ids(*rows):
    return np.array(rows, dtype=np.int64)


# -- hand-worked examples (docs/multimodal.md) ------------------------------------------------------


def test_worked_example_image_1_4_6_merge_2_qwen2_vl():
    row = [T, T, VS] + [IMG] * 6 + [VE, T, T]
    pos, delta = mrope.position_ids(ids(row), image_grid_thw=[[1, 4, 6]])
    assert pos[0, 0].tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8]
    assert pos[1, 0].tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8]
    assert pos[2, 0].tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8]
    assert delta.tolist() == [[-3]]
    # Same ids for Qwen2.5-VL and Qwen3-VL (images get t id 0) and for GLM-4V's image tokens.
    for rule in ("qwen2.5-vl", "qwen3-vl"):
        other, d = mrope.position_ids(ids(row), image_grid_thw=[[1, 4, 6]], rule=rule)
        assert np.array_equal(other, pos) and d.tolist() == [[-3]]
    glm_row = [T, T, BOI] + [G_IMG] * 6 + [EOI, T, T]
    other, d = mrope.position_ids(ids(glm_row), image_grid_thw=[[1, 4, 6]], rule="glm4v")
    assert np.array_equal(other, pos) and d.tolist() == [[-3]]


def test_worked_example_video_2_4_4_qwen2_vl_and_qwen2_5_vl():
    row = [T, VS] + [VID] * 8 + [VE, T]
    pos, delta = mrope.position_ids(ids(row), video_grid_thw=[[2, 4, 4]])
    assert pos[:, 0].tolist() == [
        [0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 5],
        [0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 4, 5],
        [0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5],
    ]
    assert delta.tolist() == [[-6]]
    # Qwen2.5-VL: t id = k * second_per_grid_t * tokens_per_second (1.0 s per grid, 2 tokens/s -> step 2).
    pos, delta = mrope.position_ids(
        ids(row), video_grid_thw=[[2, 4, 4]], rule="qwen2.5-vl", second_per_grid_ts=[1.0], tokens_per_second=2
    )
    assert pos[0, 0].tolist() == [0, 1, 2, 2, 2, 2, 4, 4, 4, 4, 5, 6]
    assert pos[1, 0].tolist() == [0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 5, 6]
    assert delta.tolist() == [[-5]]


def test_worked_example_video_2_4_4_qwen3_vl():
    # The processor writes each temporal patch as its own <vision_start> run, timestamps in between.
    row = [T, TS, VS] + [VID] * 4 + [VE, TS, VS] + [VID] * 4 + [VE, T]
    pos, delta = mrope.position_ids(ids(row), video_grid_thw=[[2, 4, 4]], rule="qwen3-vl")
    assert pos[:, 0].tolist() == [
        [0, 1, 2, 3, 3, 3, 3, 5, 6, 7, 8, 8, 8, 8, 10, 11],
        [0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 11],
        [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 9, 8, 9, 10, 11],
    ]
    assert delta.tolist() == [[12 - 16]]


def test_worked_example_video_2_4_4_glm4v():
    row = [T, G_VSTART, BOI] + [G_IMG] * 4 + [EOI, TS, BOI] + [G_IMG] * 4 + [EOI, G_VEND, T]
    pos, delta = mrope.position_ids(ids(row), video_grid_thw=[[2, 4, 4]], rule="glm4v")
    assert pos[:, 0].tolist() == [
        [0, 1, 2, 3, 3, 3, 3, 5, 6, 7, 8, 8, 8, 8, 10, 11, 12],
        [0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 11, 12],
        [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 9, 8, 9, 10, 11, 12],
    ]
    assert delta.tolist() == [[13 - 17]]


def test_qwen2_5_vl_temporal_ids_truncate_a_float32_product():
    row = [VS] + [VID] * 4 + [T]
    pos, _ = mrope.position_ids(
        ids(row),
        video_grid_thw=[[4, 2, 2]],
        rule="qwen2.5-vl",
        second_per_grid_ts=[0.5],
        tokens_per_second=25,
    )
    assert pos[0, 0, 1:5].tolist() == [1 + 0, 1 + 12, 1 + 25, 1 + 37]  # 12.5 and 37.5 truncate
    assert pos[0, 0, 5] == 1 + 37 + 1
    # Without second_per_grid_ts the released code uses 1.0 second per grid.
    pos, _ = mrope.position_ids(ids(row), video_grid_thw=[[4, 2, 2]], rule="qwen2.5-vl", tokens_per_second=2)
    assert pos[0, 0, 1:5].tolist() == [1, 3, 5, 7]
    # Qwen2-VL ignores time: consecutive t ids.
    pos, _ = mrope.position_ids(ids(row), video_grid_thw=[[4, 2, 2]])
    assert pos[0, 0, 1:5].tolist() == [1, 2, 3, 4]


# -- restatement of the released rules ---------------------------------------------------------------


def ref_ids(tokens, images, videos, merge, rule, seconds=None, tps=2.0):
    """Token-by-token: text takes next, next+1, ...; a vision run takes next + (t, h, w) offsets."""
    images, videos = list(images or []), list(videos or [])
    if rule == "qwen3-vl":
        videos = [(1, h, w) for (t, h, w) in videos for _ in range(t)]
    out, nxt, i, vi = [], 0, 0, 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in (IMG, VID):
            t, h, w = images.pop(0) if tok == IMG else videos[vi]
            if tok == VID:
                vi += 1
            for tt in range(t):
                if rule == "qwen2.5-vl":
                    sec = 0.0 if tok == IMG else (seconds[vi - 1] if seconds else 1.0)
                    tid = int(np.float32(np.float32(tt) * np.float32(sec)) * np.float32(tps))
                else:
                    tid = tt
                for hh in range(h // merge):
                    for ww in range(w // merge):
                        out.append((nxt + tid, nxt + hh, nxt + ww))
            i += t * (h // merge) * (w // merge)
            nxt = max(max(p) for p in out) + 1
        else:
            out.append((nxt, nxt, nxt))
            nxt += 1
            i += 1
    return np.array(out, dtype=np.int64).T


def random_row(rng, n_images, n_videos, merge):
    row, images, videos = [], [], []
    kinds = ["image"] * n_images + ["video"] * n_videos
    rng.shuffle(kinds)
    for kind in kinds:
        row += [T] * int(rng.integers(0, 4)) + [VS]
        t = int(rng.integers(1, 4)) if kind == "video" else 1
        h, w = merge * int(rng.integers(1, 4)), merge * int(rng.integers(1, 4))
        (videos if kind == "video" else images).append((t, h, w))
        row += [IMG if kind == "image" else VID] * (t * (h // merge) * (w // merge)) + [VE]
    row += [T] * int(rng.integers(1, 4))
    return row, images, videos


@settings(deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_images=st.integers(0, 3),
    n_videos=st.integers(0, 2),
    merge=st.sampled_from([1, 2]),
    rule=st.sampled_from(["qwen2-vl", "qwen2.5-vl"]),
)
def test_ids_match_the_restatement(seed, n_images, n_videos, merge, rule):
    rng = np.random.default_rng(seed)
    row, images, videos = random_row(rng, n_images, n_videos, merge)
    seconds = [float(rng.choice([0.5, 1.0, 2.0, 0.3])) for _ in videos] if rule == "qwen2.5-vl" else None
    pos, delta = mrope.position_ids(
        ids(row),
        image_grid_thw=np.array(images, dtype=np.int64).reshape(-1, 3) if images else None,
        video_grid_thw=np.array(videos, dtype=np.int64).reshape(-1, 3) if videos else None,
        spatial_merge_size=merge,
        rule=rule,
        second_per_grid_ts=seconds,
        tokens_per_second=25.0,
    )
    want = ref_ids(row, images, videos, merge, rule, seconds, 25.0)
    assert np.array_equal(pos[:, 0], want)
    assert delta[0, 0] == want.max() + 1 - len(row)


def test_left_padded_batch_and_grids_consumed_across_rows():
    rows = [
        [PAD, PAD, T, VS] + [IMG] * 6 + [VE, T],
        [T, VS] + [IMG] * 2 + [VE, VS] + [VID] * 4 + [VE, T],
        [PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, T, T, T],
    ]
    mask = (ids(*rows) != PAD).astype(np.int64)
    grids_img = [[1, 4, 6], [1, 2, 4]]
    pos, delta = mrope.position_ids(ids(*rows), grids_img, [[1, 4, 4]], mask)
    want0 = ref_ids(rows[0][2:], [(1, 4, 6)], [], 2, "qwen2-vl")
    want1 = ref_ids(rows[1], [(1, 2, 4)], [(1, 4, 4)], 2, "qwen2-vl")
    assert np.array_equal(pos[:, 0, 2:], want0) and np.all(pos[:, 0, :2] == 1)
    assert np.array_equal(pos[:, 1], want1)
    assert pos[:, 2].tolist() == [[1] * 9 + [0, 1, 2]] * 3
    assert delta[:, 0].tolist() == [want0.max() + 1 - 12, want1.max() + 1 - 12, 3 - 12]


def test_text_only_rules():
    batch = ids([T, T, T, T], [PAD, PAD, T, T])
    pos, delta = mrope.position_ids(batch)
    assert pos.tolist() == [[[0, 1, 2, 3], [0, 1, 2, 3]]] * 3 and delta.tolist() == [[0], [0]]
    pos, delta = mrope.position_ids(batch, attention_mask=[[1, 1, 1, 1], [0, 0, 1, 1]])
    assert pos[:, 1].tolist() == [[1, 1, 0, 1]] * 3
    assert delta.tolist() == [[0], [-2]]


@pytest.mark.parametrize("rule", mrope.RULES)
def test_decode_ids_continue_a_full_recompute(rule):
    if rule == "glm4v":
        rows = [[PAD, PAD, T, BOI] + [G_IMG] * 6 + [EOI], [T, T, T, BOI] + [G_IMG] * 6 + [EOI]]
        grids = {"image_grid_thw": [[1, 4, 6], [1, 4, 6]]}
    else:
        rows = [[PAD, PAD, T, VS] + [VID] * 6 + [VE], [T, T, T, VS] + [VID] * 6 + [VE]]
        grids = {"video_grid_thw": [[1, 4, 6], [1, 4, 6]]}
        if rule == "qwen2.5-vl":
            grids["second_per_grid_ts"] = [2.0, 2.0]
    mask = (ids(*rows) != PAD).astype(np.int64)
    _, delta = mrope.position_ids(ids(*rows), attention_mask=mask, rule=rule, **grids)
    for step in range(3):
        longer = [r + [T] * (step + 1) for r in rows]
        full, _ = mrope.position_ids(
            ids(*longer), attention_mask=(ids(*longer) != PAD).astype(np.int64), rule=rule, **grids
        )
        got = mrope.decode_position_ids(delta, cache_position=len(rows[0]), n_new=step + 1)
        assert np.array_equal(got, full[:, :, len(rows[0]) :])


# -- rotation ------------------------------------------------------------------------------------------


def hf_rotate(x, pos3, inv, channel_streams, layout, rotary_dim):
    """``x * cos + rotate(x) * sin`` channel by channel; rotate = rotate_half or GLM's rotate_half_llm."""
    out = list(x)
    n = rotary_dim
    for c in range(n):
        i = c % (n // 2) if layout == "half" else c // 2  # frequency index of channel c
        theta = pos3[channel_streams[c]] * inv[i]
        if layout == "half":
            rot = -x[c + n // 2] if c < n // 2 else x[c - n // 2]
        else:
            rot = -x[c + 1] if c % 2 == 0 else x[c - 1]
        out[c] = x[c] * math.cos(theta) + rot * math.sin(theta)
    return out


MODELS = [
    ("qwen2-vl-7b", "qwen2", 1e6, (16, 24, 24), "half", 128),
    ("qwen2.5-vl-7b", "qwen2", 1e6, (16, 24, 24), "half", 128),
    ("qwen3-vl-8b", "qwen3", 5e6, (24, 20, 20), "half", 128),
    ("glm-4.1v-9b", "glm4v", 1e4, (8, 12, 12), "interleaved", 64),
]


@pytest.mark.parametrize(("name", "mode", "base", "sections", "layout", "rotary_dim"), MODELS)
def test_rotation_matches_hf_channel_bookkeeping(name, mode, base, sections, layout, rotary_dim):
    model = mrope.preset(name)
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal((6, 128))
    pos = rng.integers(0, 5000, size=(3, 6))
    got = model.apply(x, pos)
    inv = [base ** (-2.0 * i / rotary_dim) for i in range(rotary_dim // 2)]
    streams = hf_channel_streams(128, sections, mode, rotary_dim)
    for t in range(6):
        want = hf_rotate(list(x[t]), pos[:, t], inv, streams, layout, rotary_dim)
        np.testing.assert_allclose(got[t], want, rtol=1e-11, atol=1e-11)
        assert np.array_equal(got[t, rotary_dim:], x[t, rotary_dim:])  # GLM-4V: partial rotary


@pytest.mark.parametrize("name", mrope.preset_names())
def test_text_only_equals_plain_rope_bit_for_bit(name):
    model = mrope.preset(name)
    cfg = model.rope.tables[0]
    batch = ids([T] * 9, [PAD, PAD, PAD] + [T] * 6)
    mask = (batch != PAD).astype(np.int64)
    pos3, _ = model.position_ids(batch, attention_mask=mask)
    x = np.random.default_rng(0).standard_normal((2, 9, 4, 128))  # (batch, seq, heads, head_dim)
    got = model.apply(x, pos3[..., None])
    assert np.array_equal(got, rope_ref.apply(x, pos3[0][..., None], cfg))


def test_blocked_and_interleaved_sections():
    assert mrope.section_streams([1, 2, 3], 6) == (0, 1, 1, 2, 2, 2)
    assert mrope.section_streams([24, 20, 20], 64, interleaved=True)[:7] == (0, 1, 2, 0, 1, 2, 0)
    streams = mrope.section_streams([24, 20, 20], 64, interleaved=True)
    assert streams[58:] == (1, 2, 0, 0, 0, 0) and [streams.count(s) for s in range(3)] == [24, 20, 20]


# -- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mrope_section": [16, 24, 23]}, ValueError, "mrope_section"),
        ({"mrope_section": [16, 48]}, ValueError, "mrope_section"),
        ({"mrope_section": [16, 24, 24], "interleaved": True}, ValueError, "mrope_section"),
        ({"mrope_section": "16,24,24"}, TypeError, "mrope_section"),
    ],
)
def test_bad_sections(kwargs, error, match):
    with pytest.raises(error, match=match):
        mrope.mrope(rope_ref.RopeConfig(128, layout="half"), **kwargs)


GOOD = [T, VS] + [IMG] * 6 + [VE]


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((ids(GOOD), [[1, 5, 6]]), {}, "image_grid_thw.*divisible by spatial_merge_size"),
        ((ids(GOOD), [[1, 4, 4]]), {}, "image run at index 2 has 6 tokens but image_grid_thw\\[0\\]"),
        ((ids(GOOD),), {}, "vision tokens but image_grid_thw and video_grid_thw are None"),
        ((ids(GOOD), None, [[1, 4, 6]]), {}, "image token run but image_grid_thw has no row"),
        ((ids(GOOD), [[1, 4, 6], [1, 2, 2]]), {}, "image_grid_thw has 2 rows but input_ids use 1"),
        ((ids([T, IMG, IMG, VS, T]), [[1, 2, 2]]), {}, "image token at index 1"),
        ((np.array(GOOD), [[1, 4, 6]]), {}, "input_ids must have shape"),
        ((ids(GOOD), [1, 4, 6]), {}, "image_grid_thw must have shape"),
        ((ids(GOOD), [[1, 4, 6]], None, [[1, 1]]), {}, "attention_mask must have the shape"),
        ((ids(GOOD), [[1, 4, 6]], None, [[0] * 9]), {}, "attention_mask row 0 masks every token"),
        ((ids(GOOD), [[1, 4, 6]]), {"rule": "qwen4"}, "rule"),
        ((ids([T] + [VS] + [VID] * 4), None, [[2, 2, 2]]), {"rule": "glm4v"}, "image_token|video"),
    ],
)
def test_bad_position_inputs(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mrope.position_ids(*args, **kwargs)


def test_bad_decode_and_apply_inputs():
    with pytest.raises(ValueError, match="mrope_position_deltas"):
        mrope.decode_position_ids(np.zeros((2, 2), dtype=int), 4)
    with pytest.raises(ValueError, match="cache_position"):
        mrope.decode_position_ids(np.zeros((2, 1), dtype=int), -1)
    model = mrope.preset("qwen2-vl-7b")
    with pytest.raises(ValueError, match="n_streams=3"):
        model.apply(np.zeros((4, 128)), np.zeros((4,)))
    with pytest.raises(ValueError, match="unknown M-RoPE preset"):
        mrope.preset("qwen9")


def test_presets_carry_their_rule_constants():
    row = [T, VS] + [VID] * 8 + [VE, T]
    pos, delta = mrope.preset("qwen2.5-vl-7b").position_ids(
        ids(row), None, [[2, 4, 4]], second_per_grid_ts=[1.0]
    )
    assert pos[0, 0].tolist() == [0, 1, 2, 2, 2, 2, 4, 4, 4, 4, 5, 6] and delta.tolist() == [[-5]]
    pos, _ = mrope.preset("qwen2-vl-7b").position_ids(ids(row), None, [[2, 4, 4]])
    assert pos[0, 0].tolist() == [0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 5]
    with pytest.raises(ValueError, match="second_per_grid_ts is only used by rule 'qwen2.5-vl'"):
        mrope.preset("qwen2-vl-7b").position_ids(ids(row), None, [[2, 4, 4]], second_per_grid_ts=[1.0])


def test_from_hf_configs_match_the_presets():
    m = mrope.from_hf(QWEN2_VL_7B)
    p = mrope.preset("qwen2-vl-7b")
    assert (m.rope.streams, m.rope.tables, m.rule) == (p.rope.streams, p.rope.tables, p.rule)
    assert dict(m.token_ids) == {"image_token_id": IMG, "video_token_id": VID, "vision_start_token_id": VS}
    m, p = mrope.from_hf(QWEN3_VL_8B), mrope.preset("qwen3-vl-8b")
    assert (m.rope.streams, m.rope.tables, m.rule) == (p.rope.streams, p.rope.tables, p.rule)
    glm = {
        "model_type": "glm4v",
        "image_token_id": G_IMG,
        "text_config": {
            "model_type": "glm4v_text",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]},
        },
    }
    m, p = mrope.from_hf(glm), mrope.preset("glm-4.1v-9b")
    assert (m.rope.streams, m.rope.tables, m.rule) == (p.rope.streams, p.rope.tables, p.rule)
    # The config's token ids drive the position ids.
    custom = dict(QWEN2_VL_7B, image_token_id=5, vision_start_token_id=6)
    pos, _ = mrope.from_hf(custom).position_ids(ids([T, 6, 5, 5, T]), [[1, 2, 4]])
    assert pos[:, 0].tolist() == [[0, 1, 2, 2, 4], [0, 1, 2, 2, 4], [0, 1, 2, 3, 4]]


def test_from_hf_refuses_non_mrope_configs():
    with pytest.raises(ValueError, match="model_type"):
        mrope.from_hf({"model_type": "llama"})
    with pytest.raises(ValueError, match="mrope_section"):
        mrope.from_hf(dict(QWEN2_VL_7B, rope_scaling={"type": "default"}))
    with pytest.raises(ValueError, match="mrope_section"):
        mrope.from_hf(dict(QWEN2_VL_7B, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 16]}))
