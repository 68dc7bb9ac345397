"""ChatGLM-6B: 2D position/block ids (``chatglm_position_ids``), the ids of incremental decoding
(``chatglm_next_position_ids``) and the 2D rotation (``chatglm_apply_2d``), also its released fp16
arithmetic."""

from __future__ import annotations

import numpy as np

from rope_ref import chatglm
from rope_ref.case import Case

from .common import dtype_cases, make_case, quantize, seeded_normal
from .operations import operation

__all__ = ["chatglm_cases", "chatglm_incremental_cases"]

#: The token ids ChatGLM-6B's id rules look for.
TOKEN_PARAMS = {
    "bos_token_id": chatglm.BOS_TOKEN_ID,
    "mask_token_id": chatglm.MASK_TOKEN_ID,
    "gmask_token_id": chatglm.GMASK_TOKEN_ID,
}


@operation("chatglm_position_ids")
def _position_ids(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": np.asarray(chatglm.position_ids(inputs["input_ids"], **params), dtype=np.int64)}


@operation("chatglm_next_position_ids")
def _next_position_ids(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": np.asarray(chatglm.next_position_ids(inputs["input_ids"], **params), dtype=np.int64)}


@operation("chatglm_apply_2d")
def _apply_2d(config: None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    out = chatglm.apply_2d(inputs["x"], inputs["position_ids"], inputs["block_position_ids"], **params)
    return {"out": np.asarray(out, dtype=np.float64)}


def _chatglm_ids() -> np.ndarray:
    """Three left-padded ChatGLM-6B prompts ending in [gMASK]/[MASK] <sop>, then generated tokens."""
    pad, g, m, bos = 3, chatglm.GMASK_TOKEN_ID, chatglm.MASK_TOKEN_ID, chatglm.BOS_TOKEN_ID
    return np.array(
        [
            [5, 6, 7, 8, 9, 10, g, bos, 20, 21, 22, 23],
            [pad, pad, pad, 11, 12, g, bos, 30, 31, 32, 33, 34],
            [pad, 40, 41, m, 42, 43, bos, 50, 51, 52, 53, 54],
        ],
        dtype=np.int64,
    )


def _chatglm_mixed_ids() -> np.ndarray:
    """Left-padded rows during decoding: [MASK] and [gMASK] in one row (both orders), ragged padding."""
    pad, g, m, bos = 3, chatglm.GMASK_TOKEN_ID, chatglm.MASK_TOKEN_ID, chatglm.BOS_TOKEN_ID
    return np.array(
        [
            [pad, pad, 11, m, 12, g, bos, 30, 31, 32],
            [pad, pad, pad, pad, 13, g, 14, m, bos, 40],
            [15, 16, m, 17, 18, 19, bos, 50, 51, 52],
            [pad, 21, 22, 23, g, bos, 60, 61, 62, 63],
        ],
        dtype=np.int64,
    )


def _ids_case(op: str, name: str, ids: np.ndarray, two_d: bool, bug_class: str, description: str) -> Case:
    """An exact ids case ``{op}-{name}`` on ``ids`` (2D or 1D position encoding)."""
    params = {**TOKEN_PARAMS, "position_encoding_2d": two_d}
    return make_case(
        f"{op}-{name}",
        op,
        None,
        {"input_ids": ids},
        bug_class=bug_class,
        tolerance="exact",
        params=params,
        description=description,
    )


def chatglm_cases() -> list[Case]:
    """Ids of a left-padded batch, the 2D rotation in every io dtype, and the fp16 emulation."""
    ids = _chatglm_ids()
    desc = "left-padded batch with [gMASK] and [MASK] rows; every row has its own ids"
    cases = [
        _ids_case("chatglm_position_ids", f"batch3_{dim}", ids, two_d, "chatglm_position_ids", desc)
        for two_d, dim in ((True, "2d"), (False, "1d"))
    ]
    pid = chatglm.position_ids(ids, **TOKEN_PARAMS)
    inputs = {
        "x": seeded_normal("chatglm_2d", (3, 12, 2, 32)),
        "position_ids": pid[:, 0, :, None],
        "block_position_ids": pid[:, 1, :, None],
    }
    cases += dtype_cases(
        "chatglm_apply_2d",
        "batch3_d32",
        None,
        inputs,
        activations=("x",),
        bug_class="chatglm_2d",
        tolerance="rotation",
        params={"base": 10000.0, "precision": "float64"},
        description="x (B,S,H,D): first half rotated by position ids, second half by block ids",
    )
    emu_pos = np.array([0, 1, 100, 2047, 2048, 2049, 2051, 4000])
    emu_x = quantize(seeded_normal("chatglm_fp16", (8, 2, 128)), "float16")
    cases.append(
        make_case(
            "chatglm_apply_2d-fp16_emulation_d128",
            "chatglm_apply_2d",
            None,
            {
                "x": emu_x,
                "position_ids": emu_pos[:, None],
                "block_position_ids": (emu_pos[::-1] // 3)[:, None],
            },
            bug_class="chatglm_fp16_emulation",
            tolerance="emulation",
            params={"base": 10000.0, "precision": "chatglm-6b-fp16"},
            description="released ChatGLM-6B fp16 arithmetic (inv_freq, positions, angles, table, rotation)",
        )
    )
    return cases


def chatglm_incremental_cases() -> list[Case]:
    """ChatGLM-6B ids under padding with both mask tokens, and ``next_position_ids`` (decoding)."""
    ids = _chatglm_mixed_ids()
    cases = []
    for two_d, dim in ((True, "2d"), (False, "1d")):
        desc = "left padding, [MASK] and [gMASK] in one row (either order): [gMASK] wins"
        cases.append(
            _ids_case("chatglm_position_ids", f"mixed_masks_{dim}", ids, two_d, "chatglm_position_ids", desc)
        )
        for steps in (0, 3):
            grown = (
                ids if steps == 0 else np.concatenate([ids, 70 + np.arange(4 * steps).reshape(4, steps)], 1)
            )
            desc = (
                f"ids of the newest token under KV-cached decoding, {steps} tokens after the "
                "prompt's first generated one: [mask_position, seq_len - context_length]"
            )
            name = f"mixed_masks_{dim}_step{steps}"
            cases.append(
                _ids_case("chatglm_next_position_ids", name, grown, two_d, "chatglm_incremental", desc)
            )
    return cases
