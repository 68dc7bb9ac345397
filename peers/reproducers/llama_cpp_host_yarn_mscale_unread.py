"""llama.cpp never reads YaRN's ``mscale``: its attention factor assumes ``mscale == 1`` (DeepSeek-2 alone
assumes ``mscale == mscale_all_dim``).

src/llama-context.cpp (llama.cpp as vendored by llama-cpp-python 0.3.36): ``// note: here we assume mscale ==
1.0f // TODO: start reading the actual value of mscale``; the converter writes ``mscale_all_dim`` as
``rope.scaling.yarn_log_multiplier`` (conversion/mistral3.py, Ministral 3) and no GGUF key holds ``mscale``.
HF's ``_compute_yarn_parameters`` (and DeepSeek-V2's modeling_deepseek.py) use
``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)``.

Behaviour, through libllama on a tiny random mistral3 GGUF written as the converter writes a config with
``factor 16, mscale 0.9, mscale_all_dim 0.707``: libllama logs the attention factor it sets, compared here
with the float64 value of HF's formula. Exit status 1 while the bug is present, 0 once fixed, 2 without
llama.cpp's host code (``bash peers/envs/llama_cpp.sh``).
"""

import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _llama_cpp_host import (  # noqa: E402
    Logs,
    get_mscale,
    last_token_logits,
    llama_cpp_module,
    vendored_source,
    write_tiny_model,
)

llama_cpp = llama_cpp_module()
vendored_source()
import gguf  # noqa: E402  (the vendored gguf-py)

factor, mscale, mscale_all_dim = 16.0, 0.9, 0.707
mscale_keys = [k for k in vars(gguf.Keys.Rope) if "MSCALE" in k.upper()]
logs = Logs(llama_cpp)
rope = {"scaling_type": "yarn", "factor": factor, "orig_ctx": 256, "yarn_log_mul": mscale_all_dim}
with tempfile.TemporaryDirectory() as tmp:
    last_token_logits(write_tiny_model(Path(tmp) / "m.gguf", "mistral3", rope))
found = [re.search(r"setting new yarn_attn_factor = ([0-9.]+)", line) for line in logs.lines]
used = [float(m.group(1)) for m in found if m]
if not used:
    print("libllama logged no 'setting new yarn_attn_factor' line: the code path changed; inspect it")
    sys.exit(0)
want = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
print(f"GGUF keys for mscale: {mscale_keys or 'none'}")
print(f"llama.cpp's YaRN attention factor {used[0]:.4f}; HF (float64) {want:.6f} for mscale {mscale}")
sys.exit(1 if abs(used[0] - want) > 1e-3 else 0)
