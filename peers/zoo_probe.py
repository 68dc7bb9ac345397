"""One transformers architecture's rotary embedding, probed: built from config defaults, called, judged.

:func:`discover` finds every ``transformers.models.<name>.modeling_<name>`` defining a class named
``*RotaryEmbedding`` (a text scan of the installed package, then imports of those modules only).
:func:`probe` builds each rotary class from the architecture's default config, calls it at realistic
positions (``0..63``, ``8000..8063`` and the last 64 before ``max_position_embeddings``), applies the
module's own ``apply_*rotary*`` function to random q and k (float64 where the module moves to it) and
compares with the oracle configured from the same config (:mod:`rope_ref.hf_config` ``model_family``)
under the tolerance model (:func:`rope_ref.tolerance.compare_output`). Nothing is downloaded.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["discover", "probe", "Verdict", "VERDICTS"]

#: Config flags that turn a model's RoPE off (Zamba2's shared attention); the zoo probes the rotary with
#: the flag on, and says so.
_ROPE_SWITCHES = ("use_mem_rope",)
#: The classes of the zoo page, best first.
VERDICTS = ("agrees", "finding", "candidate finding", "divergence", "not expressible", "not a RoPE", "error")
_ROTARY = re.compile(r"^class (\w+RotaryEmbedding)\b", re.M)
_B, _H, _S = 3, 2, 64


class Verdict(dict):
    """One rotary class's result: ``verdict``, ``detail``, ``ratio`` (worst err/tol), ``mechanism``."""


def _models_dir() -> str:
    import transformers

    return os.path.join(os.path.dirname(transformers.__file__), "models")


def discover() -> list[tuple[str, list[str]]]:
    """``[(model dir name, [rotary class names in file order])]``, sorted, from the installed package."""
    root = _models_dir()
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, f"modeling_{name}.py")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            classes = _ROTARY.findall(fh.read())
        if classes:
            found.append((name, classes))
    return found


# -- configs ---------------------------------------------------------------------------------------------
def _config_classes(name: str) -> list[type]:
    from transformers import PretrainedConfig

    try:
        mod = importlib.import_module(f"transformers.models.{name}.configuration_{name}")
    except ImportError:
        return []
    return [
        c
        for c in vars(mod).values()
        if isinstance(c, type) and issubclass(c, PretrainedConfig) and c.__module__ == mod.__name__
    ]


def _stem(cls_name: str, suffix: str) -> str:
    return cls_name[: -len(suffix)].lower() if cls_name.endswith(suffix) else cls_name.lower()


def _candidate_configs(name: str, rotary: str) -> list[Any]:
    """Default configs to try for ``rotary``: the config class whose name is the longest prefix of the
    rotary class's first, then sub-configs (text, vision) of every default config, then the rest."""
    stem = _stem(rotary, "RotaryEmbedding")
    made: list[tuple[int, Any]] = []
    for cls in _config_classes(name):
        try:
            cfg = cls()
        except Exception:  # noqa: BLE001 - a config that needs arguments is skipped here
            continue
        cstem = _stem(cls.__name__, "Config")
        score = len(cstem) if stem.startswith(cstem) else 0
        made.append((score, cfg))
        for key in ("text_config", "vision_config", "audio_config", "decoder_config", "encoder_config"):
            sub = getattr(cfg, key, None)
            if sub is not None and hasattr(sub, "to_dict"):
                sub_score = score + (1 if key.split("_")[0] in stem else 0) if score else 0
                if "vision" in stem and key == "vision_config":
                    sub_score += 50
                if "text" in stem and key == "text_config":
                    sub_score += 50
                made.append((sub_score, sub))
    made.sort(key=lambda t: -t[0])
    return [c for _, c in made]


def _build(rot_cls: type, configs: list[Any]) -> tuple[Any, Any]:
    """``(module, config)``: the first default config the rotary class accepts (``(config)`` or
    ``(config=config)``); else raises the last error."""
    last: Exception | None = None
    params = list(inspect.signature(rot_cls.__init__).parameters)[1:]
    typed = inspect.signature(rot_cls.__init__).parameters[params[0]].annotation if params else None
    if params and params[0] != "config" and isinstance(typed, type) and hasattr(typed, "to_dict"):
        return rot_cls(typed()), typed()  # a rotary built from a typed sub-config (EsmFold2's atom_config)
    if params and params[0] not in ("config",) and "config" not in params:
        raise TypeError(
            f"constructor {rot_cls.__name__}{inspect.signature(rot_cls.__init__)} takes no config"
        )
    for cfg in configs:
        try:
            return rot_cls(cfg), cfg
        except Exception as exc:  # noqa: BLE001 - try the next config
            last = exc
    raise last or TypeError("no configuration class could be built from its defaults")


