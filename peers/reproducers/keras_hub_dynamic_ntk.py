"""keras-hub ``RotaryEmbedding(rope_type="dynamic")`` divides every inverse frequency by
``factor^(d/(d-2))``, at every length: it matches neither HF's dynamic NTK (base scaled, only past the
original context) nor static NTK-aware scaling (base scaled by ``factor^(d/(d-2))``).

References in float64 from the formulas (HF ``_compute_dynamic_ntk_parameters``). Exit status 1 while the
bug is present.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.layers import RotaryEmbedding  # noqa: E402

d, base, factor, l0 = 64, 10000.0, 2.0, 2048
layer = RotaryEmbedding(max_wavelength=base, rope_type="dynamic", scaling_factor=factor)
got = keras.ops.convert_to_numpy(layer._get_inverse_freq(d)).astype(np.float64)


def default(b: float) -> np.ndarray:
    return 1.0 / b ** (np.arange(0, d, 2) / d)


def hf_dynamic(seq_len: int) -> np.ndarray:
    length = max(seq_len, l0)
    return default(base * (factor * length / l0 - (factor - 1)) ** (d / (d - 2)))


refs = {
    "HF dynamic, seq_len 2048": hf_dynamic(2048),
    "HF dynamic, seq_len 16384": hf_dynamic(16384),
    "static NTK-aware": default(base * factor ** (d / (d - 2))),
}
worst = []
for name, want in refs.items():
    rel = np.abs(got - want) / want
    worst.append(rel.max())
    print(f"keras-hub 'dynamic' vs {name}: max relative error {rel.max():.3g} (pair {int(rel.argmax())})")
print(f"keras-hub inv_freq[0] = {got[0]:.6g} (1/factor^(d/(d-2)) = {factor ** (-d / (d - 2)):.6g})")
sys.exit(1 if min(worst) > 1e-5 else 0)
