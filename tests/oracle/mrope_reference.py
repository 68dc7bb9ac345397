"""M-RoPE position ids restated from the released ``get_rope_index`` loops, for the tests of ``mrope``.

Written from HF ``transformers`` (``docs/multimodal.md`` section 3): ``models/qwen2_vl/modeling_qwen2_vl.py``
``Qwen2VLModel.get_rope_index`` (v4.57.6), ``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` ``get_rope_index``
(v4.49.0: ``time_tensor = expanded_range * second_per_grid_t * tokens_per_second``, float32, then
``.long()``), ``models/qwen3_vl/modeling_qwen3_vl.py`` ``get_rope_index`` (videos split into ``t`` rows of
``(1, h, w)`` by ``repeat_interleave``) and ``models/glm4v/modeling_glm4v.py`` ``get_rope_index`` (token
types grouped with ``itertools.groupby``). Plain Python loops over the released variables (``st``,
``ed``, ``llm_grid_t/h/w``, ``st_idx``, ``text_len``); nothing from ``rope_ref``.
"""

from __future__ import annotations

import itertools

import numpy as np

QWEN_IMAGE, QWEN_VIDEO, QWEN_VISION_START, QWEN_VISION_END = 151655, 151656, 151652, 151653
GLM_IMAGE, GLM_VIDEO_START, GLM_VIDEO_END, GLM_BOI, GLM_EOI = 151343, 151341, 151342, 151339, 151340


def _grid_block(t_index: list[int], gh: int, gw: int, offset: int) -> list[tuple[int, int, int]]:
    """``stack([t_index, h_index, w_index]) + offset`` with t outermost, then h, then w."""
    return [(offset + tt, offset + hh, offset + ww) for tt in t_index for hh in range(gh) for ww in range(gw)]


def _qwen_row(tokens, state, rule, merge, seconds, tps, image_tok, video_tok, start_tok):
    firsts = [tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i] == start_tok]
    image_nums, video_nums = firsts.count(image_tok), firsts.count(video_tok)
    remain_images, remain_videos = image_nums, video_nums
    out: list[tuple[int, int, int]] = []
    st = 0
    for _ in range(image_nums + video_nums):
        ed_image = (
            tokens.index(image_tok, st) if image_tok in tokens and remain_images > 0 else len(tokens) + 1
        )
        ed_video = (
            tokens.index(video_tok, st) if video_tok in tokens and remain_videos > 0 else len(tokens) + 1
        )
        if ed_image < ed_video:
            t, h, w = state["images"][state["image_index"]]
            second_per_grid_t = 0
            state["image_index"] += 1
            remain_images -= 1
            ed = ed_image
        else:
            t, h, w = state["videos"][state["video_index"]]
            second_per_grid_t = seconds[state["video_index"]] if seconds is not None else 1.0
            state["video_index"] += 1
            remain_videos -= 1
            ed = ed_video
        llm_grid_t, llm_grid_h, llm_grid_w = t, h // merge, w // merge
        text_len = ed - st
        st_idx = max(max(p) for p in out) + 1 if out else 0
        out += [(st_idx + j,) * 3 for j in range(text_len)]
        if rule == "qwen2.5-vl":  # float32 tensor arithmetic, then .long() (truncation toward zero)
            t_index = [
                int(np.trunc(np.float32(np.float32(k) * np.float32(second_per_grid_t)) * np.float32(tps)))
                for k in range(llm_grid_t)
            ]
        else:
            t_index = list(range(llm_grid_t))
        out += _grid_block(t_index, llm_grid_h, llm_grid_w, text_len + st_idx)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(tokens):
        st_idx = max(max(p) for p in out) + 1 if out else 0
        out += [(st_idx + j,) * 3 for j in range(len(tokens) - st)]
    return out


