"""keras-hub as a peer (``keras-hub:torch``, ``keras-hub:jax``): its rotary layers, on one Keras backend each.

What is called, per rope type (each layer is the one keras-hub's own models build for it):

* default, ``dynamic``, ``yarn``: ``keras_hub.layers.RotaryEmbedding(max_wavelength=base, rope_type=...,
  scaling_factor=factor, beta_fast, beta_slow, original_max_position_embeddings, truncate)``
  (``keras_hub/src/layers/modeling/rotary_embedding.py``; Gemma, Mistral, Qwen, GPT-OSS use it);
* ``linear``, ``llama3``: ``keras_hub.src.models.llama.llama_rotary_embedding.LlamaRotaryEmbedding``
  (``position_scaling_factor``; ``frequency_adjustment_factor``, ``low_freq_factor``,
  ``high_freq_factor``, ``pretraining_sequence_length``), the layer ``LlamaBackbone`` builds from its
  ``rope_*`` arguments;
* ``longrope``: ``keras_hub.src.models.phi3.phi3_rotary_embedding.Phi3SuScaledRotaryEmbedding``
  (``max_sequence_length = original_max_position_embeddings * factor``), the layer of ``Phi3Backbone``.

Each is called as ``layer(x, positions=positions)`` with ``x`` shaped ``(1, tokens, 1, head_dim)`` and
the case's positions in the dtype the case gives them (integer ids stay integers). ``Phi3Attention``
never passes ``positions``: it calls the layer with ``start_index``, and the layer switches between short
and long factors on ``start_index + sequence length``; so integer positions go through the prefill
emulation of ``_glue`` (one call over ``max(position) + 1`` rows, ``start_index=0``) and only the
positions a prefill cannot hold (negative, fractional) take ``positions=``. The layers rotate halves
over the whole head: interleaved cases go through HF's ``convert_llama_weights_to_hf.permute`` channel
order (``_glue.layout_permutation``); partial rotary lives in each model's attention code (GPT-NeoX,
Gemma 4), not in a layer, so it is unsupported. ``inv_freq`` is the layer's ``_get_inverse_freq``; the
attention factor and cos/sin are read with unit-vector probes through the public call. Gradients are the
Keras backend's own autodiff through the layer (torch autograd, ``jax.vjp``).

The Keras backend is chosen with ``KERAS_BACKEND`` before keras is imported, so one process runs one of
the two flavours. keras-hub pulls TensorFlow, so it is not installed on CI; ``rope-ref ecosystem`` runs it
where it is (``--merge`` puts those rows on the page).

Precision: the dtype policy is ``float32``, ``mixed_float16`` or ``mixed_bfloat16``. Frequencies,
positions and angles are float32 inside the layer, cos/sin are cast to the compute dtype and the rotation
runs in it; float positions handed to the layer are first autocast to the compute dtype by Keras (the
``keras-hub-float-positions-autocast`` finding).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import (
    OPS,
    Peer,
    Unsupported,
    config_key,
    emulated_length,
    layout_permutation,
    prefill_plan,
    probe_tables,
    tokens,
)

__all__ = ["KerasHubPeer", "make_backend", "available"]

_POLICY = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def available(keras_backend: str = "torch", **_: Any) -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("keras_hub") is None:
        return False, "keras-hub is not installed (it pulls TensorFlow; not on the CPU page)"
    current = os.environ.get("KERAS_BACKEND")
    if current and current != keras_backend:
        return False, f"KERAS_BACKEND={current} in this process; run keras-hub:{keras_backend} in its own"
    if importlib.util.find_spec(keras_backend) is None:
        return False, f"the Keras {keras_backend} backend is not installed"
    os.environ.setdefault("KERAS_BACKEND", keras_backend)
    try:
        import keras
        import keras_hub  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - TensorFlow import failures are not only ImportError
        return False, f"keras-hub is not installed ({type(exc).__name__}: {exc})"
    if keras.backend.backend() != keras_backend:
        return False, f"keras was imported with the {keras.backend.backend()} backend in this process"
    return True, ""


class KerasHubPeer(Peer):
    distribution = "keras-hub"
    precisions = ("fp32", "fp16", "bf16")
    notes = (
        "keras_hub.layers.RotaryEmbedding for default, dynamic and yarn; LlamaRotaryEmbedding for linear and "
        "llama3; Phi3SuScaledRotaryEmbedding for longrope",
        "positions passed to the layer as given (positions=); Phi3SuScaledRotaryEmbedding: integer positions "
        "through a prefill with start_index, as Phi3Attention calls it",
        "interleaved through HF's permute channel order",
        "inv_freq from the layer's _get_inverse_freq; attention factor and cos/sin read with unit-vector "
        "probes",
        "dtype policies float32, mixed_float16, mixed_bfloat16",
    )

    def __init__(self, keras_backend: str = "torch", precision: str | None = None) -> None:
        self.peer = f"keras-hub:{keras_backend}"
        self.keras_backend = keras_backend
        self._layers: dict[str, tuple[str, Any]] = {}
        super().__init__(precision)
        import keras

        self.version = f"{self.version} (keras {keras.__version__}, {keras_backend} backend)"

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        # frequencies and angles in float32; cos/sin cast to the compute dtype (= io), rotation in it
        out = dict.fromkeys(OPS, PrecisionPolicy(io, "float32", io))
        out["inv_freq"] = PrecisionPolicy(io, "float32", "float32")
        return out

    # -- arrays --------------------------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        import keras

        a = np.array(array, copy=True)
        if dtype is None:
            return a  # positions stay NumPy, in the case's own dtype, until the layer receives them
        return keras.ops.convert_to_tensor(a.astype(np.float32), dtype=dtype)

    def to_numpy(self, array: Any) -> np.ndarray:
        import keras

        if isinstance(array, (float, int, np.ndarray, np.generic)):
            return np.asarray(array)
        if keras.backend.standardize_dtype(array.dtype) == "bfloat16":
            array = keras.ops.cast(array, "float32")  # NumPy has no bfloat16; float32 holds it exactly
        return np.asarray(keras.ops.convert_to_numpy(array))

    # -- the library's layer for a config ------------------------------------------------------------------
    def _layer(self, cfg) -> tuple[str, Any]:
        key = config_key(cfg)
        if key in self._layers:
            return self._layers[key]
        if cfg.rotary_dim != cfg.head_dim:
            raise Unsupported(
                "keras-hub's rotary layers rotate the whole feature axis; partial rotary is done in each "
                "model's attention code (GPT-NeoX, Gemma 4), not by a layer"
            )
        s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        kind = s["rope_type"]
        policy = _POLICY[self.io]
        base = float(cfg.base)
        if kind in ("default", "dynamic", "yarn"):
            from keras_hub.layers import RotaryEmbedding

            kw: dict[str, Any] = {}
            if kind == "dynamic":
                kw = {"rope_type": "dynamic", "scaling_factor": float(s["factor"])}
            elif kind == "yarn":
                if "original_max_position_embeddings" not in s:
                    raise Unsupported("keras-hub's YaRN needs original_max_position_embeddings")
                kw = {
                    "rope_type": "yarn",
                    "scaling_factor": float(s["factor"]),
                    "beta_fast": float(s.get("beta_fast", 32.0)),
                    "beta_slow": float(s.get("beta_slow", 1.0)),
                    "original_max_position_embeddings": int(s["original_max_position_embeddings"]),
                    "truncate": bool(s.get("truncate", True)),
                }
            layer = RotaryEmbedding(max_wavelength=base, sequence_axis=1, feature_axis=-1, dtype=policy, **kw)
        elif kind in ("linear", "llama3"):
            from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding

            if kind == "linear":
                kw = {"position_scaling_factor": float(s["factor"])}
            else:
                kw = {
                    "frequency_adjustment_factor": float(s["factor"]),
                    "low_freq_factor": float(s["low_freq_factor"]),
                    "high_freq_factor": float(s["high_freq_factor"]),
                    "pretraining_sequence_length": int(s["original_max_position_embeddings"]),
                }
            layer = LlamaRotaryEmbedding(
                max_wavelength=base, sequence_axis=1, feature_axis=-1, dtype=policy, **kw
            )
        elif kind == "longrope":
            from keras_hub.src.models.phi3.phi3_rotary_embedding import Phi3SuScaledRotaryEmbedding

            if s.get("attention_factor") is not None:
                raise Unsupported("Phi3SuScaledRotaryEmbedding takes no attention_factor (it derives one)")
            orig = int(s["original_max_position_embeddings"])
            layer = Phi3SuScaledRotaryEmbedding(
                inverese_freq_short_factor=[float(v) for v in s["short_factor"]],
                inverese_freq_long_factor=[float(v) for v in s["long_factor"]],
                max_sequence_length=int(round(orig * float(s.get("factor", 1.0)))),
                pretraining_sequence_length=orig,
                max_wavelength=base,
                sequence_axis=1,
                feature_axis=-1,
                dtype=policy,
            )
        elif kind == "ntk":
            raise Unsupported(
                "keras-hub has no static NTK-aware rope type (its 'dynamic' type runs as HF's dynamic NTK)"
            )
        else:
            raise Unsupported(f"keras-hub has no {kind!r} rope type")
        self._layers[key] = (kind, layer)
        return self._layers[key]

    # -- operations ----------------------------------------------------------------------------------------
    def _inv_freq(self, cfg, seq_len):
        kind, layer = self._layer(cfg)
        if kind == "longrope":
            raise Unsupported(
                "Phi3SuScaledRotaryEmbedding divides by its short/long factors inside the call (no accessor)",
                "operation",
            )
        return layer._get_inverse_freq(cfg.rotary_dim)

    def _attention_factor(self, cfg, seq_len):
        import keras

        kind, layer = self._layer(cfg)
        if kind == "longrope":  # a Python float, applied to the float32 cos/sin before the cast
            return float(layer.embedding_scaling_factor)
        # RotaryEmbedding multiplies the cast cos/sin by its YaRN factor in the compute dtype, so the probe
        # reads the factor exactly as the layer holds it (cos 0 = 1)
        e = np.zeros((1, cfg.head_dim), dtype=np.float32)
        e[0, 0] = 1.0  # pair 0's first channel at position 0: cos(0) * factor comes back there
        y = self._rotate(keras.ops.convert_to_tensor(e, dtype=self.io), np.zeros(1, np.int64), cfg, seq_len)
        return float(self.to_numpy(y)[0, 0])

    def _cos_sin(self, positions, cfg, seq_len):
        import keras

        def rotate_rows(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
            return self.to_numpy(
                self._rotate(keras.ops.convert_to_tensor(rows, dtype=self.io), ids, cfg, seq_len)
            )

        return probe_tables(np.asarray(positions), cfg, rotate_rows)

    def _apply(self, x, positions, cfg, seq_len):
        import keras

        lead, pos = tokens(tuple(x.shape), np.asarray(positions))
        y = self._rotate(keras.ops.reshape(x, (-1, cfg.head_dim)), pos, cfg, seq_len)
        return keras.ops.reshape(y, (*lead, cfg.head_dim))

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        if self.keras_backend == "torch":
            return self.torch_vjp(x, positions, cfg, grad_out, seq_len)
        if self.keras_backend == "jax":
            import jax

            _, pullback = jax.vjp(lambda t: self._apply(t, positions, cfg, seq_len), x)
            return pullback(grad_out)[0]
        raise Unsupported(f"no autodiff wired for the {self.keras_backend} backend", "operation")

    # -- one call of the layer on flat tokens ----------------------------------------------------------------
    def _rotate(self, x, pos: np.ndarray, cfg, seq_len):
        """Rotate ``x`` (tokens, head_dim) at ``pos`` (tokens,) with the config's keras-hub layer."""
        import keras

        kind, layer = self._layer(cfg)
        d = cfg.head_dim
        perm = None
        if cfg.layout == "interleaved":  # interleaved(x) = P half(P^-1 x), P the permute channel order
            perm = layout_permutation(cfg.rotary_dim, d)
            x = keras.ops.take(x, np.argsort(perm), axis=-1)
        n = int(x.shape[0])
        if kind == "longrope" and self._prefillable(pos):
            y = self._prefill(layer, x, pos.astype(np.int64), seq_len)
        else:
            y = keras.ops.reshape(layer(keras.ops.reshape(x, (1, n, 1, d)), positions=pos[None]), (n, d))
        if perm is not None:
            y = keras.ops.take(y, perm, axis=-1)
        return y

    @staticmethod
    def _prefillable(pos: np.ndarray) -> bool:
        p = np.asarray(pos)
        integral = p.dtype.kind in "iu" or bool(np.all(np.isfinite(p)) and np.all(p == np.round(p)))
        return integral and (p.size == 0 or p.min() >= 0)

    def _prefill(self, layer, x, p: np.ndarray, seq_len):
        """Scatter the tokens into a zero sequence of ``max(position) + 1`` rows, call with start_index=0."""
        import keras

        n, d = int(x.shape[0]), int(x.shape[-1])
        length = emulated_length(p, seq_len, self.peer)
        plan = prefill_plan(np.append(p, length - 1), d)
        if plan is None:
            raise Unsupported(
                "Phi3SuScaledRotaryEmbedding switches short/long factors on the input length; this prefill "
                "is too large to emulate"
            )
        length, batch, slots = plan
        rows = slots[:n] * length + p
        z = keras.ops.zeros((batch * length, d), dtype=self.io)
        z = keras.ops.scatter_update(z, rows[:, None], x)
        y = layer(keras.ops.reshape(z, (batch, length, 1, d)), start_index=0)
        return keras.ops.take(keras.ops.reshape(y, (batch * length, d)), rows, axis=0)


def make_backend(precision: str | None = None, keras_backend: str = "torch") -> KerasHubPeer:
    return KerasHubPeer(keras_backend, precision)
