"""Build a :class:`~rope_ref.config.RopeConfig` from a Hugging Face ``config.json``; read any HF config.

Every ``from_hf`` of the oracle takes a config three ways (:func:`config_dict`, the one reader): a dict
(a parsed ``config.json`` or ``PretrainedConfig.to_dict()``), a path (``str`` / ``os.PathLike``) to a
``config.json`` (a regular file of at most :data:`MAX_CONFIG_BYTES`), or an object with ``to_dict()``
(a transformers ``PretrainedConfig``; transformers is never imported). :func:`model_family` says which
oracle reads a config (1D, M-RoPE, MLA, per-layer, vision, ChatGLM-6B 2D).
The rules follow transformers 5.23 (``src/transformers/modeling_rope_utils.py``:
``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`` / ``standardize_rope_params`` and the
``_compute_*_parameters`` functions; each model's ``configuration_*.py`` / ``modeling_*.py`` for the
family rules below). Per family keys: ``docs/scaling.md``.

* rope dict: ``rope_scaling`` if present and non-empty, else ``rope_parameters``; its type is
  ``rope_type``, else the legacy ``type``, else ``"default"``. A dict keyed by layer type (Gemma 3)
  needs ``layer_type``; a ``layer_type`` for a config that has one rope is an error.
* base: the rope dict's ``rope_theta``, else the top-level ``rope_theta`` (``rotary_emb_base`` for
  GPT-NeoX, ``rope_local_base_freq`` for Gemma 3 sliding layers, times ``rope_ratio`` for ChatGLM3 and
  GLM-4; ChatGLM2-6B-32k, named by ``_name_or_path``, divides positions by it instead: linear scaling),
  else the model type's default in transformers (:data:`DEFAULT_THETA`); unknown model types need it.
* rotary fraction: the rope dict's ``partial_rotary_factor``, else the top-level one (transformers
  ``setdefault``), else ``rotary_pct`` (GPT-NeoX), else the model type's default (GPT-NeoX 0.25,
  StableLM 0.25, Phi-1/2 0.5, GLM 0.5), else 1. GPT-J gives the width directly as ``rotary_dim``.
* head size: ``qk_rope_head_dim`` (DeepSeek MLA: transformers sets ``head_dim = qk_rope_head_dim``),
  else ``head_dim``, else ``kv_channels`` (ChatGLM2/3), else ``hidden_size / num_attention_heads``;
  rotary width ``int(head_size * fraction)`` (truncation, as transformers; never ``round``).
* original context for ``yarn``, ``llama3`` and ``longrope``: a top-level
  ``original_max_position_embeddings`` wins (the Phi-3 exception), else the rope dict's, else
  ``max_position_embeddings``. ``dynamic`` uses ``max_position_embeddings`` and needs it.
* YaRN ``factor``: the explicit value wins (transformers PR #40320); derived as
  ``max_position_embeddings / original_max_position_embeddings`` only when missing. LongRoPE likewise.
* layout: decided by ``rope_interleave`` (DeepSeek-V3, Kimi-K2), ``original_rope`` (ChatGLM2/3), else
  by ``model_type`` (:data:`LAYOUT_BY_MODEL_TYPE`). When decided, ``layout`` may be omitted; a
  contradicting ``layout`` is an error naming the deciding key. Otherwise ``layout`` is required.
* proportional RoPE (Gemma 4, LFM3): the whole head rotates with zero-frequency pairs past the fraction
  (:class:`~rope_ref.scaling.Proportional`); per-layer head sizes come from ``per_layer_config`` (or
  Gemma 4's ``global_head_dim``); a model type's attribute aliases (DBRX ``d_model``, Zamba2
  ``attention_head_dim``) are read; an MLA ``partial_rotary_factor`` of the whole ``head_dim`` that names
  ``qk_rope_head_dim`` (Mistral 4, DeepSeek-V4) rotates the rope part whole.
* a key about rotary embeddings that rope-ref does not understand is an error, never ignored
  (:data:`UNDERSTOOD_KEYS`); so are ALiBi Falcon (no rotary embedding) and ChatGLM-6B's 2D positions
  (see :mod:`rope_ref.chatglm`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Mapping
from typing import Any

from ._arrays import check_int, check_real
from .config import LAYOUTS, RopeConfig
from .scaling import LongRoPE, scaling_from_hf

__all__ = [
    "config_dict",
    "read_config_file",
    "model_family",
    "model_families",
    "FAMILIES",
    "VISION_RULE_BY_MODEL_TYPE",
    "vision_part",
    "MAX_CONFIG_BYTES",
    "rope_config_from_hf",
    "rope_configs_from_hf",
    "infer_layout",
    "LAYOUT_BY_MODEL_TYPE",
    "DEFAULT_THETA",
    "UNDERSTOOD_KEYS",
]

_NEEDS_ORIGINAL = ("yarn", "llama3", "longrope")

#: Pairing layout fixed by the model's code in transformers (``rotate_half`` -> half; GPT-J
#: ``rotate_every_two``, Cohere's and GLM's interleaved ``rotate_half``, complex ``freqs_cis`` in
#: DeepSeek-V2 and Llama 4 -> interleaved). HF-format Llama/Mistral/Qwen checkpoints are permuted
#: for ``rotate_half`` (``convert_llama_weights_to_hf.py``), so they are half.
LAYOUT_BY_MODEL_TYPE = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3",
            "gemma3_text",
            "phi",
            "phi3",
            "phimoe",
            "stablelm",
            "gpt_neox",
            "falcon",
            "RefinedWeb",
            "RefinedWebModel",
            "internlm",
            "internlm2",
            "internlm3",
        ),
        "half",
    ),
    **dict.fromkeys(
        ("gptj", "cohere", "cohere2", "glm", "glm4", "deepseek_v2", "llama4", "llama4_text"), "interleaved"
    ),
}

# Decided by a key (with its default when absent) rather than by the model type alone.
_INTERLEAVE_KEY_TYPES = {"deepseek_v3": True, "kimi_k2": True}  # rope_interleave, default True
_CHATGLM_TYPES = ("chatglm",)  # original_rope: True -> interleaved (vLLM chatglm.py; HF-Hub code)

#: transformers' ``default_theta`` of each model type, used when a config omits its base.
DEFAULT_THETA = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "phi",
            "phi3",
            "stablelm",
            "gpt_neox",
            "gptj",
            "falcon",
            "RefinedWeb",
            "RefinedWebModel",
            "glm",
            "glm4",
            "deepseek_v2",
            "deepseek_v3",
            "internlm2",
            "internlm3",
            "chatglm",
        ),
        10000.0,
    ),
    "cohere": 500000.0,
    "llama4": 500000.0,
    "llama4_text": 500000.0,
    "mixtral": 1000000.0,
}

# transformers' default rotary fraction where the model type has one other than 1.
_DEFAULT_FRACTION = {"gpt_neox": 0.25, "stablelm": 0.25, "phi": 0.5, "glm": 0.5, "glm4": 0.5}
_GEMMA3_TYPES = ("gemma3", "gemma3_text")
_GEMMA3_LAYERS = ("full_attention", "sliding_attention")

#: Top-level keys about rotary embeddings that rope-ref reads (or knows not to change the rotation).
#: Any other top-level key containing "rope" or "rotary" is refused rather than ignored.
UNDERSTOOD_KEYS = frozenset(
    {
        "rope_scaling",
        "rope_parameters",
        "rope_theta",
        "rotary_emb_base",
        "rotary_pct",
        "rotary_dim",
        "partial_rotary_factor",
        "rope_interleave",
        "rope_local_base_freq",
        "rope_ratio",
        "qk_rope_head_dim",
        "original_rope",
        # Which layers use RoPE at all (Llama 4's NoPE layers, SmolLM3): not how RoPE rotates.
        "no_rope_layers",
        "no_rope_layer_interval",
        "use_rope",
        # Flash-attention rotary kernel switches (InternLM2, Phi): implementation choices, same maths.
        "use_flash_rotary",
        # Zamba2's switch for RoPE in its shared attention blocks (False: no RoPE; checked in _check_keys).
        "use_mem_rope",
        # Molmo2: the layers that use the rope dict's scaling; the others use the same base unscaled
        # (rope_configs_from_hf gives both, "scaled" and "unscaled").
        "rope_scaling_layers",
        # DeepSeek-V4: the compress layers' base, which transformers copies into
        # rope_parameters["compress"]["rope_theta"] (checked against it in _check_keys).
        "compress_rope_theta",
    }
)


#: Largest ``config.json`` read from a path (a real one is a few kB).
MAX_CONFIG_BYTES = 16 * 2**20
_MAX_DEPTH = 64


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of the float64 range (max {sys.float_info.max:.4g})")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number (NaN and Infinity are not allowed)")


def _check_json(obj: object, where: str) -> None:
    """Refuse deep nesting and integers no float can hold, naming the key (iteratively)."""
    stack: list[tuple[object, str, int]] = [(obj, "", 0)]
    while stack:
        item, key, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise ValueError(f"{where}: JSON nested deeper than {_MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, str(k), depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, key, depth + 1) for v in item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > sys.float_info.max:
            raise ValueError(
                f"{where}: {key or 'a value'} is a {len(str(abs(item)))}-digit integer, beyond the float64 "
                f"range (max {sys.float_info.max:.4g})"
            )


def read_config_file(path: str | os.PathLike, argument: str = "config") -> dict:
    """Read a ``config.json``: a regular file of at most :data:`MAX_CONFIG_BYTES` holding a JSON object
    (the rules of ``rope_ref.cli.common.read_json_config``, which can call this with its ``argument``).

    Unreadable files, bad UTF-8/JSON, NaN/Infinity, numbers beyond float64 and nesting deeper than 64
    levels raise a one-line ``ValueError`` starting ``f"{argument} {path}: "``.
    """
    where = f"{argument} {os.fspath(path)}"
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where}: not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"{where}: {st.st_size} bytes, more than the limit of {MAX_CONFIG_BYTES}")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        config = json.loads(raw.decode("utf-8"), parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested deeper than {_MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    _check_json(config, where)
    if not isinstance(config, dict):
        raise ValueError(f"{where}: must hold a JSON object, got {type(config).__name__}")
    return config


_ACCEPTED = "a dict (a parsed config.json), a path to a config.json, or an object with to_dict()"


def config_dict(config: Any) -> Mapping[str, Any]:
    """An HF config as a mapping: a dict as it is, a path read by :func:`read_config_file`, or
    ``config.to_dict()`` (transformers ``PretrainedConfig``). Anything else is a one-line ``TypeError``."""
    if isinstance(config, Mapping):
        return config
    if isinstance(config, (str, os.PathLike)):
        return read_config_file(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict) and not isinstance(config, type):
        out = to_dict()
        if not isinstance(out, Mapping):
            raise TypeError(
                f"config.to_dict() of a {type(config).__name__} must return a dict, got {type(out).__name__}"
            )
        return out
    raise TypeError(f"config must be {_ACCEPTED}; got {type(config).__name__}")


def _rope_dict(config: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
    scaling = config.get("rope_scaling")
    raw = scaling or config.get("rope_parameters") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"rope_scaling / rope_parameters must be a dict, got {type(raw).__name__}")
    nested = any(isinstance(v, Mapping) for v in raw.values()) and all(
        isinstance(v, Mapping) or v is None for v in raw.values()
    )
    if nested:
        if layer_type is None:
            raise ValueError(
                f"rope_parameters is keyed by layer type {sorted(raw)}; pass layer_type= to choose one "
                "(or use rope_configs_from_hf for all of them)"
            )
        if layer_type not in raw:
            raise ValueError(f"layer_type {layer_type!r} is not in rope_parameters (has {sorted(raw)})")
        raw = raw[layer_type] or {}
    elif layer_type is not None and config.get("model_type") not in _GEMMA3_TYPES:
        raise ValueError(f"layer_type={layer_type!r} given but rope_parameters is not keyed by layer type")
    return dict(raw)


def _head_size(config: Mapping[str, Any]) -> int:
    for key in ("qk_rope_head_dim", "head_dim", "kv_channels"):
        if config.get(key) is not None:
            return check_int(config[key], key, minimum=2)
    hidden = config.get("hidden_size", config.get("n_embd"))  # GPT-J spells them n_embd / n_head
    heads = config.get("num_attention_heads", config.get("n_head"))
    if hidden is None or heads is None:
        missing = "hidden_size" if hidden is None else "num_attention_heads"
        raise ValueError(f"config has no 'head_dim' and is missing {missing!r} to derive it")
    hidden = check_int(hidden, "hidden_size", minimum=1)
    heads = check_int(heads, "num_attention_heads", minimum=1)
    if hidden % heads:
        raise ValueError(f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})")
    return hidden // heads


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config of a multimodal wrapper (Llama 4, Gemma 3): ``text_config``."""
    text = config.get("text_config")
    rope_keys = ("rope_theta", "rope_scaling", "rope_parameters", "hidden_size", "head_dim")
    if isinstance(text, Mapping) and not any(k in config for k in rope_keys):
        return text
    return config