# -- the HF side -----------------------------------------------------------------------------------------
def _positions(max_pos: int | None) -> np.ndarray:
    rows = [np.arange(64), 8000 + np.arange(64)]
    if max_pos and max_pos > 8128:
        rows.append(max_pos - 64 + np.arange(64))
    else:
        rows.append(4000 + np.arange(64))
    return np.stack(rows).astype(np.int64)


def _apply_fn(mod, config, rot_name: str):
    funcs = {n: f for n, f in vars(mod).items() if inspect.isfunction(f) and n.startswith("apply_")}
    funcs = {n: f for n, f in funcs.items() if "rotary" in n or "rope" in n}
    text = "visionrotary" not in rot_name.lower().replace("_", "")
    want = []
    if getattr(config, "rope_interleave", False):
        want.append("apply_rotary_pos_emb_interleave")
    want += ["apply_multimodal_rotary_pos_emb", "apply_rotary_pos_emb"] if text else []
    want += ["apply_rotary_pos_emb_vision", "apply_rotary_pos_emb_flashatt"] if not text else []
    for n in want:
        if n in funcs:
            return n, funcs[n]
    rest = sorted(n for n in funcs if ("vision" in n) != text)
    if rest:
        return rest[0], funcs[rest[0]]
    return None, None


def _call_apply(fn, q, k, cos, sin, config):
    sig = inspect.signature(fn).parameters
    kwargs = {}
    if "mrope_section" in sig:
        rp = getattr(config, "rope_parameters", None) or {}
        kwargs["mrope_section"] = rp.get("mrope_section")
    if "unsqueeze_dim" in sig:
        kwargs["unsqueeze_dim"] = 1
    if "position_ids" in sig:
        kwargs["position_ids"] = None
    names = list(sig)
    if len(names) > 1 and names[1] == "cos":  # a one-tensor apply(x, cos, sin, ...)
        kwargs.pop("position_ids", None)
        return fn(q, cos, sin, **kwargs)
    out = fn(q, k, cos, sin, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _rotate(fn, q, cos, sin, config):
    """The model's apply on q (B, H, S, D); where cos is narrower than the head and the apply function
    does not split (the attention does), the split is restated: rotate ``q[..., :w]``, keep the rest."""
    import torch

    width = cos.shape[-1]
    try:
        y = _call_apply(fn, q, q.clone(), cos, sin, config)
        if tuple(y.shape) == tuple(q.shape):
            return y, False
    except RuntimeError:
        if width >= q.shape[-1]:
            raise
    y = _call_apply(fn, q[..., :width], q[..., :width].clone(), cos, sin, config)
    return torch.cat([y, q[..., width:]], dim=-1), True


# -- the oracle side -------------------------------------------------------------------------------------
def _oracle_specs(cfg_dict: Mapping[str, Any], layout: str | None, layer_types: list[str] | None):
    """``{layer_type or "default": (MultiAxisRope, n_streams, note)}`` from the config, by model_family."""
    from rope_ref import mla, mrope
    from rope_ref.hf_config import model_family, rope_configs_from_hf
    from rope_ref.multiaxis import from_config

    family = model_family(cfg_dict)
    if family == "mrope":
        return family, {"default": mrope.from_hf(cfg_dict).rope}
    if family == "mla" and layer_types:  # per-layer-type MLA rope parts (dots3.note): one RopeConfig each
        return family, {k: from_config(v) for k, v in rope_configs_from_hf(cfg_dict, layout=layout).items()}
    if family == "mla":
        return family, {"default": from_config(mla.from_hf(cfg_dict, layout=layout).rope)}
    if family == "layers" and cfg_dict.get("layer_rope_theta") is not None:  # one rotary per distinct base
        from rope_ref import layers

        theta = (cfg_dict.get("rope_parameters") or {}).get("rope_theta")
        ropes = [r for r in layers.from_hf(cfg_dict, layout=layout).ropes if r is not None]
        return family, {"default": from_config(next((r for r in ropes if r.base == theta), ropes[0]))}
    if family in ("rope", "layers"):
        ropes = rope_configs_from_hf(cfg_dict, layout=layout)
        return family, {k: from_config(v) for k, v in ropes.items()}
    raise NotImplementedError(f"model_family {family!r}: no text-rotary oracle for this family in the zoo")


def _judge(x: np.ndarray, pos: np.ndarray, got: np.ndarray, spec, precision) -> tuple[float, int]:
    """Worst err/tol and the number of elements out of tolerance (rotation rule, multi-axis case)."""
    from rope_ref.conformance.cases.multiaxis import spec_to_dict

    from rope_ref import multiaxis, tolerance
    from rope_ref.case import Case

    expected = multiaxis.apply(x, pos, spec)
    case = Case(
        id="zoo",
        op="multiaxis_apply",
        config=None,
        inputs={"x": x, "positions": pos},
        expected={"y": expected},
        bug_class="",
        tolerance="rotation",
        params={"spec": spec_to_dict(spec)},
    )
    comps = tolerance.compare_output(case, "y", got, precision)
    worst = max(comps, key=lambda c: c.ratio)
    return float(worst.ratio), sum(c.n_bad for c in comps)


def probe(name: str, rot_name: str, seed: int = 0, rope_parameters: Mapping | None = None) -> Verdict:
    """Probe one rotary class of one architecture (see the module docstring); never raises.

    ``rope_parameters``: keys merged into the default config's ``rope_parameters`` (a rope variant)."""
    try:
        return _probe(name, rot_name, seed, rope_parameters)
    except Exception as exc:  # noqa: BLE001 - every failure is a classified row
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        return Verdict(verdict="error", detail=text[:300], ratio=None, mechanism="")


def _probe(name: str, rot_name: str, seed: int, variant: Mapping | None = None) -> Verdict:
    import torch
    from rope_ref.conformance.protocol import PrecisionPolicy

    from rope_ref.hf_config import infer_layout

    mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    rot_cls = getattr(mod, rot_name)
    try:
        rot, config = _build(rot_cls, _candidate_configs(name, rot_name))
    except Exception as exc:  # noqa: BLE001
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if isinstance(exc, (KeyError, IndexError)):  # the rotary's own __init__ reads what the config lacks
            return Verdict(
                verdict="candidate finding",
                detail=f"the default config cannot build its own rotary ({text})",
                ratio=None,
                mechanism="",
            )
        return Verdict(
            verdict="error", detail=f"cannot build from default config: {text}", ratio=None, mechanism=""
        )
    if variant:
        config.rope_parameters = {**(config.rope_parameters or {}), **variant}
        rot = rot_cls(config)
    switched = [k for k in _ROPE_SWITCHES if getattr(config, k, None) is False]
    for key in switched:  # the rotary the model uses when its switch is on
        setattr(config, key, True)
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, Mapping) and rp.get("rope_type") == "axial":  # a 2D-patch-id vision rotary
        return _probe_vision(mod, rot, config)
    fwd_params = [p for p in inspect.signature(rot.forward).parameters if p != "self"]
    if not any("position" in p for p in fwd_params):  # positions implied by the input's shape
        return Verdict(
            verdict="not expressible",
            detail=f"forward{tuple(fwd_params)} takes no position ids: the angles come from the input itself "
            "(the spatial shape of an image's features or patch centres, or timestamps), not from token "
            "positions; the zoo drives rotaries by position ids",
            ratio=None,
            mechanism="input-derived positions",
        )
    fn_name, fn = _apply_fn(mod, config, rot_name)
    if fn is None:
        return Verdict(
            verdict="not a RoPE", detail="module defines no apply_*rotary* function", ratio=None, mechanism=""
        )
    cfg_dict = config.to_dict()
    fwd = inspect.signature(rot.forward).parameters
    layer_types = None
    if "layer_type" in fwd:
        rp = cfg_dict.get("rope_parameters") or {}
        layer_types = sorted(k for k, v in rp.items() if isinstance(v, Mapping)) or None
        used = cfg_dict.get("layer_types")
        if layer_types and isinstance(used, list) and set(used) & set(layer_types):
            layer_types = sorted(set(used) & set(layer_types))  # the rotary builds the types in use only
    try:
        rot = rot.to(torch.float64)
        dtype = torch.float64
    except Exception:  # noqa: BLE001
        dtype = torch.float32
    max_pos = cfg_dict.get("max_position_embeddings")
    pos = _positions(max_pos if isinstance(max_pos, int) else None)
    layout, _ = infer_layout(cfg_dict)
    rng = np.random.default_rng(seed)
    results = []
    for lt in layer_types or [None]:
        try:
            first = _hf_rotate(rot, mod, fn, config, pos, lt, dtype, rng)
        except _ForwardFails as exc:  # with a variant: the model's rotary does not take that rope type
            return Verdict(
                verdict="error" if variant else "candidate finding",
                detail=f"the {'variant' if variant else 'default'} config cannot run its own rotary ({exc})",
                ratio=None,
                mechanism="",
            )
        except RuntimeError as exc:
            if "split_with_sizes" not in str(exc) or _has_sections(config):
                raise
            return Verdict(  # the M-RoPE fallback sections do not fit the default config's rotary width
                verdict="finding",
                detail=f"the default config cannot run its own rotary ({str(exc)[:120]}): mrope_section "
                "fallback [8, 12, 12] vs the config's rotary width; reproducer "
                "peers/reproducers/hf_glm4v_default_mrope_section.py",
                ratio=None,
                mechanism="mrope, default",
            )
        if first is None:
            return Verdict(
                verdict="error", detail="rotary forward signature not understood", ratio=None, mechanism=""
            )
        x, got, streams, split, width = first
        layouts = [layout] if layout else ["half", "interleaved"]
        best, rotated = None, width
        for lay in layouts:
            note = ""
            try:
                try:
                    family, specs = _oracle_specs(cfg_dict, lay, layer_types)
                except ValueError as exc:  # transformers floors hidden_size // heads; rope-ref refuses
                    if "is not divisible by num_attention_heads" not in str(exc):
                        raise
                    floored = cfg_dict["hidden_size"] // cfg_dict["num_attention_heads"]
                    family, specs = _oracle_specs({**cfg_dict, "head_dim": floored}, lay, layer_types)
                    note = f"head_dim {floored} given (transformers floors hidden_size / heads)"
            except (ValueError, KeyError, TypeError, NotImplementedError) as exc:
                text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                if "not a positive even integer" in text:  # transformers builds (w + 1) // 2 pairs instead
                    return Verdict(
                        verdict="candidate finding",
                        detail=f"the default config gives an odd rotary width ({text}); HF rotates {width} "
                        "channels",
                        ratio=None,
                        mechanism="",
                    )
                return Verdict(
                    verdict="not expressible", detail=f"oracle from config: {text}", ratio=None, mechanism=""
                )
            spec = specs.get(lt or "default") or next(iter(specs.values()))
            if spec.rotary_dim not in (width, 2 * width):  # some cos hold one entry per pair (GPT-OSS)
                best = best or (np.inf, 0, lay, family, f"rotary width: HF {width}, oracle {spec.rotary_dim}")
                continue
            if x.shape[-1] != spec.head_dim:
                best = best or (
                    np.inf,
                    0,
                    lay,
                    family,
                    f"head size: HF {x.shape[-1]}, oracle {spec.head_dim}",
                )
                continue
            p = np.broadcast_to(
                pos[None, :, None, :], (spec.n_streams,) + pos.shape[:1] + (1,) + pos.shape[1:]
            )
            p = p + (np.arange(spec.n_streams) * 7)[:, None, None, None] * (streams > 1)
            io = "float64" if dtype == torch.float64 else "float32"
            ratio, bad = _judge(x, p, got, spec, PrecisionPolicy(io, "float32", io))
            if ratio > 1.0 and io == "float64":  # an apply that computes in float32 (Cohere's q.float())
                ratio, bad = _judge(x, p, got, spec, PrecisionPolicy(io, "float32", "float32"))
                note = "; ".join(filter(None, [note, "rotation computed in float32"]))
            if ratio > 1.0:  # the transpose rotation R_m^T (NanoChat's rotate_half with flipped signs)
                inv = _judge(x, -p, got, spec, PrecisionPolicy(io, "float32", "float32"))
                if inv[0] <= 1.0:
                    ratio, bad, note = *inv, "rotates by -m*theta (the transpose rotation R_m^T)"
            if best is None or ratio < best[0]:
                best = (ratio, bad, lay, family, note)
                rotated = spec.rotary_dim  # the oracle's width (GPT-OSS's cos holds one entry per pair)
        results.append((lt, best, fn_name, split, width, dtype))
    worst = max(results, key=lambda r: r[1][0])
    ratio, bad, lay, family, note = worst[1]
    mech = _mechanism(cfg_dict, family, lay, rotated, results)
    detail = f"{fn_name}; {'float64' if dtype == torch.float64 else 'float32'}; layout {lay}" + (
        "; partial split restated" if worst[3] else ""
    )
    if note:
        detail += "; " + note
    if switched:
        detail += "; " + ", ".join(f"{k}=True (default False: no RoPE)" for k in switched)
    verdict = "agrees" if ratio <= 1.0 else "candidate finding"
    if "transpose rotation" in note:
        verdict = "divergence"
    return Verdict(
        verdict=verdict,
        detail=detail,
        ratio=None if not np.isfinite(ratio) else ratio,
        n_bad=bad,
        mechanism=mech,
    )


