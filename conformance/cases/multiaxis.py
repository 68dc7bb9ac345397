"""Multi-axis RoPE (issue 20; ``docs/multimodal.md`` §10): M-RoPE rotation and ids, 2D vision ids and the
DeepSeek MLA softmax scale (operations ``multiaxis_apply``, ``mrope_position_ids``, ``mrope_decode_ids``,
``vision_ids``, ``mla_softmax_scale``).

JSON forms stored in a case's ``params`` (``docs/golden-format.md``):

* ``spec`` (``multiaxis_apply``): ``{head_dim, layout, blocks, streams[], freq_index[], tables[]}``, each
  table a RoPE config dict as in a case's ``config``; it is :class:`rope_ref.multiaxis.MultiAxisRope`.
* ``mla`` (``mla_softmax_scale``): ``{name, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope,
  mscale_all_dim}``; it is :class:`rope_ref.mla.MLAConfig`.

:func:`spec_to_dict` / :func:`mla_to_dict` write them; :func:`rope_ref.case.spec_from_dict` /
:func:`mla_from_dict` rebuild the rope_ref objects (the oracle here, the runner when it calls a backend).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rope_ref import RopeConfig, mla, mrope, multiaxis, vision_rope
from rope_ref.case import Case, config_from_dict, spec_from_dict
from rope_ref.multiaxis import _resolved_seq_len

from .common import config_dict, dtype_cases, make_case, seeded_normal
from .operations import operation

__all__ = [
    "multiaxis_cases",
    "multiaxis_realistic_cases",
    "MULTIMODAL_OPS",
    "ID_OPS",
    "spec_to_dict",
    "mla_to_dict",
    "mla_from_dict",
    "mrope_kwargs",
    "pair_aux",
]

#: Operations added by issue 20 (optional in the protocol: missing ones are "operation missing").
MULTIMODAL_OPS = (
    "multiaxis_apply",
    "mrope_position_ids",
    "mrope_decode_ids",
    "vision_ids",
    "mla_softmax_scale",
)
#: Those judged exactly (integer ids).
ID_OPS = ("mrope_position_ids", "mrope_decode_ids", "vision_ids")

_VS, _IMG, _VID = 151652, 151655, 151656  # Qwen2-VL <|vision_start|>, <|image_pad|>, <|video_pad|>
_VE = 151653  # Qwen2-VL <|vision_end|> (text to the id rule)


def spec_to_dict(spec) -> dict[str, Any]:
    """A :class:`~rope_ref.multiaxis.MultiAxisRope` as the JSON object stored in ``params["spec"]``."""
    return {
        "head_dim": int(spec.head_dim),
        "layout": spec.layout,
        "blocks": int(spec.blocks),
        "streams": [int(s) for s in spec.streams],
        "freq_index": [int(k) for k in spec.freq_index],
        "tables": [config_dict(t) for t in spec.tables],
    }


def mla_to_dict(cfg) -> dict[str, Any]:
    """A :class:`~rope_ref.mla.MLAConfig` as the JSON object stored in ``params["mla"]``."""
    return {
        "name": cfg.name,
        "qk_nope_head_dim": int(cfg.qk_nope_head_dim),
        "qk_rope_head_dim": int(cfg.qk_rope_head_dim),
        "v_head_dim": int(cfg.v_head_dim),
        "rope": config_dict(cfg.rope),
        "mscale_all_dim": None if cfg.mscale_all_dim is None else float(cfg.mscale_all_dim),
    }


def mla_from_dict(d: dict[str, Any]):
    """The :class:`~rope_ref.mla.MLAConfig` of a stored ``mla`` object."""
    return mla.MLAConfig(
        d["name"],
        int(d["qk_nope_head_dim"]),
        int(d["qk_rope_head_dim"]),
        int(d["v_head_dim"]),
        config_from_dict(d["rope"]),
        d["mscale_all_dim"],
    )


def mrope_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``mrope_position_ids`` that a case stores in ``params``."""
    return {
        "rule": params["rule"],
        "spatial_merge_size": params["spatial_merge_size"],
        "tokens_per_second": params["tokens_per_second"],
    }


# -- the oracle ----------------------------------------------------------------------------------------


def pair_aux(inputs: dict[str, np.ndarray], params: dict[str, Any]) -> dict[str, np.ndarray]:
    """``aux`` of a ``multiaxis_apply`` case: per pair its frequency and attention factor (float64,
    ``(n_pairs,)``) at the resolved ``seq_len``, so that a foreign reader can compute the tolerance."""
    spec = spec_from_dict(params["spec"])
    pos = np.asarray(inputs["positions"], dtype=np.float64)
    phi, amp = spec.pair_frequencies(_resolved_seq_len(pos, spec, None))
    return {"pair_inv_freq": np.asarray(phi, dtype=np.float64), "pair_attention_factor": amp}