def _check_keys(config: Mapping[str, Any]) -> None:
    unknown = sorted(
        k for k in config if ("rope" in k.lower() or "rotary" in k.lower()) and k not in UNDERSTOOD_KEYS
    )
    if unknown:
        raise ValueError(
            f"config has keys about rotary embeddings that rope-ref does not understand: {unknown}; "
            "refusing rather than ignoring them (see docs/scaling.md for the keys of each family)"
        )
    if config.get("alibi"):
        raise ValueError("config has alibi=True: this Falcon variant uses ALiBi, not rotary embeddings")
    if config.get("position_encoding_2d"):
        raise ValueError(
            "config has position_encoding_2d=True: ChatGLM-6B's 2D rotary is rope_ref.chatglm.apply_2d, "
            "not one RopeConfig"
        )
    if config.get("use_rope") is False:
        raise ValueError("config has use_rope=False: the model uses no rotary embedding")
    if config.get("use_mem_rope") is False:
        raise ValueError("config has use_mem_rope=False: the model uses no rotary embedding")
    compress = config.get("compress_rope_theta")
    nested = (config.get("rope_parameters") or {}).get("compress") if compress is not None else None
    if compress is not None and (not isinstance(nested, Mapping) or nested.get("rope_theta") != compress):
        raise ValueError(
            f"compress_rope_theta={compress!r} needs rope_parameters keyed by 'main' / 'compress' with "
            "compress.rope_theta equal to it (as transformers' DeepseekV4Config writes them)"
        )


