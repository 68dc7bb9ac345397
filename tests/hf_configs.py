"""HF ``config.json`` contents that several test files read, so that none of them copies another's.

Only the keys rope-ref reads are kept, with the values of the released config.
"""

#: Qwen/Qwen3-VL-8B-Instruct ``config.json``: the text config's RoPE keys.
QWEN3_VL_8B = {
    "model_type": "qwen3_vl",
    "text_config": {
        "model_type": "qwen3_vl_text",
        "head_dim": 128,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_theta": 5000000,
        "rope_scaling": {
            "mrope_interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_type": "default",
        },
    },
}
