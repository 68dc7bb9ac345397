"""Apple MLX as a peer: ``mlx`` (``mx.fast.rope``) and ``mlx-lm`` (``mlx_lm.models.rope_utils``).

What is called:

* ``mlx``: ``mlx.core.fast.rope(x, dims, traditional=..., base=..., scale=..., offset=...)`` (the fused
  kernel; ``traditional=True`` pairs ``(2i, 2i+1)``, ``False`` is the half layout, ``dims`` the rotary
  dim, ``scale`` multiplies positions, so linear scaling is ``scale = 1/factor``);
* ``mlx-lm``: ``rope_utils.initialize_rope(dims, base, traditional, scaling_config,
  max_position_embeddings)`` and the module it returns (``nn.RoPE``, ``DynamicNTKScalingRoPE``,
  ``Llama3RoPE``, ``YarnRoPE``, ``SuScaledRoPE``), called as ``rope(x, offset=...)``.

Both take positions as ``offset + arange(x.shape[-2])``: integer positions go through the prefill
emulation of ``_glue`` (one call over ``max(position) + 1`` rows, so ``DynamicNTKScalingRoPE`` sees the
sequence length it would in a real prefill) or, past the size cap, one decode call per distinct position
(``offset=position``). cos/sin are read with unit-vector probes. ``mlx-lm``'s ``inv_freq`` is
``1 / module._freqs`` where the module keeps one (Llama3, YaRN, LongRoPE), its attention factor
``YarnRoPE.mscale`` / ``SuScaledRoPE._scale``.

Kernel shapes (issue 16): ``apply_axes`` calls the rope on ``x`` laid out ``(B, H, S, D)`` (the sequence
second to last, as mlx-lm's attention does; ``bshd`` / ``sbhd`` as transposed views) with the case's
offset: an int, or for ``mlx`` a ``(B,)`` array of per-row offsets (``mx.fast.rope`` takes one offset per
batch row; ``mlx-lm``'s modules take an int, so per-row offsets are one call per row). ``(B, S)`` ids go
as offsets when each row counts up by one from its start (else unsupported: the library builds
``offset + arange``). ``thd``: one call per ``cu_seqlens`` sequence (or run of consecutive ids) with its
start as the offset, on the ``(H, L, D)`` view. ``apply_qk``: the rope on q and on k. Inverse: ``mlx``
passes ``scale=-scale`` (positions times -1); ``mlx-lm`` modules have no inverse. No packed qkv.

Precision: mlx's rope kernel evaluates angles and the rotation in float32 and rounds once to the
activation dtype; mlx has no float64 on its rope path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._glue import Peer, Unsupported, config_key, emulated_length, prefill_plan, probe_tables, tokens
from ._kernel_glue import KernelShapes, offset_rows, runs

__all__ = ["MlxPeer", "make_backend", "available"]


def available(flavour: str = "mlx", **_: Any) -> tuple[bool, str]:
    try:
        import mlx.core as mx

        mx.fast.rope  # noqa: B018
        if flavour == "mlx-lm":
            import mlx_lm.models.rope_utils  # noqa: F401
    except (ImportError, AttributeError, OSError) as exc:
        return False, f"{flavour} is not installed or has no CPU build here ({exc})"
    return True, ""


class MlxPeer(KernelShapes, Peer):
    precisions = ("fp32", "fp16", "bf16")
    compute_dtype = "float32"
    kernel_cannot = {"apply_qkv": "mlx's rope takes one tensor (no packed-qkv call)"}

    def __init__(self, flavour: str = "mlx", precision: str | None = None) -> None:
        self.flavour = flavour
        self.peer = flavour
        self.distribution = flavour
        self.cannot = {}
        if flavour == "mlx":
            self.cannot = {
                "inv_freq": "mx.fast.rope computes frequencies inside the kernel (no accessor)",
                "attention_factor": "mx.fast.rope has no attention factor",
            }
        self.notes = (
            "positions as offset + arange(seq): prefill emulation, decode per position past 2^23 elements",
            "cos/sin read with unit-vector probes",
        )
        super().__init__(precision)

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        import mlx.core as mx

        a = np.array(array, copy=True)
        if dtype is None:
            return a  # positions stay NumPy: they become offsets, not arrays
        return mx.array(a.astype(np.float32), dtype=getattr(mx, dtype))

    def to_numpy(self, array: Any) -> np.ndarray:
        import mlx.core as mx

        if isinstance(array, mx.array):
            if array.dtype == mx.bfloat16:
                array = array.astype(mx.float32)
            return np.array(array)
        return np.asarray(array)

    # -- the library's rope as a callable(x, offset) -----------------------------------------------------
    def _rope(self, cfg):
        key = config_key(cfg)
        if key in self._modules:
            return self._modules[key]
        s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        traditional = cfg.layout == "interleaved"
        if self.flavour == "mlx":
            import mlx.core as mx

            if s["rope_type"] not in ("default", "linear"):
                raise Unsupported(f"mx.fast.rope has no {s['rope_type']!r} scaling (only scale = 1/factor)")
            scale = 1.0 / float(s["factor"]) if s["rope_type"] == "linear" else 1.0

            def rope(x, offset=0):
                return mx.fast.rope(
                    x,
                    cfg.rotary_dim,
                    traditional=traditional,
                    base=float(cfg.base),
                    scale=scale,
                    offset=offset,
                )

        else:
            from mlx_lm.models.rope_utils import initialize_rope

            if s["rope_type"] == "ntk":
                raise Unsupported("mlx-lm has no static NTK-aware rope type")
            orig = s.get("original_max_position_embeddings")
            max_pos = int(orig or 4096)
            if s["rope_type"] in ("yarn", "longrope", "llama3") and orig:
                max_pos = int(round(orig * float(s.get("factor", 1.0))))
            rope = initialize_rope(
                cfg.rotary_dim,
                float(cfg.base),
                traditional,
                scaling_config=None if s["rope_type"] == "default" else s,
                max_position_embeddings=max_pos,
            )
        self._modules[key] = rope
        return rope

    def _inv_freq(self, cfg, seq_len):
        import mlx.core as mx

        freqs = getattr(self._rope(cfg), "_freqs", None)
        if freqs is None:
            raise Unsupported(
                "this mlx-lm rope module computes its frequencies inside mx.fast.rope", "operation"
            )
        return 1.0 / freqs.astype(mx.float32)

    def _attention_factor(self, cfg, seq_len):
        rope = self._rope(cfg)
        for attr in ("mscale", "_scale"):
            if hasattr(rope, attr):
                return float(getattr(rope, attr))
        raise Unsupported(
            "this mlx-lm rope module applies no attention factor (no attribute to read)", "operation"
        )

    def _rotate(self, x, pos: np.ndarray, cfg, seq_len=None):
        import mlx.core as mx

        rope = self._rope(cfg)
        dynamic = cfg.scaling is not None and cfg.scaling.to_hf()["rope_type"] == "dynamic"
        if pos.dtype.kind == "f" and np.any(pos != np.round(pos)):
            raise Unsupported(f"{self.flavour} takes integer offsets only (fractional positions)")
        if pos.size and pos.min() < 0:
            raise Unsupported(f"{self.flavour} takes non-negative offsets only")
        p = pos.astype(np.int64)
        n, d = x.shape
        length = emulated_length(p, seq_len, self.flavour) if dynamic else None
        plan = prefill_plan(p if length is None else np.append(p, length - 1), d)
        if plan is not None:
            length, batch, slots = plan
            z = mx.zeros((batch, length, d), dtype=x.dtype)
            idx, r = mx.array(slots[:n].astype(np.int32)), mx.array(p.astype(np.int32))
            z = z.at[idx, r].add(x)
            return rope(z)[idx, r]
        if dynamic:
            raise Unsupported(
                "DynamicNTKScalingRoPE reads the length from the shape; this prefill is too large"
            )
        out = [None] * n
        for q in np.unique(p):
            sel = np.nonzero(p == q)[0]
            y = rope(x[mx.array(sel.astype(np.int32))].reshape(len(sel), 1, d), offset=int(q))
            for j, i in enumerate(sel):
                out[i] = y[j, 0]
        return mx.stack(out)

    def _apply(self, x, positions, cfg, seq_len):
        lead, pos = tokens(tuple(x.shape), np.asarray(positions))
        return self._rotate(x.reshape(-1, cfg.head_dim), pos, cfg, seq_len).reshape(*lead, cfg.head_dim)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        import mlx.core as mx

        _, (g,) = mx.vjp(lambda t: self._apply(t, positions, cfg, seq_len), [x], [grad_out])
        return g

    def _cos_sin(self, positions, cfg, seq_len):
        import mlx.core as mx

        def rotate_rows(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
            return self.to_numpy(self._apply(mx.array(rows), ids, cfg, seq_len))

        return probe_tables(np.asarray(positions), cfg, rotate_rows)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _kernel_rope(self, cfg, inverse: bool):
        """``callable(x, offset)``: the library's rope; for the inverse, ``mx.fast.rope`` at ``-scale``."""
        rope = self._rope(cfg)  # Unsupported for scalings the library lacks
        if not inverse:
            return rope
        if self.flavour != "mlx":
            raise Unsupported("mlx-lm's rope modules have no inverse rotation (no scale or sign argument)")
        import mlx.core as mx

        s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        scale = 1.0 / float(s["factor"]) if s["rope_type"] == "linear" else 1.0

        def inverse_rope(x, offset=0):
            return mx.fast.rope(
                x,
                cfg.rotary_dim,
                traditional=cfg.layout == "interleaved",
                base=float(cfg.base),
                scale=-scale,
                offset=offset,
            )

        return inverse_rope

    def _k_axes(self, x, cfg, axes, p, inverse):
        import mlx.core as mx

        rope = self._kernel_rope(cfg, inverse)
        if axes == "thd":  # one call per sequence on its (H, L, D) view, offset = its first position
            parts = [
                rope(x[a:b].transpose(1, 0, 2), offset=st).transpose(1, 0, 2)
                for a, b, st in runs(p, self.peer)
            ]
            return mx.concatenate(parts, axis=0) if parts else x
        to, back = _TO_BHSD[axes]
        xv = to(x)  # (B, H, S, D)
        starts = offset_rows(p.grid, self.peer)
        if starts.size == 0 or np.all(starts == starts[0]):
            return back(rope(xv, offset=int(starts[0]) if starts.size else 0))
        if self.flavour == "mlx":
            return back(rope(xv, offset=mx.array(starts.astype(np.int32))))
        rows = [rope(xv[b : b + 1], offset=int(st)) for b, st in enumerate(starts)]
        return back(mx.concatenate(rows, axis=0))


#: axes -> (to a (B, H, S, D) view, back)
_TO_BHSD = {
    "bhsd": (lambda t: t, lambda t: t),
    "bshd": (lambda t: t.transpose(0, 2, 1, 3), lambda t: t.transpose(0, 2, 1, 3)),
    "sbhd": (lambda t: t.transpose(1, 2, 0, 3), lambda t: t.transpose(2, 0, 1, 3)),
}


def make_backend(precision: str | None = None, flavour: str = "mlx") -> MlxPeer:
    return MlxPeer(flavour, precision)
