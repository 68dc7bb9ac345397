"""Benchmark the torch adapter against HF-style eager RoPE and the memory floor, side by side.

CPU (always): x of shape (1, 2048, 32, 128) float32 ((B, S, H, D)), both layouts, forward and
forward+backward. Candidates, timed round-robin in one process so that ratios share the machine's
state: ``x.clone()`` (memory floor: one read + one write), HF-style eager (a faithful copy of
``modeling_llama.py``: full-width ``cos = cat(freqs, freqs)``, ``q * cos + rotate_half(q) * sin``;
GPT-J's ``rotate_every_two`` with ``repeat_interleave`` tables for the interleaved layout), and this
adapter (``RotaryEmbedding`` with a warm cache, and functional ``apply`` which rebuilds cos/sin).

GPU (when CUDA is available): bf16 q and k of shape (4, 4096, 32, 128) each; HF eager,
``torch.compile`` of HF eager, this adapter (module, module with ``max_position`` so no host sync,
``torch.compile(rt.apply, fullgraph=True)`` and, when triton is importable, the module with
``kernel="triton"``: the candidates for the 70%-of-copy-bandwidth goal), against device-to-device copy
(``of_copy_bw`` = copy time / candidate time).

``--cpu-compiled`` adds ``torch.compile`` of ``rt.apply`` to the CPU forward tables (compiles first).

GQA q+k (issue 16; always, on CPU, and on CUDA when available): q (1, 2048, 32, 128) and k
(1, 2048, 8, 128) in bf16 and fp32, half layout, positions ``arange(2048)``. Candidates: the clone
floor of q and k together (``q.clone(); k.clone()``); the fused ``rt.apply_qk(q, k, ids, cfg,
axes="bshd")``; two separate public ``rt.apply`` calls with the same options (``two_apply``); two calls
of the original form ``rt.apply(x, ids[:, None], cfg)``; the fused call and two calls in place; on CPU
the table build that fusion shares; with ``--cpu-compiled``, ``torch.compile`` of ``apply_qk``.
Ratios: ``x_clone_floor`` (candidate / clone) and ``two_calls_over_fused`` (two calls with the same
options / the fused call). The issue's goals for ``apply_qk`` (>= 1.5 and <= 1.5) are printed as one
line per dtype. ``--gqa-only`` runs just this table; ``--repeat N`` makes N independent runs of it
(medians of run medians, with the range); ``--threads N`` sets ``torch.set_num_threads``. The load
average is printed with the table.

The C++ CPU kernel (issue 32; ``--cpp`` runs only this table): x (1, 2048, 32, 128), half layout, bf16
and fp32, forward and forward+backward, at 1 and 2 threads (only ``--threads N`` when given). Candidates:
the clone floor, HF eager, ``rt.apply(x, ids[:, None], cfg)`` (the eager kernel) and the same with
``kernel="cpp"``; then GQA q (1, 2048, 32, 128) + k (1, 2048, 8, 128): ``apply_qk`` with each kernel,
two ``apply`` calls with ``kernel="cpp"`` and, when installed, vLLM's CPU kernel. ``hf_over_this`` is HF
/ candidate; the issue's goals are printed as one line per thread count and dtype. The first call
builds the extension (tens of seconds, once; cached on disk).

Usage: ``python benchmarks/bench_torch.py [--rounds N] [--json FILE] [--cpu-only] [--cpu-compiled]
[--gqa-only] [--cpp] [--repeat N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
from rope_ref.backends import torch as rt

import rope_ref

# -- HF-style eager reference (a faithful transcription of the formulas, written for this benchmark) --


def hf_tables(
    positions: torch.Tensor, dim: int, base: float, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF ``LlamaRotaryEmbedding.forward`` (float32, full width); GPT-J repeat_interleave for interleaved."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def hf_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """``x * cos + rotate(x) * sin`` with cos/sin cast to x's dtype, as HF does."""
    cos, sin = cos.to(x.dtype)[:, None, :], sin.to(x.dtype)[:, None, :]  # (S, 1, D) over (B, S, H, D)
    rot = rotate_half(x) if layout == "half" else rotate_every_two(x)
    return x * cos + rot * sin


