"""llama.cpp replaces a YaRN attention factor by ``get_mscale(factor)``: the config's and the user's are lost.

src/llama-context.cpp (llama.cpp as vendored by llama-cpp-python 0.3.36), ``if (cparams.yarn_ext_factor !=
0)``: ``cparams.yarn_attn_factor = get_mscale(factor, 1.0f)`` unconditionally, after the user's
``yarn_attn_factor`` (``--yarn-attn-factor``) was copied in; and the ``rope.scaling.yarn_attn_factor`` key
that the converter writes from ``rope_scaling.attention_factor`` (conversion/base.py) is read for grok alone.
HF's
``_compute_yarn_parameters`` uses the configured ``attention_factor`` as is.

Behaviour, through libllama on a tiny random llama GGUF with YaRN (factor 4, original context 512), tokens
at positions 1000..1007: the logits are the same whether the GGUF carries attention_factor 0.5 or nothing,
and whether the user asks for 0.5 or not; with YaRN's ramp off (``yarn_ext_factor = 0``) the same two
attention factors give different logits, so the factor does reach the rotation when it is not overwritten.
Exit status 1 while the bug is present, 0 once fixed, 2 without llama.cpp's host code
(``bash peers/envs/llama_cpp.sh``).
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _llama_cpp_host import Logs, get_mscale, last_token_logits, llama_cpp_module, write_tiny_model  # noqa: E402

logs = Logs(llama_cpp_module())  # libllama's log lines are kept, not printed
yarn = {"scaling_type": "yarn", "factor": 4.0, "orig_ctx": 512}
with tempfile.TemporaryDirectory() as tmp:
    keyed = write_tiny_model(Path(tmp) / "keyed.gguf", "llama", {**yarn, "yarn_attn_factor": 0.5})
    plain = write_tiny_model(Path(tmp) / "plain.gguf", "llama", yarn)
    from_key = last_token_logits(keyed)
    default = last_token_logits(plain)
    from_user = last_token_logits(plain, yarn_attn_factor=0.5)
    ramp_off_half = last_token_logits(plain, yarn_ext_factor=0.0, yarn_attn_factor=0.5)
    ramp_off_one = last_token_logits(plain, yarn_ext_factor=0.0, yarn_attn_factor=1.0)

key_lost = np.array_equal(from_key, default)
user_lost = np.array_equal(from_user, default)
factor_matters = not np.allclose(ramp_off_half, ramp_off_one, rtol=1e-4, atol=1e-5)
print(f"GGUF attention_factor 0.5 vs none: logits {'identical' if key_lost else 'differ'}")
print(f"user yarn_attn_factor 0.5 vs default: logits {'identical' if user_lost else 'differ'}")
print(f"control, YaRN ramp off, factor 0.5 vs 1.0: logits {'differ' if factor_matters else 'identical'}")
print(f"llama.cpp uses get_mscale(4) = {get_mscale(4.0):.6f} (float64); HF uses the configured 0.5")
sys.exit(1 if factor_matters and (key_lost or user_lost) else 0)
