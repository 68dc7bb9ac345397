"""vLLM's CPU rotary kernel (``vllm._custom_ops.rotary_embedding``, csrc/cpu/pos_encoding.cpp) crashes the
process (SIGSEGV in ``vec_op::BF16Vec8::save``) for bfloat16 activations when ``rotary_dim / 2`` is not a
multiple of 8, e.g. a partial rotary of 20 channels in a head of 80; float32 runs the same call correctly.

The call runs in a child process; exit status 1 while the child dies by a signal (the bug), 0 when it
returns and its result equals forward_native's (float64 check of the rotation).
"""

import subprocess
import sys

CHILD = r"""
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope
torch.manual_seed(0)
with set_current_vllm_config(VllmConfig()):
    params = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    rope = get_rope(80, max_position=4096, is_neox_style=True, rope_parameters=params, dtype=torch.bfloat16)
    q = torch.randn(8, 80).to(torch.bfloat16)
    pos = torch.arange(8) * 37
    want, _ = rope.forward_native(pos, q.clone(), q.clone())
    got, _ = rope.forward_cpu(pos, q.clone(), q.clone())
    print("max |cpu - native|", float((got.double() - want.double()).abs().max()))
"""

done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
if done.returncode < 0 or "Segfault" in done.stderr:
    print(
        f"vLLM's CPU rotary kernel killed the process (return code {done.returncode}) at bf16, rotary_dim 20"
    )
    sys.exit(1)
print(done.stdout.strip() or done.stderr.strip()[-500:])
sys.exit(0 if done.returncode == 0 else 2)