def _pair_aux(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return pair_aux(inputs, params)


@operation("multiaxis_apply", auxiliary=_pair_aux)
def _multiaxis_apply(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": multiaxis.apply(inputs["x"], inputs["positions"], spec_from_dict(params["spec"]))}


@operation("mrope_position_ids")
def _mrope_position_ids(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    ids, deltas = mrope.position_ids(
        inputs["input_ids"],
        inputs.get("image_grid_thw"),
        inputs.get("video_grid_thw"),
        inputs.get("attention_mask"),
        second_per_grid_ts=inputs.get("second_per_grid_ts"),
        **mrope_kwargs(params),
    )
    return {"position_ids": np.asarray(ids, dtype=np.int64), "deltas": np.asarray(deltas, dtype=np.int64)}


@operation("mrope_decode_ids")
def _mrope_decode_ids(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    out = mrope.decode_position_ids(inputs["deltas"], params["cache_position"], params["n_new"])
    return {"out": np.asarray(out, dtype=np.int64)}


@operation("vision_ids")
def _vision_ids(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    if params["convention"] == "qwen2-vl":
        out = vision_rope.qwen2_vl_ids(inputs["grids"], params["spatial_merge_size"])
    else:
        out = vision_rope.pixtral_ids(inputs["grids"])
    return {"out": np.asarray(out, dtype=np.int64)}


@operation("mla_softmax_scale")
def _mla_softmax_scale(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"value": np.array(mla.softmax_scale(mla_from_dict(params["mla"])), dtype=np.float64)}


# -- the cases -----------------------------------------------------------------------------------------


def _rotation_cases(
    name: str, spec, positions: Any, x_shape: Sequence[int], bug_class: str, description: str
):
    """One ``multiaxis_apply`` case per io dtype: ids ``multiaxis_apply-{name}-{fp64|...}``."""
    pos = np.asarray(positions, dtype=np.int64)
    pos = pos.reshape(pos.shape + (1,) * (len(x_shape) - 1 - (pos.ndim - 1)))  # (S, seq[, 1 per head axis])
    return dtype_cases(
        "multiaxis_apply",
        name,
        None,
        {"x": seeded_normal("multiaxis/" + name, x_shape), "positions": pos},
        activations=("x",),
        bug_class=bug_class,
        tolerance="rotation",
        params={"spec": spec_to_dict(spec)},
        description=description,
    )


def _image_prompt_ids(offset: int) -> np.ndarray:
    """``(3, 8)`` M-RoPE ids of ``text text <vs> 4 image tokens (grid (1, 4, 4), merge 2) text`` after
    ``offset`` tokens of earlier context (the oracle's ``get_rope_index``)."""
    ids = np.array([[11, 12, _VS, _IMG, _IMG, _IMG, _IMG, 13]])
    pos, _ = mrope.position_ids(ids, image_grid_thw=[[1, 4, 4]])
    return pos[:, 0, :] + offset


def mrope_rotation_cases() -> list[Case]:
    """``multiaxis_apply``: GLM-4.1V, Qwen2-VL, Qwen3-VL, partial rotary, and DeepSeek-V3's MLA rope part."""
    # Distinct t, h, w per image token, far into the context (positions 3000+) so wrong streams show.
    pos = _image_prompt_ids(3000)
    # Qwen3.5-style partial rotary: head 256, partial_rotary_factor 0.25 (64 channels), [11, 11, 10]
    # interleaved (maxtext #4616 rotated all 256).
    partial = mrope.mrope(
        RopeConfig(256, layout="half", rotary_dim=64, base=1e7), (11, 11, 10), interleaved=True
    )
    # DeepSeek-V3's rope part beyond 2x the original context (4096): YaRN with mscale / mscale_all_dim.
    mla_pos = np.array([[0, 1, 4095, 4096, 8193, 12000, 65535, 163839]])
    deepseek_v3 = mla.preset("deepseek-v3").spec
    # (name, spec, positions, x shape, bug class, description)
    rows = (
        ("glm4v_interleaved_d128", mrope.preset("glm-4.1v-9b").rope, pos, (8, 2, 128), "mrope_pairing_flag",
         "GLM-4.1V M-RoPE: interleaved (GPT-J) pairs, 64 of 128 channels, sections [8, 12, 12]"),
        ("qwen2vl_sections_d128", mrope.preset("qwen2-vl-7b").rope, pos, (8, 1, 128), "mrope_section_order",
         "Qwen2-VL M-RoPE: blocked sections [16, 24, 24] read T, H, W in that order"),
        ("qwen3vl_interleaved_d128", mrope.preset("qwen3-vl-8b").rope, pos, (8, 1, 128),
         "mrope_interleaved_vs_blocked",
         "Qwen3-VL interleaved M-RoPE: pairs cycle T, H, W within [24, 20, 20]"),
        ("partial_d256_r64", partial, pos[:, :4], (4, 1, 256), "mrope_partial_rotary",
         "M-RoPE, partial rotary (64 of 256 channels, Qwen3.5-style): channels 64: pass through"),
        ("deepseek_v3_rope_d64", deepseek_v3, mla_pos, (8, 64), "mla_rope_yarn",
         "DeepSeek-V3 MLA rope part (64 interleaved channels, YaRN factor 40) up to 163839"),
    )  # fmt: skip
    return [case for row in rows for case in _rotation_cases(*row)]


def _exact_case(
    op: str, name: str, inputs: dict[str, Any], params: dict, bug_class: str, description: str
) -> Case:
    """An exact (integer ids) case ``{op}-{name}``."""
    stored = {k: np.asarray(v) for k, v in inputs.items()}
    return make_case(
        f"{op}-{name}",
        op,
        None,
        stored,
        bug_class=bug_class,
        tolerance="exact",
        params=params,
        description=description,
    )


def _mrope_id_case(name: str, inputs: dict[str, Any], rule: str, bug_class: str, description: str) -> Case:
    params = {"rule": rule, "spatial_merge_size": 2, "tokens_per_second": 2.0}
    return _exact_case("mrope_position_ids", name, inputs, params, bug_class, description)


def mrope_id_cases() -> list[Case]:
    """``mrope_position_ids`` (video seconds, left padding); ``mrope_decode_ids`` after the padded batch."""
    # Qwen2.5-VL: an image (1, 4, 4) and videos (3, 4, 4) at 0.75 s and (2, 4, 4) at 2.0 s per grid step:
    # t ids trunc(k * s * 2) = 0, 1, 3 and 0, 4 (t = k would give 0, 1, 2 and 0, 1).
    row = [11, _VS] + [_IMG] * 4 + [12, _VS] + [_VID] * 12 + [13, 14, _VS] + [_VID] * 8 + [15]
    video = {
        "input_ids": np.array([row], dtype=np.int64),
        "image_grid_thw": np.array([[1, 4, 4]], dtype=np.int64),
        "video_grid_thw": np.array([[3, 4, 4], [2, 4, 4]], dtype=np.int64),
        "second_per_grid_ts": np.array([0.75, 2.0]),
    }
    desc = "Qwen2.5-VL: video t ids trunc(k * second_per_grid_ts[v] * tokens_per_second)"
    cases = [_mrope_id_case("qwen2_5_vl_video_seconds", video, "qwen2.5-vl", "mrope_temporal_scaling", desc)]
    # Left padding: row 0 holds an image of grid (1, 4, 6) (6 tokens), row 1 is left-padded by 3 and holds a
    # (1, 4, 4) image; ids are computed on the unmasked tokens, padded slots get 1.
    pad = 0
    ids = np.array(
        [
            [21, _VS] + [_IMG] * 6 + [22, 23, 24],
            [pad, pad, pad, 31, _VS] + [_IMG] * 4 + [32, 33],
        ],
        dtype=np.int64,
    )
    mask = (np.arange(11)[None, :] >= np.array([[0], [3]])).astype(np.int64)
    grids = np.array([[1, 4, 6], [1, 4, 4]], dtype=np.int64)
    padded = {"input_ids": ids, "image_grid_thw": grids, "attention_mask": mask}
    desc = "Qwen2-VL batch of 2 with left padding: ids and deltas from the unmasked tokens"
    cases.append(_mrope_id_case("qwen2_vl_left_padding", padded, "qwen2-vl", "mrope_left_padding", desc))
    text = np.array([[pad, pad, 41, 42, 43, 44], [51, 52, 53, 54, 55, 56]], dtype=np.int64)
    tmask = (np.arange(6)[None, :] >= np.array([[2], [0]])).astype(np.int64)
    desc = "text-only left-padded batch: cumsum(mask) - 1, padded slots 1, deltas max + 1 - seq"
    text_inputs = {"input_ids": text, "attention_mask": tmask}
    cases.append(_mrope_id_case("text_left_padding", text_inputs, "qwen2-vl", "mrope_left_padding", desc))
    _, deltas = mrope.position_ids(ids, image_grid_thw=grids, attention_mask=mask)
    desc = "decoding after the left-padded image batch: cache_position + j + deltas[b]"
    for cache_position, n_new in ((11, 1), (14, 3)):
        name = f"left_padding_c{cache_position}_n{n_new}"
        params = {"cache_position": cache_position, "n_new": n_new}
        inputs = {"deltas": np.asarray(deltas, dtype=np.int64)}
        cases.append(_exact_case("mrope_decode_ids", name, inputs, params, "mrope_decode_deltas", desc))
    return cases


def vision_and_mla_cases() -> list[Case]:
    """``vision_ids`` (Qwen2-VL, Pixtral); ``mla_softmax_scale`` of the MLA presets and one without YaRN."""
    desc = "Qwen2-VL ViT (row, col) ids: 2x2 merge windows in row-major order, frames repeated"
    grids = {"grids": np.array([[1, 4, 6], [2, 4, 4]], dtype=np.int64)}
    params = {"convention": "qwen2-vl", "spatial_merge_size": 2}
    cases = [_exact_case("vision_ids", "qwen2_vl_merge2", grids, params, "vision_merge_window_order", desc)]
    desc = "Pixtral (row, col) ids: row-major per image (meshgrid indexing='ij')"
    grids = {"grids": np.array([[3, 4], [2, 5]], dtype=np.int64)}
    params = {"convention": "pixtral", "spatial_merge_size": 1}
    cases.append(_exact_case("vision_ids", "pixtral", grids, params, "vision_merge_window_order", desc))
    configs = [mla.preset(n) for n in mla.preset_names()]
    configs.append(mla.MLAConfig("no-yarn", 128, 64, 128, RopeConfig(64, layout="interleaved"), None))
    desc = "qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2 (HF DeepseekV3Attention)"
    cases.extend(mla_scale_case(cfg.name, cfg, "mla_second_mscale", desc) for cfg in configs)
    return cases


def mla_scale_case(name: str, cfg: Any, bug_class: str, description: str) -> Case:
    """The ``mla_softmax_scale`` case of one MLA config (no inputs; the scale is a scalar)."""
    return make_case(
        f"mla_softmax_scale-{name}",
        "mla_softmax_scale",
        None,
        {},
        bug_class=bug_class,
        tolerance="scale",
        params={"mla": mla_to_dict(cfg)},
        description=description,
    )


def multiaxis_cases() -> list[Case]:
    """Every multi-axis case, in manifest order."""
    return mrope_rotation_cases() + mrope_id_cases() + vision_and_mla_cases()


# -- realistic grids (issue 29): vision rotation, video ids of GLM-4V and Qwen3-VL, wide M-RoPE streams ----


def vision_rotation_cases() -> list[Case]:
    """``multiaxis_apply`` with Pixtral's 2D spec on a non-square 12 x 16 patch grid (rows 0..11, columns
    0..15): 16 patches, every row and column band, so each axis's frequencies show."""
    ids = vision_rope.pixtral_ids([[12, 16]])
    picked = [r * 16 + c for r in (0, 4, 7, 11) for c in (0, 5, 10, 15)]
    desc = (
        "Pixtral-12B vision RoPE (head 64) on a 12 x 16 patch grid: rows take the even entries f_0, f_2, .. "
        "of the table, columns the odd ones (models/pixtral/modeling_pixtral.py)"
    )
    spec = vision_rope.preset("pixtral-12b-vision")
    return _rotation_cases(
        "pixtral_grid12x16_d64", spec, ids[:, picked], (16, 1, 64), "vision_rotation", desc
    )


def _glm4v_video_row() -> tuple[list[int], list[list[int]], list[list[int]]]:
    """GLM-4.1V: text, an image of grid (1, 8, 8), text, a video of grid (3, 8, 12) whose 3 temporal
    patches are separate runs (``<|begin_of_image|>`` frame ``<|end_of_image|>`` timestamp), text."""
    img, v0, v1 = mrope.GLM4V_IMAGE_TOKEN_ID, mrope.GLM4V_VIDEO_START_TOKEN_ID, mrope.GLM4V_VIDEO_END_TOKEN_ID
    begin, end = 151339, 151340  # <|begin_of_image|>, <|end_of_image|>: text to the id rule
    row = [21, 22, begin] + [img] * 16 + [end, 23, v0]
    for k in range(3):
        row += [begin] + [img] * 24 + [end, 30 + k, 40 + k]  # a frame, then its timestamp tokens
    return row + [v1, 24, 25], [[1, 8, 8]], [[3, 8, 12]]


def _qwen3vl_video_row() -> tuple[list[int], list[list[int]], list[list[int]]]:
    """Qwen3-VL: text, an image of grid (1, 8, 8), text, a video of grid (3, 8, 12) sent as 3 frames, each
    ``<t seconds> <|vision_start|> frame <|vision_end|>`` (the processor's timestamps), text."""
    row = [21, _VS] + [_IMG] * 16 + [_VE, 22]
    for k in range(3):
        row += [30 + k, 40 + k, _VS] + [_VID] * 24 + [_VE]
    return row + [23, 24], [[1, 8, 8]], [[3, 8, 12]]


def mrope_video_id_cases() -> list[Case]:
    """``mrope_position_ids`` of multi-frame videos under GLM-4V and Qwen3-VL: every frame is its own run
    whose temporal id is its start (time is carried by the timestamp tokens), not the frame index."""
    cases = []
    for rule, build, what in (
        ("glm4v", _glm4v_video_row, "GLM-4.1V (Glm4vModel.get_rope_index): each temporal patch of a video "
         "is its own group with t offset 0"),
        ("qwen3-vl", _qwen3vl_video_row, "Qwen3-VL (Qwen3VLModel.get_rope_index): video_grid_thw split "
         "into t frames of (1, h, w), each with t offset 0"),
    ):  # fmt: skip
        row, image, video = build()
        inputs = {
            "input_ids": np.array([row], dtype=np.int64),
            "image_grid_thw": np.array(image, dtype=np.int64),
            "video_grid_thw": np.array(video, dtype=np.int64),
        }
        name = rule.replace("-", "").replace(".", "_") + "_video_3_frames"
        desc = f"{what}; 3 frames of 4 x 6 tokens"
        cases.append(_mrope_id_case(name, inputs, rule, "mrope_video_ids", desc))
    return cases


#: Token indices of :func:`_chunk_ids` kept in the wide-stream cases: a text token, three corners of the
#: first image and two of the second, corners of the first two video frames (h and w up to 13 and 19 above
#: t), the chunk's last token.
_CHUNK_PICK = (2, 23, 264, 283, 295, 328, 350, 423, 446, 511)


def _chunk_ids(offset: int) -> np.ndarray:
    """``(3, 512)`` Qwen2-VL ids of the first 512-token prefill chunk of ``text <image 1x28x40> text
    <image 1x12x16> text <video 3x16x24> text`` after ``offset`` tokens (merge 2: 14 x 20, 6 x 8 and
    3 x 8 x 12 tokens): the chunk ends inside the video's second frame, so the height and width ids of its
    last tokens exceed every temporal id in the chunk."""
    row = [11, 12, 13, _VS] + [_IMG] * 280 + [_VE, 14, 15, _VS] + [_IMG] * 48 + [_VE, 16, _VS]
    row += [_VID] * 288 + [_VE, 17, 18]
    pos, _ = mrope.position_ids(
        np.array([row]), image_grid_thw=[[1, 28, 40], [1, 12, 16]], video_grid_thw=[[3, 16, 24]]
    )
    return pos[:, 0, :512] + offset


def mrope_wide_stream_cases() -> list[Case]:
    """``multiaxis_apply`` on realistic grids: two images (28 x 40 and 12 x 16 patches) and a 3-frame
    video, so the three streams differ by up to 19 and a stream mix-up fails at bf16 by a clear factor."""
    pos = _chunk_ids(2000)[:, list(_CHUNK_PICK)]
    rows = (
        ("qwen2vl_chunk_grids_d128", mrope.preset("qwen2-vl-7b").rope,
         "Qwen2-VL blocked [16, 24, 24]"),
        ("qwen3vl_chunk_grids_d128", mrope.preset("qwen3-vl-8b").rope,
         "Qwen3-VL interleaved [24, 20, 20]"),
    )  # fmt: skip
    out = []
    for name, spec, what in rows:
        desc = (
            f"{what}: 10 tokens of a 512-token prefill chunk with images of 28 x 40 and 12 x 16 patches and "
            "a 3-frame video; h and w ids up to 19 above t, the chunk ends inside the video"
        )
        out += _rotation_cases(name, spec, pos, (len(_CHUNK_PICK), 1, 128), "mrope_spatial_extent", desc)
    return out


def multiaxis_realistic_cases() -> list[Case]:
    """The multi-axis cases on realistic grids (after every earlier family in the manifest)."""
    return vision_rotation_cases() + mrope_video_id_cases() + mrope_wide_stream_cases()
