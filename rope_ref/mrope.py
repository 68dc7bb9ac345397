"""M-RoPE (multimodal RoPE): Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4V / GLM-4.1V, as multi-axis presets.

Every token has three positions (temporal, height, width); text tokens have three equal ones. The
rotary pairs are split among the three streams by ``mrope_section`` (see :func:`section_streams`), and
the rotation is :func:`rope_ref.multiaxis.apply`. Text-only input equals plain 1D RoPE bit for bit.

Rules follow the original releases, read in HF ``transformers`` (v4.49.0 for Qwen2.5-VL's temporal ids,
v4.57.6 for the others; ``docs/multimodal.md`` records where later versions differ):
``models/qwen2_vl/modeling_qwen2_vl.py`` (``apply_multimodal_rotary_pos_emb``,
``Qwen2VLModel.get_rope_index``, ``Qwen2VLModel.forward``),
``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` (``get_rope_index``),
``models/qwen3_vl/modeling_qwen3_vl.py`` (``Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope``,
``get_rope_index``) and ``models/glm4v/modeling_glm4v.py`` (``apply_multimodal_rotary_pos_emb``,
``get_rope_index``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._arrays import check_input_ids, check_int, check_real, to_numpy
from .config import RopeConfig
from .hf_config import config_dict, rope_config_from_hf
from .multiaxis import MultiAxisRope
from .multiaxis import apply as _multiaxis_apply
from .preset_table import PresetTable

__all__ = [
    "RULES",
    "MRopeModel",
    "section_streams",
    "mrope",
    "apply",
    "position_ids",
    "decode_position_ids",
    "preset",
    "preset_names",
    "from_hf",
]

#: Position-id rules: which released ``get_rope_index`` to reproduce.
RULES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm4v")

#: Qwen2-VL / Qwen2.5-VL / Qwen3-VL ``config.json``: ``image_token_id``, ``video_token_id``,
#: ``vision_start_token_id``.
QWEN_IMAGE_TOKEN_ID = 151655
QWEN_VIDEO_TOKEN_ID = 151656
QWEN_VISION_START_TOKEN_ID = 151652
#: GLM-4.1V (``Glm4vConfig`` defaults, transformers v4.57.6 ``configuration_glm4v.py``): ``image_token_id``,
#: ``video_start_token_id``, ``video_end_token_id``. GLM-4V has no separate video token: image tokens
#: between video start and end are video frames.
GLM4V_IMAGE_TOKEN_ID = 151343
GLM4V_VIDEO_START_TOKEN_ID = 151341
GLM4V_VIDEO_END_TOKEN_ID = 151342


# -- the rotation --------------------------------------------------------------------------------


def section_streams(
    mrope_section: Sequence[int], n_pairs: int, *, interleaved: bool = False
) -> tuple[int, ...]:
    """Stream (0 = temporal, 1 = height, 2 = width) of each of ``n_pairs`` rotary pairs.

    * blocked (Qwen2-VL, Qwen2.5-VL, GLM-4V): pairs ``[0, t)`` temporal, ``[t, t+h)`` height, the rest width.
      ``apply_multimodal_rotary_pos_emb`` splits the doubled ``cos`` into ``mrope_section * 2`` chunks
      and takes chunk ``j`` from stream ``j % 3``: on pair indices that is the blocked assignment.
    * interleaved (Qwen3-VL, ``apply_interleaved_mrope``): pair ``i`` is height if ``i % 3 == 1`` and
      ``i < 3 h``, width if ``i % 3 == 2`` and ``i < 3 w``, else temporal (``T H W T H W ... T T``).

    ``mrope_section`` must be three non-negative ints summing to ``n_pairs``; interleaved sections must
    also give each stream exactly its section's count. Otherwise ``ValueError`` naming ``mrope_section``.
    """
    if isinstance(mrope_section, (str, bytes)) or not isinstance(mrope_section, (Sequence, np.ndarray)):
        raise TypeError(f"mrope_section must be a sequence of 3 ints, got {type(mrope_section).__name__}")
    sec = [check_int(v, f"mrope_section[{i}]") for i, v in enumerate(mrope_section)]
    n_pairs = check_int(n_pairs, "n_pairs", minimum=1)
    if len(sec) != 3 or min(sec) < 0:
        raise ValueError(f"mrope_section must be 3 non-negative ints (t, h, w), got {list(mrope_section)}")
    if sum(sec) != n_pairs:
        raise ValueError(
            f"mrope_section {sec} sums to {sum(sec)} but there are {n_pairs} rotary pairs (rotary_dim / 2); "
            "the sections must cover every pair exactly once"
        )
    if not interleaved:
        return (0,) * sec[0] + (1,) * sec[1] + (2,) * sec[2]
    streams = []
    for i in range(n_pairs):
        if i % 3 == 1 and i < 3 * sec[1]:
            streams.append(1)
        elif i % 3 == 2 and i < 3 * sec[2]:
            streams.append(2)
        else:
            streams.append(0)
    counts = [streams.count(s) for s in range(3)]
    if counts != sec:
        raise ValueError(
            f"interleaved mrope_section {sec} gives streams of {counts} pairs over {n_pairs} pairs; "
            "it needs 3*h and 3*w to fit in the pairs"
        )
    return tuple(streams)


def mrope(cfg: RopeConfig, mrope_section: Sequence[int], *, interleaved: bool = False) -> MultiAxisRope:
    """The M-RoPE of ``cfg`` (layout, partial rotary, base, scaling all from ``cfg``) as a 3-stream spec.

    Pair ``i`` keeps ``cfg``'s frequency ``theta_i`` and takes its position from stream
    ``section_streams(...)[i]``. Qwen2-VL: ``RopeConfig(128, layout="half", base=1e6)``, ``[16, 24, 24]``.
    GLM-4V: ``RopeConfig(128, layout="interleaved", rotary_dim=64)``, ``[8, 12, 12]`` (its
    ``apply_multimodal_rotary_pos_emb`` keeps the first half of the sectioned table and repeats each
    entry twice, so pair ``(2i, 2i+1)`` gets ``theta_i`` from the blocked stream of pair ``i``).
    """
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    if not isinstance(interleaved, (bool, np.bool_)):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    streams = section_streams(mrope_section, cfg.n_pairs, interleaved=bool(interleaved))
    return MultiAxisRope(cfg.head_dim, layout=cfg.layout, streams=streams, tables=(cfg, cfg, cfg))


def apply(x: Any, position_ids: Any, spec: MultiAxisRope, *, seq_len: int | None = None) -> np.ndarray:
    """Rotate ``x`` (``(..., head_dim)``) by 3D ``position_ids`` (``(3, ...)``, from :func:`position_ids`).

    The position axes after the first broadcast against ``x.shape[:-1]``; for ``x`` of shape
    ``(batch, heads, seq, head_dim)`` pass ``position_ids[:, :, None, :]``. See
    :func:`rope_ref.multiaxis.apply`.
    """
    if not isinstance(spec, MultiAxisRope) or spec.n_streams != 3:
        raise TypeError("spec must be a 3-stream MultiAxisRope (rope_ref.mrope.mrope or a preset)")
    return _multiaxis_apply(x, position_ids, spec, seq_len=seq_len)


# -- position ids ----------------------------------------------------------------------------------


def _check_mask(attention_mask: Any, shape: tuple[int, int]) -> np.ndarray | None:
    if attention_mask is None:
        return None
    mask = to_numpy(attention_mask, "attention_mask")
    if mask.shape != shape:
        raise ValueError(f"attention_mask must have the shape of input_ids {shape}, got {mask.shape}")
    if mask.dtype.kind not in "biu" or not np.all((mask == 0) | (mask == 1)):
        raise ValueError("attention_mask must hold only 0 and 1")
    return mask.astype(bool)


def _check_grid(grid: Any, name: str, merge: int) -> np.ndarray | None:
    if grid is None:
        return None
    g = to_numpy(grid, name)
    if g.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of (t, h, w) rows, got dtype {g.dtype}")
    if g.ndim != 2 or g.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), rows (t, h, w), got shape {g.shape}")
    g = g.astype(np.int64)
    for k, (t, h, w) in enumerate(g.tolist()):
        if t < 1 or h < 1 or w < 1:
            raise ValueError(f"{name}[{k}] = {(t, h, w)} must be positive")
        if h % merge or w % merge:
            raise ValueError(
                f"{name}[{k}] = {(t, h, w)}: h and w must be divisible by spatial_merge_size={merge}"
            )
    return g


@dataclass
class _Grids:
    """The grids of a batch, consumed in order across rows as the released code does."""

    image: np.ndarray | None
    video: np.ndarray | None
    merge: int
    image_index: int = 0
    video_index: int = 0

    def take(self, kind: str, where: str) -> tuple[int, int, int, int]:
        """Next ``(grid row index, t, h / merge, w / merge)`` of ``kind`` ("image" or "video")."""
        grid = self.image if kind == "image" else self.video
        index = self.image_index if kind == "image" else self.video_index
        name = f"{kind}_grid_thw"
        if grid is None or index >= len(grid):
            have = 0 if grid is None else len(grid)
            raise ValueError(
                f"{where} has a {kind} token run but {name} has no row left for it ({have} rows)"
            )
        if kind == "image":
            self.image_index += 1
        else:
            self.video_index += 1
        t, h, w = (int(v) for v in grid[index])
        return index, t, h // self.merge, w // self.merge


def _run_length(tokens: list[int], start: int, token: int) -> int:
    n = 0
    while start + n < len(tokens) and tokens[start + n] == token:
        n += 1
    return n


def _grid_ids(t_ids: np.ndarray, gh: int, gw: int) -> np.ndarray:
    """``(3, len(t_ids) * gh * gw)``: t outermost, then h, then w (row-major over the merged grid)."""
    t = np.repeat(t_ids, gh * gw)
    h = np.tile(np.repeat(np.arange(gh), gw), len(t_ids))
    w = np.tile(np.arange(gw), len(t_ids) * gh)
    return np.stack([t, h, w]).astype(np.int64)


def _qwen2_5_time_ids(gt: int, second_per_grid_t: float | None, tokens_per_second: float) -> np.ndarray:
    """``(arange(gt) * second_per_grid_t * tokens_per_second).long()`` as the v4.49.0 release computes it.

    The released product is float32 (``second_per_grid_ts`` is a float32 tensor; an image passes the int
    0, a video without ``second_per_grid_ts`` the float 1.0); ``.long()`` truncates toward zero.
    """
    if second_per_grid_t is None:  # image: second_per_grid_t = 0
        return np.zeros(gt, dtype=np.int64)
    k = np.arange(gt, dtype=np.float32)
    prod = (k * np.float32(second_per_grid_t)) * np.float32(tokens_per_second)
    return np.trunc(prod).astype(np.int64)


def _qwen_row(
    tokens: list[int],
    grids: _Grids,
    rule: str,
    ids: dict[str, int],
    seconds: Sequence[float] | None,
    tokens_per_second: float,
    where: str,
) -> np.ndarray:
    """3D ids of one unpadded row under Qwen2-VL / Qwen2.5-VL / Qwen3-VL ``get_rope_index``."""
    image_tok, video_tok, start_tok = ids["image"], ids["video"], ids["vision_start"]
    n = len(tokens)
    if n and tokens[-1] == start_tok:
        raise ValueError(f"{where} ends with a vision_start token and no vision token after it")
    firsts = [tokens[i + 1] for i in range(n - 1) if tokens[i] == start_tok]
    remain = {"image": firsts.count(image_tok), "video": firsts.count(video_tok)}
    parts: list[np.ndarray] = []
    st = 0

    def next_start() -> int:
        return int(parts[-1].max()) + 1 if parts else 0

    def find(tok: int) -> int:
        try:
            return tokens.index(tok, st)
        except ValueError:
            return n + 1

    for _ in range(remain["image"] + remain["video"]):
        found = {}
        for kind, tok in (("image", image_tok), ("video", video_tok)):
            found[kind] = find(tok) if remain[kind] > 0 else n + 1
        kind = "image" if found["image"] < found["video"] else "video"
        ed = found[kind]
        if ed > n:
            break
        index, gt, gh, gw = grids.take(kind, where)
        remain[kind] -= 1
        count = gt * gh * gw
        run = _run_length(tokens, ed, image_tok if kind == "image" else video_tok)
        if run != count:
            raise ValueError(
                f"{where}: {kind} run at index {ed} has {run} tokens but {kind}_grid_thw[{index}] needs "
                f"t*(h/m)*(w/m) = {count} (spatial_merge_size m = {grids.merge})"
            )
        st_idx = next_start()
        text_len = ed - st
        parts.append(np.tile(np.arange(text_len, dtype=np.int64) + st_idx, (3, 1)))
        if rule == "qwen2.5-vl":
            sec = None if kind == "image" else (1.0 if seconds is None else _second(seconds, index))
            t_ids = _qwen2_5_time_ids(gt, sec, tokens_per_second)
        else:
            t_ids = np.arange(gt, dtype=np.int64)
        parts.append(_grid_ids(t_ids, gh, gw) + text_len + st_idx)
        st = ed + count
    for kind, tok in (("image", image_tok), ("video", video_tok)):
        if find(tok) <= n:
            raise ValueError(
                f"{where} has a {kind} token at index {find(tok)} outside any "
                f"<vision_start>-introduced {kind} run matching {kind}_grid_thw"
            )
    if st < n:
        parts.append(np.tile(np.arange(n - st, dtype=np.int64) + next_start(), (3, 1)))
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), dtype=np.int64)


def _second(seconds: Sequence[float], index: int) -> float:
    if index >= len(seconds):
        raise ValueError(f"second_per_grid_ts has {len(seconds)} entries, video {index} needs one")
    return seconds[index]


def _glm4v_row(tokens: list[int], grids: _Grids, ids: dict[str, int], where: str) -> np.ndarray:
    """3D ids of one unpadded row under GLM-4V ``Glm4vModel.get_rope_index``.

    Image tokens between ``video_start`` and ``video_end`` are video frames, the others images; maximal
    runs of one type form groups. Every group starts at (maximum id so far) + 1. An image group takes
    the next image grid (ids ``(t, h, w)`` offsets); a video group is one temporal patch of the current
    video (t id 0, ids ``(0, h, w)``), and after ``t`` groups the next video grid is used.
    """
    image_tok, v_start, v_end = ids["image"], ids["video_start"], ids["video_end"]
    types = []
    in_video = False
    for tok in tokens:
        if tok == v_start:
            in_video = True
        elif tok == v_end:
            in_video = False
        types.append(("video" if in_video else "image") if tok == image_tok else "text")
    parts: list[np.ndarray] = []
    frames_done = 0
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and types[j] == types[i]:
            j += 1
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        kind = types[i]
        if kind == "text":
            parts.append(np.tile(np.arange(j - i, dtype=np.int64) + st_idx, (3, 1)))
        else:
            if kind == "image":
                index, gt, gh, gw = grids.take("image", where)
            else:
                if frames_done == 0:
                    grids.take("video", where)
                index = grids.video_index - 1
                gt = int(grids.video[index][0])
                gh, gw = int(grids.video[index][1]) // grids.merge, int(grids.video[index][2]) // grids.merge
            count = (gt if kind == "image" else 1) * gh * gw
            if j - i != count:
                raise ValueError(
                    f"{where}: {kind} run at index {i} has {j - i} tokens but {kind}_grid_thw[{index}] "
                    f"needs {count} (spatial_merge_size {grids.merge})"
                )
            if kind == "image":
                parts.append(_grid_ids(np.arange(gt, dtype=np.int64), gh, gw) + st_idx)
            else:
                parts.append(_grid_ids(np.zeros(1, dtype=np.int64), gh, gw) + st_idx)
                frames_done += 1
                if frames_done >= gt:
                    frames_done = 0
        i = j
    if frames_done:
        raise ValueError(
            f"{where}: video_grid_thw[{grids.video_index - 1}] has more temporal patches than runs"
        )
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), dtype=np.int64)


def position_ids(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    *,
    rule: str = "qwen2-vl",
    spatial_merge_size: int = 2,
    second_per_grid_ts: Any = None,
    tokens_per_second: float = 2.0,
    image_token_id: int | None = None,
    video_token_id: int = QWEN_VIDEO_TOKEN_ID,
    vision_start_token_id: int = QWEN_VISION_START_TOKEN_ID,
    video_start_token_id: int = GLM4V_VIDEO_START_TOKEN_ID,
    video_end_token_id: int = GLM4V_VIDEO_END_TOKEN_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """``(position_ids, mrope_position_deltas)``: int64, shapes ``(3, batch, seq)`` and ``(batch, 1)``.

    Reproduces the released ``get_rope_index`` of ``rule`` (one of :data:`RULES`):

    * text gets ``(p, p, p)``; a vision run of grid ``(t, h, w)`` (merged to ``h/m x w/m``) preceded by
      ``L`` text tokens since the last segment gets ``start + L + (t_id, h_id, w_id)`` in t, h, w
      row-major order, ``start`` = (maximum id of all streams so far) + 1;
    * ``"qwen2.5-vl"``: a video's t id is ``trunc(k * second_per_grid_ts[v] * tokens_per_second)``
      (float32, as released; images get t id 0); ``"qwen3-vl"``: each video is split into ``t`` frames
      of grid ``(1, h, w)``, each frame its own ``<vision_start>`` run; ``"glm4v"``: see ``_glm4v_row``;
    * ``attention_mask`` (left padding): ids are computed on the unmasked tokens; masked slots get 1;
    * ``mrope_position_deltas[b] = max id of row b + 1 - seq`` (``seq`` counts padding);
    * with no grids at all: text-only rule, ``cumsum(mask) - 1`` (masked slots 1) or ``arange``.

    Grid rows are consumed in order across the batch. Unlike the released code, bad input raises
    ``ValueError`` naming the argument: ``h``/``w`` not divisible by ``spatial_merge_size``, a vision run
    whose length is not ``t*(h/m)*(w/m)``, a vision token with no grid row left, grid rows left over,
    a vision token outside a ``<vision_start>`` run, a fully masked row, or ids of the wrong shape.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    merge = check_int(spatial_merge_size, "spatial_merge_size", minimum=1)
    tps = check_real(tokens_per_second, "tokens_per_second")
    ids = check_input_ids(input_ids)
    batch, seq = ids.shape
    mask = _check_mask(attention_mask, ids.shape)
    image = _check_grid(image_grid_thw, "image_grid_thw", merge)
    video = _check_grid(video_grid_thw, "video_grid_thw", merge)
    seconds = None
    if second_per_grid_ts is not None:
        if rule != "qwen2.5-vl":
            raise ValueError(f"second_per_grid_ts is only used by rule 'qwen2.5-vl', got rule {rule!r}")
        sec = to_numpy(second_per_grid_ts, "second_per_grid_ts")
        if sec.ndim != 1 or sec.dtype.kind not in "iuf":
            raise ValueError(f"second_per_grid_ts must be a 1-D real array, got shape {sec.shape}")
        seconds = [float(v) for v in sec]
    if image_token_id is None:
        image_token_id = GLM4V_IMAGE_TOKEN_ID if rule == "glm4v" else QWEN_IMAGE_TOKEN_ID
    if rule == "glm4v":
        tok = {
            "image": check_int(image_token_id, "image_token_id"),
            "video_start": check_int(video_start_token_id, "video_start_token_id"),
            "video_end": check_int(video_end_token_id, "video_end_token_id"),
        }
        vision_tokens = (tok["image"],)
    else:
        tok = {
            "image": check_int(image_token_id, "image_token_id"),
            "video": check_int(video_token_id, "video_token_id"),
            "vision_start": check_int(vision_start_token_id, "vision_start_token_id"),
        }
        vision_tokens = (tok["image"], tok["video"])
    if rule == "qwen3-vl" and video is not None:
        video = np.repeat(video, video[:, 0], axis=0)
        video[:, 0] = 1
    keep = np.ones(ids.shape, dtype=bool) if mask is None else mask

    if image is None and video is None:
        for b in range(batch):
            hits = np.isin(ids[b][keep[b]], vision_tokens)
            if hits.any():
                raise ValueError(
                    f"input_ids row {b} has vision tokens but image_grid_thw and video_grid_thw are None"
                )
        if mask is None:
            pos = np.tile(np.arange(seq, dtype=np.int64), (3, batch, 1))
            return pos, np.zeros((batch, 1), dtype=np.int64)
        flat = np.cumsum(mask.astype(np.int64), axis=-1) - 1
        flat[~mask] = 1
        pos = np.tile(flat[None], (3, 1, 1))
        return pos, (flat.max(axis=-1, keepdims=True) + 1 - seq).astype(np.int64)

    grids = _Grids(image, video, merge)
    pos = np.ones((3, batch, seq), dtype=np.int64)
    deltas = np.zeros((batch, 1), dtype=np.int64)
    for b in range(batch):
        tokens = ids[b][keep[b]].tolist()
        if not tokens:
            raise ValueError(f"attention_mask row {b} masks every token")
        where = f"input_ids row {b}"
        if rule == "glm4v":
            row = _glm4v_row(tokens, grids, tok, where)
        else:
            row = _qwen_row(tokens, grids, rule, tok, seconds, tps, where)
        pos[:, b, keep[b]] = row
        deltas[b, 0] = int(row.max()) + 1 - seq
    for name, grid, used in (
        ("image_grid_thw", image, grids.image_index),
        ("video_grid_thw", video, grids.video_index),
    ):
        if grid is not None and used != len(grid):
            raise ValueError(f"{name} has {len(grid)} rows but input_ids use {used} of them")
    return pos, deltas