def _vision_ids() -> np.ndarray:
    """``(2, N)`` (row, column) ids: an 8x8 and a 4x16 image, row-major, and the 8x8 one moved to 500."""
    from rope_ref.vision_rope import pixtral_ids

    ids = pixtral_ids([(8, 8), (4, 16)])
    return np.concatenate([ids, ids[:, :64] + 500], axis=1)


def _probe_vision(mod, rot, config) -> Verdict:
    """A vision rotary called on (row, column) patch ids ``(N, 2)``, applied by the module's vision apply
    on q ``(N, H, D)`` (or ``(1, H, N, D)`` where cos comes batched), against
    :func:`rope_ref.vision_rope.from_hf` of the same config."""
    import torch
    from rope_ref.conformance.protocol import PrecisionPolicy

    from rope_ref import vision_rope

    mech = "vision 2D"
    try:
        spec = vision_rope.from_hf(config.to_dict())
    except (ValueError, KeyError, TypeError) as exc:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return Verdict(
            verdict="not expressible", detail=f"oracle from config: {text}", ratio=None, mechanism=mech
        )
    ids = _vision_ids()
    cos, sin = rot(torch.zeros(1, dtype=torch.float64), torch.from_numpy(ids.T.copy()))
    funcs = sorted(n for n, f in vars(mod).items() if inspect.isfunction(f) and n.startswith("apply_rotary"))
    funcs.sort(key=lambda n: ("vision" not in n and "2d" not in n, n))
    if not funcs:
        return Verdict(
            verdict="not a RoPE",
            detail="module defines no apply_rotary* function",
            ratio=None,
            mechanism=mech,
        )
    n, d = ids.shape[1], int(cos.shape[-1])
    x = np.random.default_rng(0).standard_normal((1, _H, n, d))
    last = None
    for fn_name in funcs:
        fn = getattr(mod, fn_name)
        batched = cos.ndim == 3
        q = torch.from_numpy(x if batched else x[0].transpose(1, 0, 2).copy())
        try:
            y = _call_apply(fn, q, q.clone(), cos.to(q.dtype), sin.to(q.dtype), config)
        except (RuntimeError, TypeError) as exc:
            last = exc
            continue
        if tuple(y.shape) != tuple(q.shape):
            continue
        got = y.detach().to(torch.float64).numpy()
        got = got if batched else got.transpose(1, 0, 2)[None]
        if d != spec.head_dim:
            detail = f"head size: HF {d}, oracle {spec.head_dim}"
            return Verdict(verdict="candidate finding", detail=detail, ratio=None, mechanism=mech)
        pos = ids[:, None, None, :]
        ratio, bad = _judge(x, pos, got, spec, PrecisionPolicy("float64", "float32", "float32"))
        verdict = "agrees" if ratio <= 1.0 else "candidate finding"
        detail = f"{fn_name}; cos/sin float32; layout {spec.layout}; patch ids (row, column) up to 507"
        return Verdict(
            verdict=verdict, detail=detail, ratio=ratio, n_bad=bad, mechanism=f"{mech} {spec.layout}"
        )
    text = f"; last: {type(last).__name__}: {last}"[:200] if last else ""
    return Verdict(
        verdict="error", detail=f"no vision apply function took the table{text}", ratio=None, mechanism=mech
    )


