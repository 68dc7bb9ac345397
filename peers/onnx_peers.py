"""ONNX's ``RotaryEmbedding`` as a peer: ``onnxruntime``, ``onnxruntime:contrib``, ``onnx-reference``.

What is called:

* ``onnxruntime``: a one-node model with the opset-23 ``RotaryEmbedding`` op (``onnx/defs/nn/defs.cc``),
  run by ``onnxruntime.InferenceSession`` on the CPU execution provider;
* ``onnxruntime:contrib``: the same through ``com.microsoft.RotaryEmbedding``
  (``onnxruntime/core/graph/contrib_ops/bert_defs.cc``; CPU kernel
  ``onnxruntime/contrib_ops/cpu/bert/rotary_embedding.cc``), inputs ordered
  ``(input, position_ids, cos_cache, sin_cache)``;
* ``onnx-reference``: the opset-23 model run by ``onnx.reference.ReferenceEvaluator``
  (``onnx/reference/ops/op_rotary_embedding.py``).

ONNX has no frequency operation: the cos/sin caches are *inputs*. The adapter fills them from the
oracle (``rope_ref.cos_sin`` in float64, rounded to the op's dtype T), one row per distinct position,
with ``position_ids`` indexing those rows. Passes of ``apply`` therefore check the op's gather, layout,
partial rotary and arithmetic, never its tables: they are marked "tables from the oracle".

Kernel shapes (issue 16): ``apply_axes`` is one node on the case's own layout: ``bhsd`` as the op's 4D
``(B, H, S, D)`` input, ``bshd`` (and ``sbhd`` transposed, ``thd`` as one batch row) as its 3D
``(B, S, H * D)`` input with ``num_heads=H``; ``position_ids`` the case's ``(B, S)`` ids (an offset becomes
``offset + arange(S)``, except that the contrib op takes a scalar offset natively as a one-element
``position_ids``; ``cu_seqlens`` per-token ids), indexing an oracle cos/sin cache of ``max(id) + 1`` rows
(``-sin`` for the inverse). ``apply_qk``: the node on q and on k (an exported model's two nodes). No
packed-qkv form; out of place. Tables from the oracle, as for ``apply``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._glue import Peer, integer_positions, tokens
from ._kernel_glue import KernelShapes

__all__ = ["OnnxPeer", "make_backend", "available"]

_DIST = {"onnxruntime": "onnxruntime", "onnxruntime:contrib": "onnxruntime", "onnx-reference": "onnx"}
_NO_TABLES = "ONNX has no frequency operation: inv_freq, attention factor and cos/sin are the caller's inputs"


def available(flavour: str = "onnxruntime", **_: Any) -> tuple[bool, str]:
    try:
        import onnx  # noqa: F401

        if flavour != "onnx-reference":
            import onnxruntime  # noqa: F401
    except ImportError as exc:
        return False, f"{_DIST[flavour]} is not installed ({exc.name})"
    return True, ""


def _np_dtype(io: str):
    if io == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(io)


class OnnxPeer(KernelShapes, Peer):
    """One-node ONNX models of the rotary op; tables from the oracle."""

    oracle_tables = frozenset({"apply", "apply_axes", "apply_qk", "round_trip"})
    table_dtype = "float64"
    kernel_cannot = {"apply_qkv": "ONNX RotaryEmbedding takes one tensor (no packed-qkv form)"}
    cannot = {
        "inv_freq": _NO_TABLES,
        "attention_factor": _NO_TABLES,
        "cos_sin": _NO_TABLES,
        "apply_vjp": "ONNX RotaryEmbedding is an inference op (no gradient)",
    }

    def __init__(self, flavour: str = "onnxruntime", precision: str | None = None) -> None:
        self.flavour = flavour
        self.peer = flavour
        self.distribution = _DIST[flavour]
        self.precisions = ("fp32", "fp16") if flavour != "onnx-reference" else ("fp32", "fp16", "bf16")
        self.notes = (
            "cos/sin caches from the oracle (float64, rounded to T); positions index the cache rows",
            "opset 23 RotaryEmbedding"
            if flavour != "onnxruntime:contrib"
            else "com.microsoft.RotaryEmbedding",
        )
        if flavour != "onnx-reference":  # checked with 1.31.1: no bf16 kernel for the op's body (Mul-14)
            self.notes += ("bf16 not run: onnxruntime's CPU provider has no bfloat16 kernel for the op",)
        self._sessions: dict[tuple, Any] = {}
        super().__init__(precision)

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        a = np.array(array, copy=True)
        return a.astype(_np_dtype(dtype)) if dtype is not None else a

    def to_numpy(self, array: Any) -> np.ndarray:
        a = np.asarray(array)
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a

    # -- the model ----------------------------------------------------------------------------------------
    def _model(self, d: int, rotary_dim: int, interleaved: bool):
        import onnx
        from onnx import TensorProto, helper

        elem = {
            "float32": TensorProto.FLOAT,
            "float16": TensorProto.FLOAT16,
            "bfloat16": TensorProto.BFLOAT16,
        }
        t = elem[self.io]
        rd = 0 if rotary_dim == d else rotary_dim
        half = rotary_dim // 2
        if self.flavour == "onnxruntime:contrib":
            x = helper.make_tensor_value_info("X", t, [1, "N", d])  # (batch, seq, hidden), num_heads=1
            node = helper.make_node(
                "RotaryEmbedding",
                ["X", "pos", "cos", "sin"],
                ["Y"],
                domain="com.microsoft",
                interleaved=int(interleaved),
                rotary_embedding_dim=rd,
                num_heads=1,
            )
            y = helper.make_tensor_value_info("Y", t, [1, "N", d])
            opsets = [helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
        else:
            x = helper.make_tensor_value_info("X", t, [1, 1, "N", d])  # (batch, heads, seq, head)
            node = helper.make_node(
                "RotaryEmbedding",
                ["X", "cos", "sin", "pos"],
                ["Y"],
                interleaved=int(interleaved),
                rotary_embedding_dim=rd,
            )
            y = helper.make_tensor_value_info("Y", t, [1, 1, "N", d])
            opsets = [helper.make_opsetid("", 23)]
        inputs = [
            x,
            helper.make_tensor_value_info("cos", t, ["U", half]),
            helper.make_tensor_value_info("sin", t, ["U", half]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [1, "N"]),
        ]
        graph = helper.make_graph([node], "rope", inputs, [y])
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 10
        onnx.checker.check_model(model) if self.flavour != "onnxruntime:contrib" else None
        return model

    def _run(self, key: tuple, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self._session(key, lambda: self._model(*key)).run(None, feeds)[0]

    def _session(self, key: tuple, build: Any) -> Any:
        """The inference session of the model ``build()`` makes, built once per ``key``."""
        if key not in self._sessions:
            model = build()
            if self.flavour == "onnx-reference":
                from onnx.reference import ReferenceEvaluator

                self._sessions[key] = ReferenceEvaluator(model)
            else:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 1
                self._sessions[key] = ort.InferenceSession(
                    model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
                )
        return self._sessions[key]

    def _apply(self, x, positions, cfg, seq_len):
        import rope_ref

        lead, pos = tokens(x.shape, np.asarray(positions))
        d, rd = cfg.head_dim, cfg.rotary_dim
        uniq, index = np.unique(pos, return_inverse=True)
        cos, sin = rope_ref.cos_sin(uniq.astype(np.float64), cfg, seq_len=seq_len)
        t = _np_dtype(self.io)
        if cos.shape[0] < pos.size:  # ORT wants at least seq_len cache rows; the padding is never indexed
            pad = np.ones((pos.size - cos.shape[0], cos.shape[1]))
            cos, sin = np.concatenate([cos, pad]), np.concatenate([sin, 0 * pad])
        feeds = {
            "X": x.reshape((1, -1, d) if self.flavour == "onnxruntime:contrib" else (1, 1, -1, d)),
            "cos": np.ascontiguousarray(cos.astype(t)),
            "sin": np.ascontiguousarray(sin.astype(t)),
            "pos": index.astype(np.int64).reshape(1, -1),
        }
        out = self._run((d, rd, cfg.layout == "interleaved"), feeds)
        return np.asarray(out).reshape(*lead, d)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _kernel_model(self, d: int, rotary_dim: int, interleaved: bool, rank: int, heads: int, pos_rank: int):
        import onnx
        from onnx import TensorProto, helper

        t = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[
            self.io
        ]
        shape = ["B", heads, "S", d] if rank == 4 else ["B", "S", heads * d]
        attrs: dict[str, int] = {
            "interleaved": int(interleaved),
            "rotary_embedding_dim": 0 if rotary_dim == d else rotary_dim,
        }
        if (
            rank == 3 or self.flavour == "onnxruntime:contrib"
        ):  # the contrib kernel wants it with a 4D input too
            attrs["num_heads"] = heads
        pos = helper.make_tensor_value_info("pos", TensorProto.INT64, [1] if pos_rank == 1 else ["B", "S"])
        caches = [helper.make_tensor_value_info(n, t, ["U", rotary_dim // 2]) for n in ("cos", "sin")]
        x = helper.make_tensor_value_info("X", t, shape)
        if self.flavour == "onnxruntime:contrib":
            node = helper.make_node(
                "RotaryEmbedding", ["X", "pos", "cos", "sin"], ["Y"], domain="com.microsoft", **attrs
            )
            opsets = [helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
        else:
            node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], **attrs)
            opsets = [helper.make_opsetid("", 23)]
        graph = helper.make_graph(
            [node], "rope", [x, pos, *caches], [helper.make_tensor_value_info("Y", t, shape)]
        )
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 10
        if self.flavour != "onnxruntime:contrib":
            onnx.checker.check_model(model)
        return model

    def _k_axes(self, x, cfg, axes, p, inverse):
        import rope_ref

        d, rd = cfg.head_dim, cfg.rotary_dim
        a = np.asarray(x)
        grid = p.grid if p.grid.ndim == 2 else p.grid[None]
        ids = integer_positions(grid, self.peer)
        if axes == "bhsd":
            feed, rank, heads = a, 4, a.shape[1]
        else:
            bshd = a if axes == "bshd" else a.transpose(1, 0, 2, 3) if axes == "sbhd" else a[None]
            feed, rank, heads = bshd.reshape(bshd.shape[0], bshd.shape[1], -1), 3, bshd.shape[2]
        scalar = self.flavour == "onnxruntime:contrib" and isinstance(p.offset, int)
        pos = np.array([p.offset], dtype=np.int64) if scalar else ids.astype(np.int64)
        rows = int(ids.max()) + 1 if ids.size else 1
        cos, sin = rope_ref.cos_sin(np.arange(rows, dtype=np.float64), cfg, seq_len=p.seq_len)
        if (
            cos.shape[0] < grid.shape[1]
        ):  # ORT wants at least seq_len cache rows; the padding is never indexed
            pad = np.ones((grid.shape[1] - cos.shape[0], cos.shape[1]))
            cos, sin = np.concatenate([cos, pad]), np.concatenate([sin, 0 * pad])
        dt = _np_dtype(self.io)
        feeds = {
            "X": np.ascontiguousarray(feed),
            "cos": np.ascontiguousarray(cos.astype(dt)),
            "sin": np.ascontiguousarray((-sin if inverse else sin).astype(dt)),
            "pos": pos,
        }
        key = ("kernel", d, rd, cfg.layout == "interleaved", rank, heads, pos.ndim)
        y = np.asarray(self._session(key, lambda: self._kernel_model(*key[1:])).run(None, feeds)[0])
        if axes == "bhsd":
            return y
        y = y.reshape(y.shape[0], y.shape[1], heads, d)
        return y if axes == "bshd" else y.transpose(1, 0, 2, 3) if axes == "sbhd" else y[0]


def make_backend(precision: str | None = None, flavour: str = "onnxruntime") -> OnnxPeer:
    return OnnxPeer(flavour, precision)
