"""Small conformance cases and toy backends shared by the runner and tolerance tests (expected values
written out by hand or from the oracle)."""

from __future__ import annotations

import numpy as np
from broken_backends import round_bf16 as _round_bf16
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.runner import Runner

import rope_ref

CFG8 = {"head_dim": 8, "layout": "half", "base": 10000.0}


def apply_case(cid: str, io_dtype: str | None = "float64", seed: int = 3) -> Case:
    x = np.random.default_rng(seed).standard_normal((3, 8))
    pos = np.array([0.0, 2.0, 9.0])
    case = Case(cid, "apply", dict(CFG8), {"x": x, "positions": pos}, {}, "layout", "rotation", {}, io_dtype)
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


def table_case(cid: str, op: str = "inv_freq") -> Case:
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    # inv_freq of head_dim 4, base 10000: 10000^0 = 1 and 10000^(-1/2) = 0.01 (exact decimal inputs).
    expected = {"inv_freq": np.array([1.0, 0.01]), "attention_factor": np.array(1.0)}[op]
    return Case(cid, op, cfg, {}, {"out": expected}, "tables", "table")


def run(backend, cases, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 30.0), spec="spec-x").run(cases, **kw)


class Doubles(OracleBackend):
    """Every ``apply`` output doubled: fails every apply case."""

    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len) * 2.0


class F32Glm(OracleBackend):
    """fp16-emulation ChatGLM rotation returned in float64 by a float32-I/O backend: allowed (emulation)."""

    precision = PrecisionPolicy("float32", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)


def _glm_case(cid: str, precision: str) -> Case:
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32).astype(np.float64)
    pos, blk = np.array([0, 2, 2]), np.array([0, 0, 1])
    inputs = {"x": x, "position_ids": pos, "block_position_ids": blk}
    rule = "emulation" if precision == "chatglm-6b-fp16" else "rotation"
    params = {"base": 10000.0, "precision": precision}
    case = Case(cid, "chatglm_apply_2d", None, inputs, {}, "chatglm", rule, params, "float32")
    case.expected["out"] = rope_ref.chatglm.apply_2d(x, pos, blk, precision=precision)
    return case


def rotation_case(cid: str, io: str = "float64", seed: int = 1) -> Case:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8))
    if io == "bfloat16":
        x = _round_bf16(x).astype(np.float64)
    pos = np.array([0.0, 1.0, 5.0, 300.0])
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    case = Case(
        cid, "apply", cfg, {"x": x, "positions": pos}, {}, "layout", "rotation", {"seq_len": None}, io
    )
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


def run_one(backend, case: Case, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 30.0), spec="test").run([case], **kw)


def _rot_case(
    cid: str, x: np.ndarray, positions: np.ndarray, factor: float | None, rotary_dim: int = 8
) -> Case:
    """half layout, head_dim 8, rotary_dim pairs (i, i + rotary_dim / 2); expected by eq. 34 in float64."""
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0, "rotary_dim": rotary_dim}
    if factor is not None:
        cfg["scaling"] = {
            "rope_type": "yarn",
            "factor": 2.0,
            "original_max_position_embeddings": 64,
            "attention_factor": factor,
        }
    a_factor = 1.0 if factor is None else factor
    n = rotary_dim // 2
    out = x.copy()
    for row, m in enumerate(positions):
        for i in range(n):
            # YaRN with L0 = 64 keeps these pairs' frequencies only at position 0, the rows judged here.
            w = 10000.0 ** (-2.0 * i / rotary_dim)
            c, s = a_factor * np.cos(m * w), a_factor * np.sin(m * w)
            out[row, i] = x[row, i] * c - x[row, i + n] * s
            out[row, i + n] = x[row, i + n] * c + x[row, i] * s
    return Case(cid, "apply", cfg, {"x": x, "positions": positions}, {"out": out}, "layout", "rotation")