# -- timing -----------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def side_by_side(
    cands: dict[str, Callable[[], object]], rounds: int, device: str, rotate: bool = False
) -> dict[str, float]:
    """Median seconds of each candidate, run round-robin (one call of each per round) after a warm-up.

    ``rotate``: round ``r`` starts with candidate ``r mod n``, so no candidate always follows the same
    one (a candidate that frees large temporaries otherwise slows the next one's allocations).
    """
    for fn in cands.values():
        fn()
        fn()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in cands}
    order = list(cands.items())
    for r in range(rounds):
        shift = r % len(order) if rotate else 0
        for name, fn in order[shift:] + order[:shift]:
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fwd_bwd(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, g: torch.Tensor
) -> Callable[[], object]:
    def run() -> object:
        xx = x.detach().requires_grad_(True)
        return torch.autograd.grad(fn(xx), xx, g)

    return run


def compiled_apply(cfg: rope_ref.RopeConfig, pos: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``torch.compile`` of the functional apply (inductor fuses it into one loop), without graph breaks."""
    return torch.compile(lambda t: rt.apply(t, pos, cfg), fullgraph=True)


def cpu_bench(rounds: int, with_compiled: bool = False) -> list[dict]:
    shape = (1, 2048, 32, 128)
    b, s, h, d = shape
    torch.manual_seed(0)
    x = torch.randn(shape)
    g = torch.randn(shape)
    positions = torch.arange(s)
    rows = []
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(d, layout=layout)
        module = rt.RotaryEmbedding(cfg)
        pos = positions[:, None]  # (S, 1) against (B, S, H)
        cos, sin = hf_tables(positions, d, 10000.0, layout)
        fwd = {
            "clone": lambda: x.clone(),
            "hf_eager": lambda cos=cos, sin=sin, layout=layout: hf_apply(x, cos, sin, layout),
            "rope_ref_module": lambda module=module, pos=pos: module(x, pos),
            "rope_ref_apply": lambda cfg=cfg, pos=pos: rt.apply(x, pos, cfg),
        }
        if with_compiled:
            compiled = compiled_apply(cfg, pos)
            fwd["rope_ref_compiled"] = lambda f=compiled: f(x)
        both = {
            "clone": fwd_bwd(lambda t: t.clone(), x, g),
            "clone_x2": lambda: (x.clone(), g.clone()),
            "hf_eager": fwd_bwd(
                lambda t, cos=cos, sin=sin, layout=layout: hf_apply(t, cos, sin, layout), x, g
            ),
            "rope_ref_module": fwd_bwd(lambda t, module=module, pos=pos: module(t, pos), x, g),
            "rope_ref_apply": fwd_bwd(lambda t, cfg=cfg, pos=pos: rt.apply(t, pos, cfg), x, g),
        }
        for mode, cands in (("forward", fwd), ("forward+backward", both)):
            t = side_by_side(cands, rounds, "cpu")
            floor = t["clone_x2"] if mode == "forward+backward" else t["clone"]
            for name, sec in t.items():
                rows.append(
                    {
                        "device": "cpu",
                        "layout": layout,
                        "mode": mode,
                        "impl": name,
                        "ms": sec * 1e3,
                        "x_floor": sec / floor,
                        "hf_over_this": t["hf_eager"] / sec,
                    }
                )
    return rows


def gpu_bench(rounds: int, dev: str = "cuda", shape: tuple[int, ...] = (4, 4096, 32, 128)) -> list[dict]:
    """The GPU table (``dev``/``shape`` are parameters only so that it can be smoke-tested on CPU)."""
    b, s, h, d = shape
    torch.manual_seed(0)
    q = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    k = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    positions = torch.arange(s, device=dev)
    rows = []
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(d, layout=layout)
        module = rt.RotaryEmbedding(cfg)
        pos = positions[:, None]
        cos, sin = hf_tables(positions, d, 10000.0, layout)
        hf_compiled = torch.compile(lambda t, cos=cos, sin=sin, layout=layout: hf_apply(t, cos, sin, layout))
        rr_compiled = compiled_apply(cfg, pos)
        module_max = rt.RotaryEmbedding(cfg, max_position=s)
        cands = {
            "copy_q_k": lambda: (q.clone(), k.clone()),
            "hf_eager": lambda cos=cos, sin=sin, layout=layout: (
                hf_apply(q, cos, sin, layout),
                hf_apply(k, cos, sin, layout),
            ),
            "hf_compiled": lambda f=hf_compiled: (f(q), f(k)),
            "rope_ref_module": lambda module=module, pos=pos: (module(q, pos), module(k, pos)),
            "rope_ref_module_max_position": lambda m=module_max, pos=pos: (m(q, pos), m(k, pos)),
            "rope_ref_compiled": lambda f=rr_compiled: (f(q), f(k)),
        }
        if rt.available(dev, kernel="triton")[0]:  # the fused Triton kernel, no host sync
            tri = rt.RotaryEmbedding(cfg, max_position=s, kernel="triton")
            cands["rope_ref_triton"] = lambda m=tri, pos=pos: (m(q, pos), m(k, pos))
        t = side_by_side(cands, rounds, dev)
        moved = 2 * 2 * q.numel() * q.element_size()  # read + write of q and k
        for name, sec in t.items():
            rows.append(
                {
                    "device": torch.cuda.get_device_name() if dev.startswith("cuda") else dev,
                    "layout": layout,
                    "mode": "forward",
                    "impl": name,
                    "ms": sec * 1e3,
                    "GB/s": moved / sec / 1e9,
                    "of_copy_bw": t["copy_q_k"] / sec,
                }
            )
    return rows


def _table_build(q: torch.Tensor, ids: torch.Tensor, cfg: rope_ref.RopeConfig) -> Callable[[], object]:
    """What fusing q and k can share on CPU: placing the positions and building cos/sin (and [cos, cos])
    in the compute dtype once. Internal functions, timed only to explain the ratios."""
    from rope_ref.backends import _torch_kernels as tk
    from rope_ref.backends._torch_module import EagerTables

    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype

    def run() -> object:
        pos = tk.resolve_positions(q, ids, "bshd", None, None, None)
        cos, sin = tk._tables(pos, cfg, None, torch.float32, q.ndim, False)
        return EagerTables(cos, sin, cfg.layout, compute).full_cos()

    return run


def engine_anchors(
    q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor, cfg: rope_ref.RopeConfig
) -> dict[str, Callable[[], object]]:
    """The engines' own CPU RoPE on the same q and k, when their packages are installed (issue 30 anchors).

    ``vllm_cpu_kernel``: ``vllm._custom_ops.rotary_embedding`` (vLLM's C++ CPU kernel; in place, so a clone
    of q and k is part of the call, as a caller keeping its inputs would pay); ``ggml_rope``: ggml's
    ``ggml_rope_ext`` through ``rope_ref.peers.llama_cpp_peer.run_rope`` (float32/float16 only; includes
    copying q and k into ggml tensors and out again)."""
    import importlib.util

    anchors: dict[str, Callable[[], object]] = {}
    s, d = q.shape[1], q.shape[-1]
    if importlib.util.find_spec("vllm") is not None:
        from vllm import _custom_ops as ops

        inv = 1.0 / (cfg.base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(q.dtype)
        flat_pos = ids.reshape(-1).to(torch.int64)

        def vllm_call() -> object:
            qf, kf = q.reshape(s, -1).clone(), k.reshape(s, -1).clone()
            ops.rotary_embedding(flat_pos, qf, kf, d, cache, cfg.layout == "half")
            return qf, kf

        anchors["vllm_cpu_kernel"] = vllm_call
    if importlib.util.find_spec("ggml") is not None and q.dtype in (torch.float32, torch.float16):
        from rope_ref.peers.llama_cpp_peer import rope_args, run_rope

        args = rope_args(cfg)
        qn, kn, pn = q[0].numpy(), k[0].numpy(), ids.numpy().astype("int32")
        anchors["ggml_rope"] = lambda: (run_rope(qn, pn, args), run_rope(kn, pn, args))
    return anchors


def gqa_bench(
    rounds: int,
    dev: str = "cpu",
    s: int = 2048,
    hq: int = 32,
    hk: int = 8,
    d: int = 128,
    repeat: int = 1,
    compiled: bool = False,
) -> list[dict]:
    """GQA q+k: the fused ``apply_qk`` against two separate ``apply`` calls with the same options and the
    clone floor, out of place and in place. ``repeat`` independent round-robin runs; ``ms`` is the median
    of the runs' medians, ``ms_lo``/``ms_hi`` the smallest and largest run median."""
    torch.manual_seed(0)
    cfg = rope_ref.RopeConfig(d, layout="half")
    ids = torch.arange(s, device=dev)
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.randn((1, s, hq, d), device=dev).to(dtype)
        k = torch.randn((1, s, hk, d), device=dev).to(dtype)
        qi, ki = q.clone(), k.clone()  # rotated in place over and over (a rotation keeps norms)
        cands = {
            "clone_q_k": lambda q=q, k=k: (q.clone(), k.clone()),
            "apply_qk": lambda q=q, k=k: rt.apply_qk(q, k, ids, cfg, axes="bshd"),
            "two_apply": lambda q=q, k=k: (
                rt.apply(q, ids, cfg, axes="bshd"),
                rt.apply(k, ids, cfg, axes="bshd"),
            ),
            "two_apply_original": lambda q=q, k=k: (
                rt.apply(q, ids[:, None], cfg),
                rt.apply(k, ids[:, None], cfg),
            ),
            "apply_qk_inplace": lambda q=qi, k=ki: rt.apply_qk(q, k, ids, cfg, axes="bshd", inplace=True),
            "two_apply_inplace": lambda q=qi, k=ki: (
                rt.apply(q, ids, cfg, axes="bshd", inplace=True),
                rt.apply(k, ids, cfg, axes="bshd", inplace=True),
            ),
        }
        if dev == "cpu":
            cands["table_build"] = _table_build(q, ids, cfg)
            cands.update(engine_anchors(q, k, ids, cfg))
        if compiled:  # inductor fuses q's and k's rotations, tables included, into generated loops
            fused = torch.compile(lambda a, b: rt.apply_qk(a, b, ids, cfg, axes="bshd"), fullgraph=True)
            cands["apply_qk_compiled"] = lambda q=q, k=k, f=fused: f(q, k)
        runs = [side_by_side(cands, rounds, dev, rotate=True) for _ in range(repeat)]
        t = {name: statistics.median(r[name] for r in runs) for name in cands}
        pairs = {  # candidate -> the two-call candidate with the same options
            "apply_qk": "two_apply",
            "apply_qk_inplace": "two_apply_inplace",
        }
        for name, sec in t.items():
            row = {
                "device": dev,
                "dtype": str(dtype).removeprefix("torch."),
                "case": f"gqa q+k Hq {hq} Hk {hk} D {d} S {s}",
                "impl": name,
                "ms": sec * 1e3,
                "ms_lo": min(r[name] for r in runs) * 1e3,
                "ms_hi": max(r[name] for r in runs) * 1e3,
                "x_clone_floor": sec / t["clone_q_k"],
            }
            if name in pairs:
                row["two_calls_over_fused"] = t[pairs[name]] / sec
            if name == "apply_qk":
                row["two_original_over_fused"] = t["two_apply_original"] / sec
            rows.append(row)
    return rows


def gqa_goals(rows: list[dict]) -> list[str]:
    """One line per device and dtype: the issue's two CPU goals, met or not, with the ratios."""
    lines = []
    for r in rows:
        if r["impl"] != "apply_qk":
            continue
        speed, floor = r["two_calls_over_fused"], r["x_clone_floor"]
        lines.append(
            f"{r['device']} {r['dtype']}: apply_qk {r['ms']:.3g} ms; "
            + _goal("two apply / apply_qk =", speed, ">= 1.5", speed >= 1.5)
            + "; "
            + _goal("apply_qk / clone =", floor, "<= 1.5", floor <= 1.5)
        )
    return lines


def cpp_bench(
    rounds: int, threads: list[int], s: int = 2048, h: int = 32, hk: int = 8, d: int = 128
) -> list[dict]:
    """``kernel="cpp"`` against HF eager, the eager kernel and the clone floor (issue 32's torch goals)."""
    torch.manual_seed(0)
    cfg = rope_ref.RopeConfig(d, layout="half")
    ids = torch.arange(s)
    pos = ids[:, None]  # (S, 1) against (B, S, H)
    cos, sin = hf_tables(ids, d, 10000.0, "half")

    def ours(t: torch.Tensor) -> torch.Tensor:
        return rt.apply(t, pos, cfg)

    def cpp(t: torch.Tensor) -> torch.Tensor:
        return rt.apply(t, pos, cfg, kernel="cpp")

    def hf(t: torch.Tensor) -> torch.Tensor:
        return hf_apply(t, cos, sin, "half")

    rows = []
    for n in threads:
        torch.set_num_threads(n)
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn((1, s, h, d)).to(dtype)
            g = torch.randn((1, s, h, d)).to(dtype)
            k = torch.randn((1, s, hk, d)).to(dtype)
            tables = {
                "forward": {"clone": lambda x=x: x.clone(), "hf_eager": lambda x=x: hf(x)},
                "forward+backward": {
                    "clone": fwd_bwd(lambda t: t.clone(), x, g),
                    "hf_eager": fwd_bwd(hf, x, g),
                },
                "gqa q+k": {"clone_q_k": lambda x=x, k=k: (x.clone(), k.clone())},
            }
            tables["forward"].update({"apply": lambda x=x: ours(x), "apply_cpp": lambda x=x: cpp(x)})
            tables["forward+backward"].update({"apply": fwd_bwd(ours, x, g), "apply_cpp": fwd_bwd(cpp, x, g)})
            tables["gqa q+k"].update(
                {
                    "apply_qk": lambda x=x, k=k: rt.apply_qk(x, k, ids, cfg, axes="bshd"),
                    "apply_qk_cpp": lambda x=x, k=k: rt.apply_qk(x, k, ids, cfg, axes="bshd", kernel="cpp"),
                    "two_apply_cpp": lambda x=x, k=k: (
                        rt.apply(x, ids, cfg, axes="bshd", kernel="cpp"),
                        rt.apply(k, ids, cfg, axes="bshd", kernel="cpp"),
                    ),
                    **engine_anchors(x, k, ids, cfg),
                }
            )
            for mode, cands in tables.items():
                t = side_by_side(cands, rounds, "cpu", rotate=True)
                ref = t.get("hf_eager", t.get("two_apply_cpp"))
                for name, sec in t.items():
                    rows.append(
                        {
                            "threads": n,
                            "dtype": str(dtype).removeprefix("torch."),
                            "mode": mode,
                            "impl": name,
                            "ms": sec * 1e3,
                            "hf_over_this" if mode != "gqa q+k" else "two_cpp_over_this": ref / sec,
                        }
                    )
    return rows


def _goal(name: str, value: float, goal: str, ok: bool) -> str:
    return f"{name} {value:.2f} (goal {goal}: {'met' if ok else 'not met'})"


def cpp_goals(rows: list[dict]) -> list[str]:
    """One line per thread count and dtype: issue 32's torch goals for ``kernel="cpp"``, met or not."""
    ms = {(r["threads"], r["dtype"], r["mode"], r["impl"]): r["ms"] for r in rows}
    lines = []
    for n, dtype in dict.fromkeys((r["threads"], r["dtype"]) for r in rows):
        fwd = ms[n, dtype, "forward", "hf_eager"] / ms[n, dtype, "forward", "apply_cpp"]
        both = ms[n, dtype, "forward+backward", "hf_eager"] / ms[n, dtype, "forward+backward", "apply_cpp"]
        fused = ms[n, dtype, "gqa q+k", "two_apply_cpp"] / ms[n, dtype, "gqa q+k", "apply_qk_cpp"]
        parts = [
            _goal("HF / cpp forward", fwd, ">= 3", fwd >= 3),
            _goal("fwd+bwd", both, ">= 2.5", both >= 2.5),
            _goal("two apply / apply_qk", fused, ">= 1", fused >= 1),
        ]
        vllm = ms.get((n, dtype, "gqa q+k", "vllm_cpu_kernel"))
        if vllm is not None:
            ratio = ms[n, dtype, "gqa q+k", "apply_qk_cpp"] / vllm
            parts.append(_goal("apply_qk_cpp / vLLM", ratio, "<= 2", ratio <= 2))
        lines.append(f"{n} thread(s) {dtype}: " + "; ".join(parts))
    return lines


def print_table(rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print(
            "| "
            + " | ".join(
                f"{r.get(k, ''):.3g}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys
            )
            + " |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--cpu-compiled", action="store_true", help="also time torch.compile on CPU")
    parser.add_argument("--gqa-only", action="store_true", help="only the GQA q+k table")
    parser.add_argument("--cpp", action="store_true", help='only the kernel="cpp" table (issue 32)')
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--repeat", type=int, default=1, help="independent runs of the GQA table")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    info = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "load_average_before": os.getloadavg(),
    }
    if args.cpp:
        info["threads"] = [args.threads] if args.threads else [1, 2]
        rows = cpp_bench(args.rounds, info["threads"])
        tables, goals = [rows], cpp_goals(rows)
    else:
        rows = [] if args.gqa_only else cpu_bench(args.rounds, args.cpu_compiled)
        gqa = gqa_bench(args.rounds, repeat=args.repeat, compiled=args.cpu_compiled)
        if not args.cpu_only and torch.cuda.is_available():
            if not args.gqa_only:
                rows += gpu_bench(args.rounds)
            gqa += gqa_bench(args.rounds, "cuda", repeat=args.repeat)
        elif not args.cpu_only:
            print("no CUDA device: GPU benchmark skipped")
        tables, goals = [rows, gqa], gqa_goals(gqa)
        rows = rows + gqa
    info["load_average_after"] = os.getloadavg()
    print(json.dumps(info))
    for table in tables:
        if table:
            print_table(table)
    print("\n".join(goals))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)

if __name__ == "__main__":
    main()