def _hf_rotate(rot, mod, fn, config, pos, layer_type, dtype, rng):
    """``(x float64 (B,H,S,D), HF output float64, n_streams, split restated, rotary width)``."""
    import torch

    kwargs = {"layer_type": layer_type} if layer_type is not None else {}
    pid = torch.from_numpy(pos)
    src = inspect.getsource(type(rot))
    streams = 3 if ("mrope" in src or "expand(3" in src) else 1
    dummy = torch.zeros(1, dtype=dtype)
    if streams == 3:  # distinct streams where the config names its sections, else text tokens (equal ids)
        fallback = 'get("mrope_section"' in src and _family(config) == "mrope"  # the oracle's fallback too
        step = 7 if _has_sections(config) or fallback else 0
        pid = torch.stack([pid + step * s for s in range(3)])
        streams = 3 if step else 1
    try:
        out = rot(dummy, pid, **kwargs)
    except RuntimeError as exc:
        if "split_with_sizes" in str(exc):  # GLM-4V's fallback sections: judged by the caller
            raise
        if pid.ndim != 3 or streams != 1:
            raise _ForwardFails(" ".join(f"{type(exc).__name__}: {exc}".split())[:200]) from None
        out = rot(dummy, pid[0], **kwargs)  # equal streams: the rotary expands (B, S) ids itself (NeoMME)
    except (TypeError, KeyError, AttributeError) as exc:
        raise _ForwardFails(" ".join(f"{type(exc).__name__}: {exc}".split())[:200]) from None
    if torch.is_tensor(out) and out.is_complex():  # Llama 4: freqs_cis (B, S, D/2); apply on (B, S, H, D)
        width = 2 * int(out.shape[-1])
        x = rng.standard_normal((_B, _H, _S, int(_head_dim(config, width))))
        heads_first = "freqs_cis.unsqueeze(1)" in inspect.getsource(fn)  # DeepSeek-V2: (B, H, S, D)
        q = torch.from_numpy(x).to(dtype)
        q = q if heads_first else q.transpose(1, 2)
        y = fn(q[..., :width], q[..., :width].clone(), out)[0]
        y = torch.cat([y.to(dtype), q[..., width:]], dim=-1)
        y = y if heads_first else y.transpose(1, 2)
        return x, y.detach().to(torch.float64).numpy(), streams, width < x.shape[-1], width
    cos, sin = out
    if cos.ndim != 3 or cos.shape[:2] != pos.shape:
        return None
    width = int(cos.shape[-1])
    head = int(_head_dim(_layer_config(config, layer_type), width))
    x = rng.standard_normal((_B, _H, _S, head))
    q = torch.from_numpy(x).to(dtype)
    y, split = _rotate(fn, q, cos.to(dtype), sin.to(dtype), config)
    got = y.detach().to(torch.float64).numpy()
    if fn.__name__ == "apply_rotary_pos_emb_interleave":  # HF reorders the rope part to half layout
        from rope_ref import RopeConfig, inverse_layout_permutation

        inv = inverse_layout_permutation(RopeConfig(width, layout="interleaved"))
        got = np.concatenate([got[..., :width][..., inv], got[..., width:]], axis=-1)
    return x, got, streams, split, width


