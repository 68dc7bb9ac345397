"""Ready-made :class:`~rope_ref.RopeConfig` for popular models: ``preset(name)`` and ``preset_names()``.

Each preset is a small function whose docstring cites the public ``config.json`` (Hugging Face Hub
repository) and, where the layout is not in the config, the modelling code that fixes it. Values are
the *rotary* part of one attention head: ``head_dim`` is the per-head size (the MLA rope sub-head for
DeepSeek), ``rotary_dim`` the rotated width. Layouts follow the code that runs the published weights
in HF ``transformers`` (``"half"`` = ``rotate_half``; ``"interleaved"`` = adjacent pairs).
"""

from __future__ import annotations

from collections.abc import Callable

from .config import RopeConfig
from .scaling import Linear, Llama3, LongRoPE, YaRN

__all__ = ["preset", "preset_names", "preset_doc"]


def _llama_2_7b() -> RopeConfig:
    """meta-llama/Llama-2-7b-hf ``config.json``: hidden 4096 / 32 heads -> head 128, ``rope_theta`` 10000.

    HF layout is ``"half"``: ``convert_llama_weights_to_hf.py`` permutes Meta's q/k rows so that
    ``rotate_half`` reproduces Meta's interleaved (complex) rotation; use ``"interleaved"`` with Meta's
    original ``consolidated.*.pth`` weights.
    """
    return RopeConfig(128, layout="half", base=10000.0)


def _llama_3_1_8b() -> RopeConfig:
    """meta-llama/Llama-3.1-8B ``config.json``: head 128, ``rope_theta`` 500000, ``rope_scaling``
    ``{rope_type: llama3, factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,
    original_max_position_embeddings: 8192}``. Layout ``"half"`` (HF-permuted weights, as Llama 2)."""
    return RopeConfig(
        128,
        layout="half",
        base=500000.0,
        scaling=Llama3(8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192),
    )


def _mistral_7b() -> RopeConfig:
    """mistralai/Mistral-7B-v0.1 ``config.json``: hidden 4096 / 32 heads -> head 128, ``rope_theta``
    10000, no scaling; HF ``MistralRotaryEmbedding`` with ``rotate_half``. (v0.2 and later use
    ``rope_theta`` 1e6: ``preset("mistral-7b").replace(base=1e6)``.)"""
    return RopeConfig(128, layout="half", base=10000.0)


def _qwen2_5_7b() -> RopeConfig:
    """Qwen/Qwen2.5-7B ``config.json``: hidden 3584 / 28 heads -> head 128, ``rope_theta`` 1000000, no
    ``rope_scaling`` (context 32768); HF ``Qwen2`` uses ``rotate_half``."""
    return RopeConfig(128, layout="half", base=1000000.0)


def _qwen2_5_7b_yarn() -> RopeConfig:
    """Qwen2.5-7B with the YaRN extension that Qwen/Qwen2.5-7B-Instruct's model card ("Processing Long
    Texts") tells users to add to ``config.json``: ``"rope_scaling": {"factor": 4.0,
    "original_max_position_embeddings": 32768, "type": "yarn"}`` (131072 tokens). HF defaults apply:
    beta_fast 32, beta_slow 1, attention factor ``0.1 ln 4 + 1``."""
    return RopeConfig(128, layout="half", base=1000000.0, scaling=YaRN(4.0, original_max_position=32768))


#: microsoft/Phi-3.5-mini-instruct ``config.json`` ``rope_scaling`` (``"type": "longrope"``), 48 values each.
_PHI35_SHORT = (
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979,
    1.0999999046325684, 1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662,
    1.2899998426437378, 1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533,
    2.729999542236328, 2.749999523162842, 2.8399994373321533,
)  # fmt: skip
_PHI35_LONG = (
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
    1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
    4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
    17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
    50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
    62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
    63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
    64.51000213623047, 64.52999877929688, 64.83999633789062,
)  # fmt: skip


