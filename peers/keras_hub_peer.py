"""keras-hub as a peer (``keras-hub:torch``, ``keras-hub:jax``), written against its documented API.

What is called: ``keras_hub.layers.RotaryEmbedding(max_wavelength=base, scaling_factor=...,
sequence_axis=1, feature_axis=-1)`` (``keras_hub/src/layers/modeling/rotary_embedding.py``), as
``layer(x, positions=positions)`` with ``x`` shaped ``(batch, seq, heads, head_dim)``; half layout over
the whole head; ``scaling_factor`` divides positions (linear). The Keras backend is chosen with
``KERAS_BACKEND`` before keras is imported, so one process runs one of the two flavours.

keras-hub pulls TensorFlow, so it is not installed on CI; ``rope-ref ecosystem`` runs it where it is.
Precision: the layer computes in its dtype policy's compute dtype (float32 under ``"float32"``;
float16/bfloat16 under the mixed policies, positions included: the documented autocast finding).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, tokens

__all__ = ["KerasHubPeer", "make_backend", "available"]


def available(keras_backend: str = "torch", **_: Any) -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("keras_hub") is None:
        return False, "keras-hub is not installed (it pulls TensorFlow; not on the CPU page)"
    current = os.environ.get("KERAS_BACKEND")
    if current and current != keras_backend:
        return False, f"KERAS_BACKEND={current} in this process; run keras-hub:{keras_backend} in its own"
    os.environ.setdefault("KERAS_BACKEND", keras_backend)
    try:
        import keras_hub  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - TensorFlow import failures are not only ImportError
        return False, f"keras-hub is not installed ({type(exc).__name__}: {exc})"
    return True, ""


class KerasHubPeer(Peer):
    distribution = "keras-hub"
    precisions = ("fp32", "fp16", "bf16")
    cannot = {
        "inv_freq": "keras-hub's RotaryEmbedding exposes no inverse frequencies",
        "attention_factor": "keras-hub's RotaryEmbedding has no attention factor",
        "apply_vjp": "not wired: gradients differ per Keras backend",
    }

    def __init__(self, keras_backend: str = "torch", precision: str | None = None) -> None:
        self.peer = f"keras-hub:{keras_backend}"
        self.keras_backend = keras_backend
        self._layers: dict[tuple, Any] = {}
        super().__init__(precision)

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        return dict.fromkeys(OPS, PrecisionPolicy(io, "float32" if io == "float32" else io, io))

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        import keras

        a = np.array(array, copy=True)
        return keras.ops.convert_to_tensor(a.astype(np.float32), dtype=dtype) if dtype else a

    def to_numpy(self, array: Any) -> np.ndarray:
        import keras

        return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(array, "float32")))

    def _layer(self, cfg):
        import keras_hub

        s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        if s["rope_type"] not in ("default", "linear"):
            raise Unsupported(f"keras_hub.layers.RotaryEmbedding has no {s['rope_type']!r} scaling")
        if cfg.layout != "half" or cfg.rotary_dim != cfg.head_dim:
            raise Unsupported("keras_hub.layers.RotaryEmbedding: half layout over the whole head only")
        key = (float(cfg.base), float(s.get("factor", 1.0)))
        if key not in self._layers:
            policy = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}[self.io]
            self._layers[key] = keras_hub.layers.RotaryEmbedding(
                max_wavelength=key[0], scaling_factor=key[1], sequence_axis=1, feature_axis=-1, dtype=policy
            )
        return self._layers[key]

    def _apply(self, x, positions, cfg, seq_len):
        import keras

        lead, pos = tokens(tuple(x.shape), np.asarray(positions))
        d = cfg.head_dim
        layer = self._layer(cfg)
        y = layer(keras.ops.reshape(x, (1, -1, 1, d)), positions=keras.ops.convert_to_tensor(pos[None]))
        return keras.ops.reshape(y, (*lead, d))


def make_backend(precision: str | None = None, keras_backend: str = "torch") -> KerasHubPeer:
    return KerasHubPeer(keras_backend, precision)
