"""The multi-axis specs every backend's multi-axis tests run: the issue's presets, one wrong spec per bug
class of issue 20 (what a buggy port rotates by), and independent positions per stream."""

from __future__ import annotations

import math

import numpy as np

from rope_ref import RopeConfig, mrope, multiaxis, vision_rope


def presets() -> dict[str, multiaxis.MultiAxisRope]:
    """The issue's presets: blocked / interleaved M-RoPE, GLM-4V (interleaved pairs, partial), 2D ones."""
    return {
        "qwen2-vl": mrope.preset("qwen2-vl-7b").rope,
        "qwen3-vl": mrope.preset("qwen3-vl-8b").rope,
        "glm-4.1v": mrope.preset("glm-4.1v-9b").rope,
        "chatglm-6b": multiaxis.chatglm_2d(128),
        "qwen2-vl-vision": vision_rope.qwen2_vl(80),
        "pixtral": vision_rope.pixtral(64),
    }


def broken_specs() -> dict[str, tuple[str, multiaxis.MultiAxisRope]]:
    """One wrong spec per bug class of issue 20: (the preset it breaks, what a buggy port rotates by)."""
    glm = mrope.preset("glm-4.1v-9b").rope
    q2, q3 = RopeConfig(128, layout="half", base=1e6), RopeConfig(128, layout="half", base=5e6)
    return {
        # vllm #49290: NeoX pairing hard-coded in the M-RoPE kernel, is_neox_style=False ignored.
        "pairing-ignored": ("glm-4.1v", multiaxis.MultiAxisRope(
            glm.head_dim, layout="half", streams=glm.streams, tables=glm.tables)),
        # sections applied in the wrong order (width, height, temporal).
        "sections-reversed": ("qwen2-vl", mrope.mrope(q2, (24, 24, 16))),
        # Qwen3-VL's interleaved sections read as blocked (vLLM PR #40680).
        "interleaved-as-blocked": ("qwen3-vl", mrope.mrope(q3, (24, 20, 20))),
        # maxtext #4616: partial_rotary_factor dropped, the whole head rotated.
        "partial-rotary-dropped": ("glm-4.1v", mrope.mrope(
            RopeConfig(128, layout="interleaved", base=10000.0), (16, 24, 24))),
    }  # fmt: skip


def positions(rng, spec, shape) -> np.ndarray:
    """Independent integer positions per stream (image-like tokens), the first token at 0."""
    pos = rng.integers(0, 4096, size=(spec.n_streams,) + shape)
    pos.reshape(spec.n_streams, -1)[:, 0] = 0
    return pos


def pair_geometry(x: np.ndarray, pos, spec: multiaxis.MultiAxisRope, seq_len=None):
    """What a per-pair bound needs: frequencies phi, the positions m each pair turns by (broadcast on x's
    leading axes), each pair's radius |amp| |(x_a, x_b)|, and the pair channels a, b."""
    phi, amp = spec.pair_frequencies(seq_len)
    lead = x.shape[:-1]
    m = np.moveaxis(np.asarray(pos, dtype=np.float64), 0, -1)[..., list(spec.streams)]
    m = np.broadcast_to(m.reshape((1,) * (len(lead) - (m.ndim - 1)) + m.shape), lead + (spec.n_pairs,))
    a, b = spec.pair_indices()
    return phi, m, np.abs(amp) * np.hypot(x[..., a], x[..., b]), a, b


def per_element(shape: tuple[int, ...], a, b, pair: np.ndarray) -> np.ndarray:
    """A per-pair bound on both channels of each pair; 0 (exact) on pass-through channels."""
    tol = np.zeros(shape)
    tol[..., a], tol[..., b] = pair, pair
    return tol


def ratio(got, want: np.ndarray, tol: np.ndarray) -> float:
    """max |got - want| / tol over rotated channels; inf if a pass-through channel differs or got is not
    finite. <= 1 passes."""
    err = np.abs(np.asarray(got, dtype=np.float64) - want)
    exact = tol == 0
    if np.any(err[exact] != 0) or not np.all(np.isfinite(got)):
        return math.inf
    return float(np.max(err[~exact] / tol[~exact]))