def _phi_3_5_mini() -> RopeConfig:
    """microsoft/Phi-3.5-mini-instruct ``config.json``: hidden 3072 / 32 heads -> head 96,
    ``rope_theta`` 10000, ``original_max_position_embeddings`` 4096, ``max_position_embeddings`` 131072,
    ``rope_scaling`` longrope with the 48 short/long factors above. ``factor`` = 131072 / 4096 = 32 (HF
    derives it so), attention factor ``sqrt(1 + ln 32 / ln 4096)``. HF ``Phi3`` uses ``rotate_half``."""
    return RopeConfig(
        96,
        layout="half",
        base=10000.0,
        scaling=LongRoPE(_PHI35_SHORT, _PHI35_LONG, original_max_position=4096, factor=32.0),
    )


def _gpt_j_6b() -> RopeConfig:
    """EleutherAI/gpt-j-6b ``config.json``: ``n_embd`` 4096 / ``n_head`` 16 -> head 256, ``rotary_dim`` 64;
    base 10000 is hard-coded. Interleaved pairs: HF ``models/gptj/modeling_gptj.py`` ``rotate_every_two``
    (mesh-transformer-jax ``layers.py``)."""
    return RopeConfig(256, layout="interleaved", rotary_dim=64, base=10000.0)


def _gpt_neox_20b() -> RopeConfig:
    """EleutherAI/gpt-neox-20b ``config.json``: hidden 6144 / 64 heads -> head 96, ``rotary_pct`` 0.25 ->
    ``rotary_dim`` 24, ``rotary_emb_base`` 10000. Half layout (HF ``modeling_gpt_neox.py``
    ``rotate_half``)."""
    return RopeConfig(96, layout="half", rotary_dim=24, base=10000.0)


def _chatglm_6b() -> RopeConfig:
    """THUDM/chatglm-6b: the **per-half** rotary of its 2D scheme, not the whole head.

    ``config.json``: hidden 4096 / 32 heads -> head 128, ``position_encoding_2d`` true. Each half of a
    head (64 channels) is rotated on its own, the first by ``position_ids`` and the second by block ids,
    with ``RotaryEmbedding(64, base=10000)`` and ``rotate_half`` (``modeling_chatglm.py``). One
    ``RopeConfig`` cannot describe the pair of half-rotations, so this preset is ``RopeConfig(64,
    layout="half")``, the config :func:`rope_ref.chatglm.apply_2d` uses on each half; rotate whole heads
    with ``apply_2d`` and ids from :func:`rope_ref.chatglm.position_ids`.
    """
    return RopeConfig(64, layout="half", base=10000.0)


def _chatglm2_6b() -> RopeConfig:
    """THUDM/chatglm2-6b ``config.json``: ``kv_channels`` 128, no ``rope_ratio`` (1). ``modeling_chatglm.py``:
    ``RotaryEmbedding(rotary_dim // 2)`` -> RoPE on the first 64 of 128 channels, pairs from
    ``reshape(..., rot_dim // 2, 2)`` (interleaved), the other 64 passed through; base 10000.
    ChatGLM3-6B (THUDM/chatglm3-6b) has the same rotary."""
    return RopeConfig(128, layout="interleaved", rotary_dim=64, base=10000.0)


def _chatglm2_6b_32k() -> RopeConfig:
    """THUDM/chatglm2-6b-32k ``config.json``: ``rope_ratio`` 16. Its ``modeling_chatglm.py`` divides the
    positions: ``seq_idx = arange(seq_len) / rope_ratio`` (linear interpolation, PI), base unchanged
    (quoted side by side with ChatGLM3's in ztxz16/fastllm issue #374). ``Linear(16)``. The model card
    confirms positional interpolation; the value 16 (32768 / 2048) could not be checked against a stored
    copy of this config.json and should be confirmed before relying on it."""
    return RopeConfig(128, layout="interleaved", rotary_dim=64, base=10000.0, scaling=Linear(16.0))


def _chatglm3_6b_32k() -> RopeConfig:
    """THUDM/chatglm3-6b-32k ``config.json``: ``rope_ratio`` 50. Its ``modeling_chatglm.py`` multiplies the
    base instead: ``base = base * rope_ratio`` (ztxz16/fastllm #374; intel/ipex-llm PR #11303; alibaba/
    rtp-llm ``models/chat_glm_v3.py`` ``rope_theta * rope_ratio``) -> base 500000, positions unscaled.
    The value 50 for the 32k model also appears in mindspore-lab/mindformers
    ``research/glm32k/predict_glm32k.yaml`` (``seq_length: 32768``, ``rope_ratio: 50``)."""
    return RopeConfig(128, layout="interleaved", rotary_dim=64, base=10000.0 * 50)