def _glm_row(tokens, state, merge, image_tok, video_start, video_end):
    types = []
    video_check_flg = False
    for token in tokens:  # as released: the flag is set before the token itself is typed
        if token == video_start:
            video_check_flg = True
        elif token == video_end:
            video_check_flg = False
        if token == image_tok and not video_check_flg:
            types.append("image")
        elif token == image_tok and video_check_flg:
            types.append("video")
        else:
            types.append("text")
    out: list[tuple[int, int, int]] = []
    for kind, group in itertools.groupby(enumerate(types), lambda item: item[1]):
        group = list(group)
        st_idx = max(max(p) for p in out) + 1 if out else 0
        if kind == "image":
            t, h, w = state["images"][state["image_index"]]
            out += _grid_block(list(range(t)), h // merge, w // merge, st_idx)
            state["image_index"] += 1
        elif kind == "video":
            _, h, w = state["videos"][state["video_index"]]
            out += _grid_block([0], h // merge, w // merge, st_idx)
            state["video_group_index"] += 1
            if state["video_group_index"] >= state["videos"][state["video_index"]][0]:
                state["video_index"] += 1
                state["video_group_index"] = 0
        else:
            out += [(st_idx + j,) * 3 for j in range(len(group))]
    return out


def get_rope_index(
    input_ids,
    image_grid_thw=None,
    video_grid_thw=None,
    attention_mask=None,
    *,
    rule="qwen2-vl",
    merge=2,
    seconds=None,
    tps=2.0,
    image_tok=None,
    video_tok=QWEN_VIDEO,
    start_tok=QWEN_VISION_START,
    video_start=GLM_VIDEO_START,
    video_end=GLM_VIDEO_END,
):
    """``(position_ids (3, B, S), deltas (B, 1))`` as lists of ints, by the released loops."""
    rows = [list(map(int, r)) for r in input_ids]
    mask = (
        [[1] * len(r) for r in rows]
        if attention_mask is None
        else [list(map(int, m)) for m in attention_mask]
    )
    videos = [tuple(map(int, v)) for v in (video_grid_thw or [])]
    if rule == "qwen3-vl":  # repeat_interleave(video_grid_thw, video_grid_thw[:, 0]); [:, 0] = 1
        videos = [(1, h, w) for (t, h, w) in videos for _ in range(t)]
    state = {
        "images": [tuple(map(int, g)) for g in (image_grid_thw or [])],
        "videos": videos,
        "image_index": 0,
        "video_index": 0,
        "video_group_index": 0,
    }
    if image_tok is None:
        image_tok = GLM_IMAGE if rule == "glm4v" else QWEN_IMAGE
    seq = len(rows[0])
    pos = [[[1] * seq for _ in rows] for _ in range(3)]
    deltas = []
    for b, row in enumerate(rows):
        tokens = [tok for tok, keep in zip(row, mask[b], strict=True) if keep == 1]
        if rule == "glm4v":
            ids = _glm_row(tokens, state, merge, image_tok, video_start, video_end)
        else:
            ids = _qwen_row(tokens, state, rule, merge, seconds, tps, image_tok, video_tok, start_tok)
        kept = [s for s in range(seq) if mask[b][s] == 1]
        for (t_id, h_id, w_id), s in zip(ids, kept, strict=True):
            pos[0][b][s], pos[1][b][s], pos[2][b][s] = t_id, h_id, w_id
        deltas.append([max(max(p) for p in ids) + 1 - seq])
    return pos, deltas


def hf_channel_streams(head_dim, sections, mode, rotary_dim=None):
    """Stream of every channel of HF's final cos/sin table, by restating each release's slicing.

    ``"qwen2"`` (``apply_multimodal_rotary_pos_emb``): the doubled table split by ``sections * 2``, chunk
    ``j`` from stream ``j % 3``. ``"qwen3"`` (``apply_interleaved_mrope``): ``freqs_t[..., idx] =
    freqs[dim][..., idx]`` with ``idx = slice(offset, 3 * sections[dim], 3)``, then ``cat(freqs, freqs)``.
    ``"glm4v"``: the Qwen2 slicing of the doubled ``rotary_dim`` table, its first half kept and each entry
    repeated twice (``repeat_interleave(2)``).
    """
    if mode == "qwen2":
        out = []
        for j, width in enumerate(list(sections) * 2):
            out += [j % 3] * width
        return out
    if mode == "qwen3":
        half = head_dim // 2
        streams = [0] * half
        for dim, offset in ((1, 1), (2, 2)):
            for idx in range(offset, min(sections[dim] * 3, half), 3):
                streams[idx] = dim
        return streams + streams
    table = hf_channel_streams(rotary_dim, sections, "qwen2")[: rotary_dim // 2]
    return [s for s in table for _ in range(2)]


def hf_rotation_matrix(head_dim, rotary_dim, pos3, inv, channel_streams, layout):
    """The ``head_dim x head_dim`` matrix of ``x * cos + rotate(x) * sin`` on the first ``rotary_dim``
    channels (identity on the rest); ``rotate`` is ``rotate_half`` (``layout="half"``) or GLM-4V's
    ``rotate_half_llm`` (adjacent pairs). Channel ``c`` turns by ``pos3[stream of c] * inv[k]``, ``k`` the
    frequency index of ``c`` (``c mod rotary_dim/2`` for half, ``c // 2`` for adjacent pairs)."""
    m = np.eye(head_dim)
    n = rotary_dim
    for c in range(n):
        k = c % (n // 2) if layout == "half" else c // 2
        theta = float(pos3[channel_streams[c]]) * inv[k]
        cos, sin = np.cos(theta), np.sin(theta)
        m[c, c] = cos
        if layout == "half":
            partner, sign = (c + n // 2, -1.0) if c < n // 2 else (c - n // 2, 1.0)
        else:
            partner, sign = (c + 1, -1.0) if c % 2 == 0 else (c - 1, 1.0)
        m[c, partner] = sign * sin
    return m