def decode_position_ids(mrope_position_deltas: Any, cache_position: int, n_new: int = 1) -> np.ndarray:
    """3D ids of ``n_new`` tokens decoded at cache slots ``cache_position ..``: shape ``(3, batch, n_new)``.

    ``Qwen2VLModel.forward`` after prefill: ``arange(n_new) + cache_position + rope_deltas`` in all three
    streams (generated tokens are text). ``cache_position`` counts padded slots, like ``seq`` in the deltas.
    """
    d = to_numpy(mrope_position_deltas, "mrope_position_deltas")
    if d.dtype.kind not in "iu" or d.ndim not in (1, 2) or (d.ndim == 2 and d.shape[1] != 1):
        raise ValueError(
            f"mrope_position_deltas must be integers of shape (batch, 1), got {d.shape} {d.dtype}"
        )
    start = check_int(cache_position, "cache_position", minimum=0)
    n_new = check_int(n_new, "n_new", minimum=1)
    d = d.reshape(-1, 1).astype(np.int64)
    row = np.arange(n_new, dtype=np.int64)[None, :] + start + d
    return np.tile(row[None], (3, 1, 1))


# -- presets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MRopeModel:
    """A released M-RoPE model: its rotation spec, its position-id rule and the rule's constants."""

    name: str
    rope: MultiAxisRope
    rule: str
    spatial_merge_size: int = 2
    tokens_per_second: float = 2.0
    doc: str = ""
    token_ids: tuple[tuple[str, int], ...] = ()

    def position_ids(
        self,
        input_ids: Any,
        image_grid_thw: Any = None,
        video_grid_thw: Any = None,
        attention_mask: Any = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`position_ids` with this model's rule, merge size, ``tokens_per_second`` and token ids."""
        kwargs.setdefault("spatial_merge_size", self.spatial_merge_size)
        for key, value in self.token_ids:
            kwargs.setdefault(key, value)
        if self.rule == "qwen2.5-vl":
            kwargs.setdefault("tokens_per_second", self.tokens_per_second)
        return position_ids(
            input_ids, image_grid_thw, video_grid_thw, attention_mask, rule=self.rule, **kwargs
        )

    def apply(self, x: Any, position_ids: Any, *, seq_len: int | None = None) -> np.ndarray:
        """:func:`apply` with this model's rotation."""
        return apply(x, position_ids, self.rope, seq_len=seq_len)


def _qwen2_vl_7b() -> MRopeModel:
    return MRopeModel(
        "qwen2-vl-7b",
        mrope(RopeConfig(128, layout="half", base=1e6), (16, 24, 24)),
        "qwen2-vl",
        doc="Qwen/Qwen2-VL-7B-Instruct config.json: hidden 3584 / 28 heads -> head 128, rope_theta 1e6, "
        "mrope_section [16, 24, 24], spatial_merge_size 2; half layout (rotate_half).",
    )


def _qwen2_5_vl_7b() -> MRopeModel:
    return MRopeModel(
        "qwen2.5-vl-7b",
        mrope(RopeConfig(128, layout="half", base=1e6), (16, 24, 24)),
        "qwen2.5-vl",
        tokens_per_second=2.0,
        doc="Qwen/Qwen2.5-VL-7B-Instruct config.json: head 128, rope_theta 1e6, mrope_section [16, 24, 24], "
        "vision_config tokens_per_second 2, spatial_merge_size 2; half layout.",
    )


def _qwen3_vl_8b() -> MRopeModel:
    return MRopeModel(
        "qwen3-vl-8b",
        mrope(RopeConfig(128, layout="half", base=5e6), (24, 20, 20), interleaved=True),
        "qwen3-vl",
        doc="Qwen/Qwen3-VL-8B-Instruct config.json: head_dim 128, rope_theta 5e6, rope_scaling "
        "{mrope_section [24, 20, 20], mrope_interleaved true}, spatial_merge_size 2; half layout.",
    )


def _glm_4_1v_9b() -> MRopeModel:
    return MRopeModel(
        "glm-4.1v-9b",
        mrope(RopeConfig(128, layout="interleaved", rotary_dim=64, base=10000.0), (8, 12, 12)),
        "glm4v",
        doc="THUDM/GLM-4.1V-9B-Thinking config.json: hidden 4096 / 32 heads -> head 128, "
        "partial_rotary_factor 0.5 (rotary 64), rope_theta 10000, mrope_section [8, 12, 12], "
        "spatial_merge_size 2; interleaved pairs (modeling_glm4v.py rotate_half_llm).",
    )


_PRESETS = {
    "qwen2-vl-7b": _qwen2_vl_7b,
    "qwen2.5-vl-7b": _qwen2_5_vl_7b,
    "qwen3-vl-8b": _qwen3_vl_8b,
    "glm-4.1v-9b": _glm_4_1v_9b,
}


_TABLE = PresetTable("M-RoPE", _PRESETS)
#: Names accepted by :func:`preset`, sorted.
preset_names = _TABLE.names


def preset(name: str) -> MRopeModel:
    """A released M-RoPE model by name (see :func:`preset_names`)."""
    return _TABLE.build(name)


#: ``model_type`` -> (position-id rule, pair layout, interleaved sections), as each modelling file fixes
#: them: Qwen2-VL / Qwen2.5-VL ``rotate_half`` with blocked sections; Qwen3-VL ``apply_interleaved_mrope``
#: (always, whatever ``mrope_interleaved`` says); GLM-4V ``rotate_half_llm`` (interleaved pairs).
_HF_TYPES = {
    "qwen2_vl": ("qwen2-vl", "half", False),
    "qwen2_5_vl": ("qwen2.5-vl", "half", False),
    "qwen3_vl": ("qwen3-vl", "half", True),
    "qwen3_vl_moe": ("qwen3-vl", "half", True),
    "glm4v": ("glm4v", "interleaved", False),
    "glm4v_moe": ("glm4v", "interleaved", False),
}
#: ``mrope_section`` the rotary falls back to when the config has none, by rule
#: (``config.rope_parameters.get("mrope_section", ...)``: ``models/qwen2_vl/modeling_qwen2_vl.py``
#: and qwen2_5_vl [16, 24, 24]; ``models/qwen3_vl/modeling_qwen3_vl.py`` and qwen3_vl_moe [24, 20, 20];
#: ``models/glm4v/modeling_glm4v.py`` and glm4v_moe [8, 12, 12]).
_DEFAULT_SECTIONS = {
    "qwen2-vl": [16, 24, 24],
    "qwen2.5-vl": [16, 24, 24],
    "qwen3-vl": [24, 20, 20],
    "glm4v": [8, 12, 12],
}
_TOKEN_KEYS = {
    "glm4v": ("image_token_id", "video_start_token_id", "video_end_token_id"),
    "qwen": ("image_token_id", "video_token_id", "vision_start_token_id"),
}


def from_hf(config: Any) -> MRopeModel:
    """The M-RoPE model of an HF config (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V families): a ``config.json``
    dict, a path to one, or a ``PretrainedConfig``-like object (:func:`rope_ref.hf_config.config_dict`).

    ``model_type`` picks the rule, the layout and blocked vs interleaved sections (see ``_HF_TYPES``).
    ``mrope_section`` comes from the (text config's) ``rope_scaling`` (required there, as transformers
    4.x indexed it) or ``rope_parameters`` (else the 5.x modelling file's fallback, ``_DEFAULT_SECTIONS``);
    a text sub-config (``"qwen2_vl_text"``) reads as its model. The
    remaining RoPE keys (``rope_theta``, ``head_dim``, ``partial_rotary_factor``, a scaling) go through
    :meth:`rope_ref.RopeConfig.from_hf` once the M-RoPE keys are removed (``"type": "mrope"`` is
    transformers' legacy spelling of the default type). ``vision_config.spatial_merge_size`` and
    ``tokens_per_second`` and the vision token ids are read when present.
    """
    config = config_dict(config)
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type.endswith("_text") and model_type[:-5] in _HF_TYPES:
        model_type = model_type[:-5]  # a text sub-config on its own (Qwen2VLTextConfig: "qwen2_vl_text")
    if model_type not in _HF_TYPES:
        raise ValueError(f"config model_type must be one of {sorted(_HF_TYPES)}, got {model_type!r}")
    rule, layout, interleaved = _HF_TYPES[model_type]
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else None
    holder = dict(text) if text is not None else dict(config)
    key = "rope_scaling" if isinstance(holder.get("rope_scaling"), Mapping) else "rope_parameters"
    rope = dict(holder.get(key) or {})
    if (
        "mrope_section" not in rope and key == "rope_scaling"
    ):  # transformers 4.x: rope_scaling["mrope_section"]
        raise ValueError(f"config has no mrope_section in its {key}; is this an M-RoPE model?")
    sections = rope.pop("mrope_section", None) or list(_DEFAULT_SECTIONS[rule])
    rope.pop("mrope_interleaved", None)
    for type_key in ("type", "rope_type"):
        if rope.get(type_key) == "mrope":
            rope[type_key] = "default"
    holder[key] = rope
    if text is not None:
        stripped = dict(config)
        stripped["text_config"] = holder
    else:
        stripped = holder
    cfg = rope_config_from_hf(stripped, layout=layout)
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), Mapping) else {}
    merge = check_int(vision.get("spatial_merge_size", 2), "vision_config.spatial_merge_size", minimum=1)
    tps = check_real(vision.get("tokens_per_second", 2.0), "vision_config.tokens_per_second")
    names = _TOKEN_KEYS["glm4v" if rule == "glm4v" else "qwen"]
    token_ids = tuple((n, check_int(config[n], n)) for n in names if config.get(n) is not None)
    return MRopeModel(
        str(config.get("_name_or_path", model_type)),
        mrope(cfg, sections, interleaved=interleaved),
        rule,
        spatial_merge_size=merge,
        tokens_per_second=tps,
        doc=f"from an HF config of model_type {model_type!r}",
        token_ids=token_ids,
    )