def _glm_4_9b() -> RopeConfig:
    """THUDM/glm-4-9b-chat ``config.json`` (the 128k GLM-4-9B release): ``kv_channels`` 128, ``rope_ratio``
    500, ``seq_length`` 131072, ``original_rope`` true. ``modeling_chatglm.py`` (ChatGLM3 form):
    ``base = 10000 * rope_ratio`` = 5e6, RoPE on the first 64 of 128 channels, interleaved pairs; vLLM
    ``model_executor/models/chatglm.py``: ``get_rope(head_dim, rotary_dim=head_dim // 2,
    base=10000 * rope_ratio, is_neox_style=not original_rope)``. HF-native ``models/glm``: partial
    rotary factor 0.5, interleaved."""
    return RopeConfig(128, layout="interleaved", rotary_dim=64, base=10000.0 * 500)


def _deepseek_v2_lite() -> RopeConfig:
    """deepseek-ai/DeepSeek-V2-Lite ``config.json``: ``qk_rope_head_dim`` 64 (the MLA rope sub-head; the
    128-dim ``qk_nope`` part is not rotated), ``rope_theta`` 10000, ``rope_scaling`` ``{type: yarn,
    factor: 40, original_max_position_embeddings: 4096, beta_fast: 32, beta_slow: 1, mscale: 0.707,
    mscale_all_dim: 0.707}``. Attention factor ``get_mscale(40, 0.707) / get_mscale(40, 0.707) = 1``
    (DeepSeek applies ``get_mscale(40, mscale_all_dim)**2`` to the softmax scale instead, outside RoPE).
    Interleaved: ``modeling_deepseek.py`` de-interleaves q/k (``view(..., d // 2, 2).transpose``) before
    ``rotate_half``, which is the interleaved rotation of the stored channels."""
    return RopeConfig(
        64,
        layout="interleaved",
        base=10000.0,
        scaling=YaRN(
            40.0,
            original_max_position=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=0.707,
            mscale_all_dim=0.707,
        ),
    )


_PRESETS: dict[str, Callable[[], RopeConfig]] = {
    "llama-2-7b": _llama_2_7b,
    "llama-3.1-8b": _llama_3_1_8b,
    "mistral-7b": _mistral_7b,
    "qwen2.5-7b": _qwen2_5_7b,
    "qwen2.5-7b-yarn": _qwen2_5_7b_yarn,
    "phi-3.5-mini": _phi_3_5_mini,
    "gpt-j-6b": _gpt_j_6b,
    "gpt-neox-20b": _gpt_neox_20b,
    "chatglm-6b": _chatglm_6b,
    "chatglm2-6b": _chatglm2_6b,
    "chatglm3-6b": _chatglm2_6b,
    "chatglm2-6b-32k": _chatglm2_6b_32k,
    "chatglm3-6b-32k": _chatglm3_6b_32k,
    "glm-4-9b": _glm_4_9b,
    "deepseek-v2-lite": _deepseek_v2_lite,
}


def preset_names() -> tuple[str, ...]:
    """The known preset names, in a stable order."""
    return tuple(_PRESETS)


def preset(name: str) -> RopeConfig:
    """The :class:`~rope_ref.RopeConfig` of a popular model, e.g. ``preset("llama-3.1-8b")``.

    See each preset's docstring (``help(rope_ref.presets)``) for the public config it came from. Note
    ``"chatglm-6b"`` is the per-half config of ChatGLM-6B's 2D scheme (use :mod:`rope_ref.chatglm`).
    Raises ``ValueError`` listing the known names for an unknown one.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__} {name!r:.60}")
    try:
        build = _PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(_PRESETS)}") from None
    return build()


def preset_doc(name: str) -> str:
    """The docstring (source citation) of preset ``name``."""
    preset(name)  # validates the name
    return _PRESETS[name].__doc__ or ""