def infer_layout(config: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(layout, deciding key)`` fixed by the config, or ``(None, reason)`` when it does not say."""
    config = _text_config(config)
    model_type = config.get("model_type")
    if "rope_interleave" in config or model_type in _INTERLEAVE_KEY_TYPES:
        value = config.get("rope_interleave", _INTERLEAVE_KEY_TYPES.get(model_type, True))
        if value is None:
            value = True
        shown = f"rope_interleave={value!r}" + ("" if "rope_interleave" in config else " (its default)")
        return ("interleaved" if value else "half"), shown
    if model_type in _CHATGLM_TYPES:
        value = config.get("original_rope", True)
        return ("interleaved" if value else "half"), f"original_rope={value!r} (model_type 'chatglm')"
    if model_type in LAYOUT_BY_MODEL_TYPE:
        return LAYOUT_BY_MODEL_TYPE[model_type], f"model_type={model_type!r}"
    return None, f"model_type={model_type!r}" if model_type else "no model_type"


def _layout(config: Mapping[str, Any], layout: str | None) -> str:
    inferred, decided_by = infer_layout(config)
    if layout is None:
        if inferred is None:
            raise ValueError(
                f"layout is required: the config does not fix the pairing layout ({decided_by}); pass "
                f"layout= one of {LAYOUTS}"
            )
        return inferred
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if inferred is not None and layout != inferred:
        raise ValueError(
            f"layout={layout!r} contradicts the config: {decided_by} means layout={inferred!r} "
            "(omit layout= to use it)"
        )
    return layout


def _base(config: Mapping[str, Any], rope: dict[str, Any], layer_type: str | None) -> float:
    model_type = config.get("model_type")
    theta = rope.pop("rope_theta", None)
    gemma3_local = model_type in _GEMMA3_TYPES and layer_type == "sliding_attention"
    if theta is None and gemma3_local:
        theta = config.get("rope_local_base_freq", 10000.0)
    for key in ("rope_theta", "rotary_emb_base"):
        if theta is None:
            theta = config.get(key)
    if theta is None:
        theta = 1_000_000.0 if model_type in _GEMMA3_TYPES else DEFAULT_THETA.get(model_type)
    if theta is None:
        raise ValueError(
            "config is missing the key 'rope_theta' (top level or inside rope_parameters) and its "
            f"model_type {model_type!r} has no known default base"
        )
    theta = check_real(theta, "rope_theta")
    if model_type in _CHATGLM_TYPES and not _chatglm2_interpolates(config):
        theta *= _rope_ratio(config)
    return theta


def _rope_ratio(config: Mapping[str, Any]) -> float:
    value = config.get("rope_ratio")
    return 1.0 if value is None else check_real(value, "rope_ratio")


def _chatglm2_interpolates(config: Mapping[str, Any]) -> bool:
    """ChatGLM2-6B-32k's Hub code divides positions by ``rope_ratio``; ChatGLM3 and GLM-4 multiply the base.

    The two releases share ``model_type`` "chatglm"; only ``_name_or_path`` tells them apart.
    """
    return "chatglm2" in str(config.get("_name_or_path", "")).lower() and _rope_ratio(config) != 1.0


def _rotary_dim(config: Mapping[str, Any], rope: dict[str, Any], head_dim: int) -> int:
    model_type = config.get("model_type")
    if model_type == "gptj" or (
        config.get("rotary_dim") is not None and "partial_rotary_factor" not in config
    ):
        if config.get("rotary_dim") is not None:
            rotary_dim = check_int(config["rotary_dim"], "rotary_dim", minimum=2)
        else:
            rotary_dim = 64  # GPTJConfig default
        rope.pop("partial_rotary_factor", None)
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim ({rotary_dim}) exceeds the head size ({head_dim})")
        return rotary_dim
    if model_type in _CHATGLM_TYPES:  # RotaryEmbedding(rotary_dim // 2): the first half of each head
        rope.pop("partial_rotary_factor", None)
        return head_dim // 2
    factor = rope.pop("partial_rotary_factor", None)
    for key in ("partial_rotary_factor", "rotary_pct"):
        if factor is None:
            factor = config.get(key)
    if factor is None:
        factor = _DEFAULT_FRACTION.get(model_type, 1.0)
    factor = check_real(factor, "partial_rotary_factor")
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], got {factor}")
    rotary_dim = int(head_dim * factor)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"partial_rotary_factor={factor} with head size {head_dim} gives rotary width {rotary_dim} "
            "(int(head size * factor), as transformers), which is not a positive even integer"
        )
    return rotary_dim


def _rope_part_width(config: Mapping[str, Any], fraction: Any, rotary_dim: int) -> int:
    """The rotary width where ``partial_rotary_factor`` is a fraction of the whole ``head_dim`` and names
    the ``qk_rope_head_dim`` rope part (Mistral 4: 128 * 0.5 = 64; DeepSeek-V4: 512 * 0.125 = 64;
    ``models/deepseek_v4/configuration_deepseek_v4.py`` sets ``qk_rope_head_dim = int(head_dim * f)``)."""
    rope_part, whole = config.get("qk_rope_head_dim"), config.get("head_dim")
    if fraction is None or rope_part is None or whole is None or rope_part == whole:
        return rotary_dim
    whole = check_int(whole, "head_dim", minimum=2)
    if int(whole * check_real(fraction, "partial_rotary_factor")) == rope_part:
        return check_int(rope_part, "qk_rope_head_dim", minimum=2)
    return rotary_dim


def rope_config_from_hf(
    config: Any, *, layout: str | None = None, layer_type: str | None = None
) -> RopeConfig:
    """The :class:`RopeConfig` an HF model with this config uses (see module docstring); ``config`` is
    anything :func:`config_dict` reads."""
    config = config_dict(config)
    outer = config
    config = _text_config(config)
    config = _aliased(_layer_overrides(config, layer_type))
    _check_keys(config)
    layout = _layout(outer, layout)
    model_type = config.get("model_type")
    if model_type in _GEMMA3_TYPES and layer_type is None:
        raise ValueError(
            "Gemma 3 has two rotary embeddings: pass layer_type='full_attention' (global, rope_theta and "
            "rope_scaling) or 'sliding_attention' (local, rope_local_base_freq), or use rope_configs_from_hf"
        )
    if model_type in _GEMMA3_TYPES and layer_type not in _GEMMA3_LAYERS:
        raise ValueError(f"layer_type must be one of {_GEMMA3_LAYERS} for Gemma 3, got {layer_type!r}")
    rope = _rope_dict(config, layer_type)
    nested = isinstance(config.get("rope_parameters"), Mapping) and layer_type in (
        config.get("rope_parameters") or {}
    )
    if model_type in _GEMMA3_TYPES and layer_type == "sliding_attention" and not nested:
        rope = {}  # raw Gemma 3 config.json: rope_scaling is the global layers' only
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    rope["rope_type"] = rope_type
    rope.pop("type", None)

    theta = _base(config, rope, layer_type)
    head_dim = _head_size(config)
    fraction = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if rope_type == "proportional":  # the whole head; zero frequencies past the fraction (Proportional)
        rope["partial_rotary_factor"] = 1.0 if fraction is None else fraction
        rotary_dim = head_dim
    else:
        rotary_dim = _rotary_dim(config, rope, head_dim)
        rotary_dim = _rope_part_width(config, fraction, rotary_dim)

    max_pos = config.get("max_position_embeddings")
    if max_pos is None and model_type in _CHATGLM_TYPES:
        max_pos = config.get("seq_length")
    if max_pos is not None:
        max_pos = check_int(max_pos, "max_position_embeddings", minimum=1)
    if rope_type in _NEEDS_ORIGINAL and config.get("original_max_position_embeddings") is not None:
        rope["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    if rope_type == "dynamic" and max_pos is None:
        raise ValueError("config is missing the key 'max_position_embeddings' (needed by dynamic NTK)")
    if model_type in _CHATGLM_TYPES and _chatglm2_interpolates(config):
        if rope_type != "default":
            raise ValueError(
                "ChatGLM2 rope_ratio (position interpolation) together with rope_scaling is ambiguous"
            )
        rope = {"rope_type": "linear", "factor": _rope_ratio(config)}
    scaling = scaling_from_hf(rope, max_position_embeddings=max_pos)
    if isinstance(scaling, LongRoPE):
        for key in ("short_factor", "long_factor"):
            if len(getattr(scaling, key)) != rotary_dim // 2:
                raise ValueError(
                    f"rope_scaling key {key!r} must have rotary_dim // 2 = {rotary_dim // 2} entries, "
                    f"got {len(getattr(scaling, key))}"
                )
    return RopeConfig(head_dim, layout=layout, rotary_dim=rotary_dim, base=theta, scaling=scaling)


#: Attribute aliases of a model type (its config class's ``attribute_map``, which ``to_dict`` and
#: ``config.json`` do not apply): ``models/<type>/configuration_<type>.py`` of DBRX, Moonshine (its
#: one rotary reads ``num_attention_heads``, the decoder's) and Zamba2.
_ALIASES = {
    "dbrx": {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "max_position_embeddings": "max_seq_len",
    },
    "moonshine": {"num_attention_heads": "decoder_num_attention_heads"},
    "zamba2": {"head_dim": "attention_head_dim"},
}
#: Model types whose full-attention layers take ``head_dim = global_head_dim`` when the config has no
#: ``per_layer_config`` (``models/gemma4/configuration_gemma4.py`` ``__post_init__``; default 512).
_GLOBAL_HEAD_DIM_TYPES = ("gemma4_text", "gemma4_unified_text", "diffusion_gemma", "embedding_gemma2")


def _aliased(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` with its model type's attribute aliases filled in (an explicit key wins)."""
    aliases = _ALIASES.get(config.get("model_type"), {})
    filled = {key: config[src] for key, src in aliases.items() if key not in config and src in config}
    return {**config, **filled} if filled else config


def _layer_overrides(config: Mapping[str, Any], layer_type: str | None) -> Mapping[str, Any]:
    """``config`` with the per-layer overrides of the layers of ``layer_type`` applied (Gemma 4's
    ``per_layer_config`` keyed by layer index, else its ``global_head_dim`` for full attention;
    ``transformers/integrations/heterogeneity/configuration_utils.py``). The layers of one type must
    agree, or there is no single rotary for the type."""
    per_layer = config.get("per_layer_config")
    types = config.get("layer_types")
    if layer_type is None or not isinstance(types, list):
        return config
    if not isinstance(per_layer, Mapping):
        glob = config.get("global_head_dim")
        gemma4 = config.get("model_type") in _GLOBAL_HEAD_DIM_TYPES
        if glob is not None and layer_type == "full_attention" and gemma4:
            return {**config, "head_dim": glob}
        return config
    try:
        by_index = {int(k): v for k, v in per_layer.items()}
    except (TypeError, ValueError):
        shown = sorted(map(str, per_layer))
        raise ValueError(f"per_layer_config keys must be layer indices, got {shown}") from None
    sized = any(config.get(k) is not None for k in ("qk_rope_head_dim", "head_dim"))
    found = [_rotary_part(by_index.get(i) or {}, sized) for i, t in enumerate(types) if t == layer_type]
    if any(f != found[0] for f in found):
        raise ValueError(
            f"per_layer_config gives the {layer_type!r} layers different overrides; no single rotary for them"
        )
    return {**config, **found[0]} if found and found[0] else config


_HEAD_KEYS = ("head_dim", "hidden_size", "num_attention_heads", "max_position_embeddings")


def _rotary_part(overrides: Mapping[str, Any], sized: bool) -> dict[str, Any]:
    """The overrides that can change a rotary (head size keys, anything about rope / rotary); a layer's
    ``sliding_window`` does not, nor do ``hidden_size`` / ``num_attention_heads`` where the config gives
    the head size (``sized``: ``head_dim`` or ``qk_rope_head_dim``) and the override does not."""
    keys = ("head_dim", "max_position_embeddings") if sized else _HEAD_KEYS
    return {k: v for k, v in overrides.items() if k in keys or "rope" in k or "rotary" in k}


def _keyed_by_layer_type(params: Any) -> bool:
    """``rope_parameters`` keyed by layer type: every value a dict, or None for a layer type without RoPE."""
    return (
        isinstance(params, Mapping)
        and any(isinstance(v, Mapping) for v in params.values())
        and all(isinstance(v, Mapping) or v is None for v in params.values())
    )


def rope_configs_from_hf(config: Any, *, layout: str | None = None) -> dict[str, RopeConfig]:
    """Every rotary embedding of the model, keyed by layer type (``{"default": cfg}`` for one rope).

    Gemma 3 gives ``{"full_attention": global, "sliding_attention": local}``; a ``rope_parameters``
    dict keyed by layer type gives one entry per key.
    """
    config = config_dict(config)
    text = _text_config(config)
    params = text.get("rope_parameters")
    if text.get("model_type") in _GEMMA3_TYPES:
        keys: tuple[str, ...] = _GEMMA3_LAYERS
    elif _keyed_by_layer_type(
        params
    ):  # a None entry: those layers use no RoPE (models/beam/modeling_beam.py)
        keys = tuple(k for k, v in params.items() if v is not None)
    elif _some_layers_unscaled(text):
        scaled = rope_config_from_hf(config, layout=layout)
        return {"scaled": scaled, "unscaled": scaled.replace(scaling=None)}
    else:
        return {"default": rope_config_from_hf(config, layout=layout)}
    return {key: rope_config_from_hf(config, layout=layout, layer_type=key) for key in keys}


def _some_layers_unscaled(config: Mapping[str, Any]) -> bool:
    """Molmo2: ``rope_scaling_layers`` names fewer than all ``num_hidden_layers`` layers (the others use
    the same base unscaled; ``models/molmo2/modeling_molmo2.py`` ``Molmo2RotaryEmbedding(scaled=False)``)."""
    listed = config.get("rope_scaling_layers")
    layers = config.get("num_hidden_layers")
    return isinstance(listed, list) and isinstance(layers, int) and set(range(layers)) - set(listed) != set()


#: What :func:`model_family` answers, and the function that reads a config of that family.
FAMILIES = {
    "rope": "rope_ref.RopeConfig.from_hf (rope_ref.hf_config.rope_configs_from_hf: one per layer type)",
    "mrope": "rope_ref.mrope.from_hf -> MRopeModel (multi-axis text RoPE of Qwen2/2.5/3-VL, GLM-4V)",
    "mla": "rope_ref.mla.from_hf -> MLAConfig (DeepSeek-V2/V3, Kimi-K2 rope part)",
    "layers": "rope_ref.layers.from_hf -> LayerRopes (Gemma 3 local/global, Llama 4 NoPE layers)",
    "vision": "rope_ref.vision_rope.from_hf -> MultiAxisRope (2D ViT RoPE: Qwen2-VL family, Pixtral)",
    "chatglm-2d": "rope_ref.multiaxis.from_hf -> MultiAxisRope (ChatGLM-6B position_encoding_2d)",
}

#: Vision tower ``model_type`` -> the 2D rule of :mod:`rope_ref.vision_rope` that reads it.
VISION_RULE_BY_MODEL_TYPE = {
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"), "qwen2-vl"),
    # the towers' own model_type in transformers 5.x (models/qwen2_vl/configuration_qwen2_vl.py ...)
    **dict.fromkeys(
        ("qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision"), "qwen2-vl"
    ),
    "pixtral": "pixtral",
    # transformers 5.x "axial" vision rotaries (rope_ref.vision_rope.axial; each rule cites its file).
    **dict.fromkeys(
        (
            "mlcd_vision_model",
            "exaone4_5_vision",
            "glm5_next_vision",
            "lfm3_vl_vision",
            "video_llama_3_vision",
            "glm4v_vision",
            "glm4v_moe_vision",
            "glm_ocr_vision",
            "glm_image_vision",
            "muse_glimmer_vision",
            "muse_spark_vision",
        ),
        "axial",
    ),
    "inkling2_vision": "axial-wh-interleaved",
    "sam3_vit_model": "axial-interleaved",
    "kimi_k25_vision": "axial-alternate",
}
_MROPE_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe")
_MROPE_TYPES += tuple(f"{t}_text" for t in _MROPE_TYPES)  # the text sub-configs of transformers 5.x
_LAYER_TYPES = (*_GEMMA3_TYPES, "llama4", "llama4_text")


def _vision_only(config: Mapping[str, Any]) -> bool:
    """A vision tower's own config (``vision_config`` given alone): patches, no vocabulary."""
    return (
        "patch_size" in config
        and "vocab_size" not in config
        and not any(isinstance(config.get(k), Mapping) for k in ("text_config", "vision_config"))
    )


def vision_part(config: Any) -> tuple[str | None, Mapping[str, Any]] | None:
    """``(rule, vision config)`` of a config with a vision tower (``rule`` None when rope-ref has no
    oracle for its ``model_type``), or None when it has none. ``config`` may be the tower's own."""
    config = config_dict(config)
    if _vision_only(config):
        return VISION_RULE_BY_MODEL_TYPE.get(config.get("model_type")), config
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    return VISION_RULE_BY_MODEL_TYPE.get(vision.get("model_type") or config.get("model_type")), vision


def model_families(config: Any) -> tuple[str, ...]:
    """Every oracle family that reads ``config`` (keys of :data:`FAMILIES`), the text model's first.

    A multimodal wrapper adds ``"vision"`` when its tower is one rope-ref knows (Qwen2-VL ->
    ``("mrope", "vision")``, Llava with Pixtral -> ``("rope", "vision")``); a tower's own config is
    ``("vision",)``. The answer comes from the keys alone; the family's ``from_hf`` validates the rest.
    """
    config = config_dict(config)
    vision = vision_part(config)
    if _vision_only(config):
        return ("vision",)
    text = _text_config(config)
    model_type = text.get("model_type")
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    params = text.get("rope_parameters")
    if (isinstance(rope, Mapping) and "mrope_section" in rope) or config.get("model_type") in _MROPE_TYPES:
        family = "mrope"
    elif text.get("qk_nope_head_dim") is not None:
        family = "mla"
    elif (
        model_type in _LAYER_TYPES
        or config.get("model_type") in _LAYER_TYPES
        or text.get("layer_rope_theta") is not None
        or _keyed_by_layer_type(params)
    ):
        family = "layers"
    elif text.get("position_encoding_2d"):
        family = "chatglm-2d"
    else:
        family = "rope"
    return (family, "vision") if vision is not None and vision[0] is not None else (family,)


def model_family(config: Any) -> str:
    """The oracle family of an HF config's text model (or of a vision tower's own config): one of
    ``"rope"``, ``"mrope"``, ``"mla"``, ``"layers"``, ``"vision"``, ``"chatglm-2d"``; :data:`FAMILIES`
    names the ``from_hf`` that reads each. ``config`` is anything :func:`config_dict` reads."""
    return model_families(config)[0]


def _from_hf(cls, config: Any, *, layout: str | None = None, layer_type: str | None = None) -> RopeConfig:
    """The RoPE of an HF config: a ``config.json`` dict, a path to one, or a ``PretrainedConfig``-like
    object with ``to_dict()`` (see :mod:`rope_ref.hf_config`).

    ``layout`` may be omitted where the config fixes it (``model_type``, ``rope_interleave``, ...);
    a contradicting one is an error. Gemma 3 needs ``layer_type`` (``"full_attention"`` or
    ``"sliding_attention"``); :func:`rope_ref.hf_config.rope_configs_from_hf` gives both.
    """
    return rope_config_from_hf(config, layout=layout, layer_type=layer_type)


# RopeConfig.from_hf is defined here, not in rope_ref.config: reading HF configs needs the scalings,
# which sit above RopeConfig. rope_ref/__init__.py imports this module, so the method is always there.
_from_hf.__name__ = "from_hf"
_from_hf.__qualname__ = "RopeConfig.from_hf"
RopeConfig.from_hf = classmethod(_from_hf)
