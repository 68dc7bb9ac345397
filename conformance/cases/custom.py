"""Custom golden sets (``rope-ref golden generate --preset / --hf-config``): tables and rotations of a
user's own model settings and shapes, at precision-revealing positions by default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rope_ref.case import Case

from .common import IO_DTYPES, activation_cases, as_positions, config_dict, table_cases

__all__ = ["CUSTOM_OPS", "revealing_positions", "custom_cases", "family_cases"]

#: Ops ``rope-ref golden generate --preset/--hf-config`` can write.
CUSTOM_OPS = ("inv_freq", "attention_factor", "cos_sin", "apply", "apply_vjp")


def revealing_positions(cfg: Any, count: int) -> np.ndarray:
    """``count`` sorted positions that expose precision and switching bugs, most revealing first.

    0 (exact), 257 (first integer bf16 cannot hold), 2049 (fp16), 4097, the model's original context L0
    (``original_max_position`` of its scaling, else 8192) at L0 - 1, L0, L0 + 1 (length switches), 1,
    and the other neighbours of 256/2048/4096. Beyond those, consecutive positions after 2 L0 + 1.
    """
    l0 = int(getattr(getattr(cfg, "scaling", None), "original_max_position", None) or 8192)
    ranked = [0, 257, 2049, 4097, l0 - 1, l0, l0 + 1, 1, 256, 2048, 4096, 255, 2047, 4095, 2 * l0 + 1]
    chosen: list[int] = []
    for p in ranked:
        if p >= 0 and p not in chosen:
            chosen.append(p)
    extra = 2 * l0 + 2
    while len(chosen) < count:
        chosen.append(extra)
        extra += 1
    return np.array(sorted(chosen[:count]), dtype=np.int64)


def custom_cases(
    cfg: Any,
    *,
    shape: Sequence[int] | None = None,
    positions: Any = None,
    io_dtype: str = "float32",
    ops: Sequence[str] = CUSTOM_OPS,
    name: str = "custom",
) -> list[Case]:
    """Cases for one RopeConfig: tables at ``positions`` and apply/apply_vjp on x of ``shape`` (B, S, H, D).

    ``shape`` defaults to ``(1, 8, 2, head_dim)``; ``positions`` (length S) default to precision-revealing
    ones (:func:`revealing_positions`: 257, 2049, 4097 and around the model's original context) and are
    stored as ``(S, 1)`` so that they broadcast against ``x.shape[:-1] = (B, S, H)``. Case ids are
    ``{op}-{name}[-{dtype}]``: pass the model's name so that sets for different models can be merged.
    """
    config = config_dict(cfg)
    if shape is None:
        shape = (1, 8, 2, config["head_dim"])
    shape = tuple(int(s) for s in shape)
    if len(shape) != 4 or min(shape) < 1:
        raise ValueError(f"shape must be four positive integers B,S,H,D, got {shape}")
    if shape[3] != config["head_dim"]:
        raise ValueError(f"shape's D ({shape[3]}) must equal the config's head_dim ({config['head_dim']})")
    pos = revealing_positions(cfg, shape[1]) if positions is None else np.asarray(positions)
    if pos.ndim != 1 or pos.shape[0] != shape[1]:
        raise ValueError(
            f"positions must list S={shape[1]} values (one per sequence index), got shape {pos.shape}"
        )
    if io_dtype not in IO_DTYPES:
        raise ValueError(f"io_dtype must be one of {IO_DTYPES}, got {io_dtype!r}")
    unknown = [op for op in ops if op not in CUSTOM_OPS]
    if unknown or not ops:
        raise ValueError(f"ops must be a non-empty subset of {CUSTOM_OPS}, got {list(ops)}")
    desc = f"{name}: {config}"
    cases: list[Case] = []
    table_ops = [op for op in ops if op in ("inv_freq", "attention_factor", "cos_sin")]
    if table_ops:
        cases += table_cases(name, config, bug_class="custom", description=desc, positions=pos, ops=table_ops)
    for op in ops:
        if op in ("apply", "apply_vjp"):
            cases += activation_cases(
                name,
                op,
                config,
                shape,
                as_positions(pos)[:, None],
                axes="bshd",
                bug_class="custom",
                description=desc,
                io_dtypes=(io_dtype,),
            )
    return cases


def _stream_positions(spec: Any, seq: int) -> np.ndarray:
    """``(streams, seq)`` ids for a multi-axis spec: revealing positions, rotated per stream so the
    streams differ at every token (a stream read in the wrong order shows)."""
    first = revealing_positions(spec.tables[0], seq)
    return np.stack([np.roll(first, k) for k in range(max(spec.streams) + 1)])


def family_cases(
    family: str, model: Any, *, name: str, io_dtype: str = "float32", seq: int = 8, ops=CUSTOM_OPS
) -> list[Case]:
    """Cases for a model of any oracle family (``rope_ref.hf_config.model_family``): the 1D tables and
    rotations of :func:`custom_cases` (``rope``; ``layers``: one set per distinct layer RoPE), or the
    ``multiaxis_apply`` rotation of the model's multi-axis spec (``mrope``, ``vision``, ``chatglm-2d``,
    ``mla``'s rope part; ``mla`` adds its ``mla_softmax_scale``) at ``seq`` tokens of two heads."""
    from .multiaxis import _rotation_cases, mla_scale_case

    if family == "rope":
        return custom_cases(model, shape=(1, seq, 2, model.head_dim), io_dtype=io_dtype, ops=ops, name=name)
    if family == "layers":
        first: dict[Any, int] = {}
        for i, cfg in enumerate(model.ropes):
            if cfg is not None and cfg not in first:
                first[cfg] = i
        return [
            case
            for cfg, i in first.items()
            for case in custom_cases(
                cfg, shape=(1, seq, 2, cfg.head_dim), io_dtype=io_dtype, ops=ops, name=f"{name}-layer{i}"
            )
        ]
    specs = {
        "mrope": lambda m: m.rope,
        "mla": lambda m: m.spec,
        "vision": lambda m: m,
        "chatglm-2d": lambda m: m,
    }
    if family not in specs:
        raise ValueError(f"unknown model family {family!r}; expected rope, layers or one of {sorted(specs)}")
    if io_dtype not in IO_DTYPES:
        raise ValueError(f"io_dtype must be one of {IO_DTYPES}, got {io_dtype!r}")
    spec = specs[family](model)
    desc = f"{name}: {family} rotation of {spec!r}"
    pos = _stream_positions(spec, seq)
    rotations = _rotation_cases(name, spec, pos, (seq, 2, spec.head_dim), "custom", desc)
    cases = [c for c in rotations if c.io_dtype == io_dtype]
    if family == "mla":
        desc = f"{name}: qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2"
        cases.append(mla_scale_case(name, model, "custom", desc))
    return cases
