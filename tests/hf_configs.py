"""HF ``config.json`` contents that several test files read, so that none of them copies another's.

Only the keys rope-ref reads are kept, with the values of the released config.
"""

#: Qwen/Qwen2-VL-7B-Instruct ``config.json``: the RoPE keys and the vision token ids.
QWEN2_VL_7B = {
    "model_type": "qwen2_vl",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 32768,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"spatial_merge_size": 2},
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
}

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
