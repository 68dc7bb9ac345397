"""Broken ports for the realistic-grid and fused-wrapper families (``docs/catalogue.md``, "Realistic grids
and fused wrappers"): one deviation each from :class:`broken_backends.Float32Backend`, modelled on a bug
that the catalogue's earlier cases let through. ``targets`` names the one bug class each must fail, and
it must fail no other (``tests/conformance/test_cases_realistic_grids.py``).
"""

from __future__ import annotations

import numpy as np
from broken_backends import Float32Backend

from rope_ref import mrope
from rope_ref.multiaxis import MultiAxisRope


class VisionFrequencyHalves(Float32Backend):
    """Pixtral's 2D rotation with rows on the first half of the frequency table (f_0 .. f_{q-1}) and
    columns on the second half, instead of rows on the even entries and columns on the odd ones."""

    targets = ("vision_rotation",)

    def _ma_spec(self, spec):
        if spec.n_streams != 2:
            return spec
        return MultiAxisRope(
            spec.head_dim,
            layout=spec.layout,
            streams=spec.streams,
            tables=spec.tables,
            freq_index=tuple(sorted(spec.freq_index)),
            blocks=spec.blocks,
        )


def _frame_runs(tokens: list[int], rule: str, frames_per_video: list[int]) -> list[tuple[int, int, int]]:
    """``(start, end, k)`` of every video frame run of an unpadded row: frame ``k`` of its video."""
    if rule == "glm4v":
        image, inside = mrope.GLM4V_IMAGE_TOKEN_ID, False
        is_frame = []
        for tok in tokens:
            inside = {mrope.GLM4V_VIDEO_START_TOKEN_ID: True, mrope.GLM4V_VIDEO_END_TOKEN_ID: False}.get(
                tok, inside
            )
            is_frame.append(inside and tok == image)
    else:
        is_frame = [tok == mrope.QWEN_VIDEO_TOKEN_ID for tok in tokens]
    runs, i = [], 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and is_frame[j] == is_frame[i]:
            j += 1
        if is_frame[i]:
            runs.append((i, j))
        i = j
    frame_ids = [k for t in frames_per_video for k in range(t)]
    return [(a, b, k) for (a, b), k in zip(runs, frame_ids, strict=False)]


class VideoFrameIndexAsTime(Float32Backend):
    """GLM-4V / Qwen3-VL video frames given Qwen2-VL's temporal ids: frame k of a video gets t = start + k
    instead of start + 0 (later segments start after the larger maximum, as the port's own loop does)."""

    targets = ("mrope_video_ids",)

    def mrope_position_ids(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw):
        pos, deltas = super().mrope_position_ids(
            input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw
        )
        if kw["rule"] not in ("glm4v", "qwen3-vl") or video_grid_thw is None:
            return pos, deltas
        pos, deltas = np.array(pos, copy=True), np.array(deltas, copy=True)
        ids = np.asarray(input_ids)
        keep = np.ones(ids.shape, dtype=bool) if attention_mask is None else np.asarray(attention_mask) > 0
        frames = [int(t) for t in np.asarray(video_grid_thw)[:, 0]]
        for b in range(ids.shape[0]):
            row = pos[:, b, keep[b]]
            runs = _frame_runs(ids[b][keep[b]].tolist(), kw["rule"], frames)
            cuts = sorted({0, row.shape[1], *(c for a, e, _ in runs for c in (a, e))})
            k_at = {a: k for a, _, k in runs}
            out, old_max, new_max = row.copy(), -1, -1
            for a, e in zip(cuts[:-1], cuts[1:], strict=True):
                out[:, a:e] += new_max - old_max
                out[0, a:e] += k_at.get(a, 0)
                old_max, new_max = max(old_max, int(row[:, a:e].max())), max(new_max, int(out[:, a:e].max()))
            pos[:, b, keep[b]] = out
            deltas[b, 0] += new_max - old_max
        return pos, deltas


class TableSizedByTemporalStream(Float32Backend):
    """M-RoPE cos/sin cache sized by the temporal (text) stream, max(t) + 1 rows: height and width ids past
    its end are clamped to the last row (``jnp.take``'s default mode, a masked Triton load)."""

    targets = ("mrope_spatial_extent",)

    def multiaxis_apply(self, x, positions, spec):
        pos = np.array(positions, copy=True)
        if spec.n_streams == 3:
            pos[1:] = np.minimum(pos[1:], pos[0].max())
        return super().multiaxis_apply(x, pos, spec)


class FusedInverseDropped(Float32Backend):
    """The fused q/k and packed-qkv wrappers do not pass ``inverse`` on to the rotation: both de-rotations
    rotate forward (``apply_axes`` is right)."""

    targets = ("inverse_fused",)

    def apply_qk(self, q, k, cfg, *, inverse=False, **kw):
        return super().apply_qk(q, k, cfg, **kw)

    def apply_qkv(self, qkv, cfg, *, inverse=False, **kw):
        return super().apply_qkv(qkv, cfg, **kw)


class KernelSeqLenIgnored(Float32Backend):
    """The kernel-shape calls drop ``seq_len``: a chunk of a long sequence gets the dynamic-NTK / LongRoPE
    table of its own last position (``apply`` and ``cos_sin`` honour it)."""

    targets = ("kernel_seq_len",)

    def _kernel_rotate(self, x, pos, cfg, seq_len, inverse):
        return super()._kernel_rotate(x, pos, cfg, None, inverse)


class InverseFactorFromDefaults(Float32Backend):
    """The de-rotation rebuilds YaRN from ``factor`` and the original context only: ``attention_factor``,
    ``mscale`` and ``mscale_all_dim`` dropped, so A = 0.1 ln(factor) + 1 on the inverse path."""

    targets = ("inverse_attention_factor",)

    def _kernel_rotate(self, x, pos, cfg, seq_len, inverse):
        if inverse and self._rope_type(cfg) == "yarn":
            from rope_ref.scaling import scaling_from_hf

            drop = ("attention_factor", "mscale", "mscale_all_dim")
            hf = {k: v for k, v in cfg.scaling.to_hf().items() if k not in drop}
            cfg = cfg.replace(scaling=scaling_from_hf(hf))
        return super()._kernel_rotate(x, pos, cfg, seq_len, inverse)


#: Each fails its own family and no other.
BROKEN_GRIDS_AND_WRAPPERS = (
    VisionFrequencyHalves,
    VideoFrameIndexAsTime,
    TableSizedByTemporalStream,
    FusedInverseDropped,
    KernelSeqLenIgnored,
    InverseFactorFromDefaults,
)