class _ForwardFails(Exception):
    """The rotary's own forward raised on its default config."""


def _layer_config(config, layer_type):
    """The config of the layers of ``layer_type`` where head sizes vary by layer (Gemma 4's
    ``per_layer_config``), else ``config``."""
    if layer_type is None or getattr(config, "per_layer_config", None) is None:
        return config
    try:
        return config.per_layer_config[layer_type]
    except (KeyError, TypeError, ValueError):
        return config


def _family(config) -> str:
    from rope_ref.hf_config import model_family

    try:
        return model_family(config.to_dict())
    except Exception:  # noqa: BLE001 - no family: no fallback sections
        return ""


def _has_sections(config) -> bool:
    rp = getattr(config, "rope_parameters", None) or {}
    return isinstance(rp, Mapping) and "mrope_section" in rp


def _head_dim(config, width: int) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):
        v = getattr(config, key, None)
        if isinstance(v, int) and v >= width:
            return v
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden // heads >= width:
        return hidden // heads
    return width


def _mechanism(cfg_dict, family, layout, width, results) -> str:
    """A short name of the RoPE the architecture uses, for grouping (e.g. ``rope half, default``)."""
    rp = cfg_dict.get("rope_parameters") or cfg_dict.get("rope_scaling") or {}
    types = sorted({str(v.get("rope_type", "default")) for v in rp.values() if isinstance(v, Mapping)})
    if not types:
        types = [str(rp.get("rope_type", rp.get("type", "default")))]
    head = _head_dim_dict(cfg_dict)
    partial = "" if head is None or head == width else " partial"
    kinds = f" per-layer ({len(results)})" if len(results) > 1 else ""
    return f"{family} {layout}{partial}{kinds}, {'/'.join(types)}"


def _head_dim_dict(cfg_dict) -> int | None:
    for key in ("qk_rope_head_dim", "head_dim"):
        if isinstance(cfg_dict.get(key), int):
            return cfg_dict[key]
    h, n = cfg_dict.get("hidden_size"), cfg_dict.get("num_attention_heads")
    return h // n if isinstance(h, int) and isinstance(n, int) and n else None
