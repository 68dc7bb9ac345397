"""bf16 q+k rotation on a GPU as a fraction of the measured device-to-device copy of the same bytes.

Case: q ``(1, 4096, 32, 128)`` and k ``(1, 4096, 8, 128)`` in bfloat16 (GQA, Llama-3-8B's heads), ``bshd``,
half layout, base 500000, positions ``0..4095``. Bytes moved by one pass: read q and k once, write them
once (2 x 40 MiB); the cos/sin tables some peers read are under 3% of that and are not counted.

Candidates (each where importable; "in place" rotates the input buffers, which moves the same bytes):

* ``copy``: ``out.copy_(src)`` of q and of k into preallocated buffers (two device-to-device
  ``cudaMemcpyAsync``): the ceiling every other row is a fraction of.
* ``cupy_qk`` / ``cupy_qk_inplace``: our fused CuPy kernel, ``rope_ref.backends.cupy.apply_qk(q, k, cfg,
  axes="bshd", offset=0)`` (one ``rope_qkv_apply_bf16`` launch for q and k).
* ``triton_qk`` / ``triton_qk_inplace``: our Triton kernel, ``rope_ref.backends.torch.apply_qk(...,
  kernel="triton")`` (table build + one ``rope_rows_qk`` launch); ``triton_qk_kernel``: that launch alone
  (``_torch_triton_qk.rotate_triton_qk`` on float32 tables built once); ``torch_qk``: the public call with
  the eager kernel, for scale.
* ``flash_attn``: ``flash_attn.layers.rotary.apply_rotary_emb`` on q and on k (two launches; cos/sin
  ``(S, 64)`` inputs); ``liger``: ``liger_rotary_pos_emb`` on ``(B, H, S, D)`` views of the bshd buffers
  (in place: Liger writes into contiguous inputs); ``flashinfer``: ``apply_rope_pos_ids_inplace``;
  ``vllm``: ``vllm._custom_ops.rotary_embedding`` (in place); ``transformer_engine``:
  ``apply_rotary_pos_emb(fused=True)`` on q and on k.

Timing (docs: the device README's METHOD.md). ``graph``: each candidate is captured in one CUDA graph
of ``--calls`` calls cycling over ``--sets`` input sets (4 x 80 MiB, larger than the 50 MB L2, so no call
finds its inputs cached), the GPU is kept busy with a spin kernel before the start event (so the host's
launch latency is not timed), and each replay is timed with CUDA events: per-call time = replay time /
calls, median of ``--replays`` after warm-up. This is device time, launch gaps between the calls
included. ``eager``: CUDA events around ``--calls`` back-to-back Python calls (host overhead included
when the host is slower than the kernel), median of ``--replays`` batches. ``fraction`` = copy time /
candidate time, each by the same method. ``profiled``: the kernels' and copies' own durations as
torch.profiler (CUPTI) records them, summed per call (a cross-check that also covers calls that cannot be
captured, e.g. ones that copy a host table to the device). ``copy_1GiB_GBps`` in the environment: one
1 GiB copy, the card's practical ceiling. Every candidate is first checked against the float64 oracle
(``rope_ref.apply``) on fresh random inputs: ``rel_err`` = ||out - ref|| / ||ref|| (bf16: expect ~2e-3;
fails above 1e-2, or on any non-finite output).

``--sweep`` adds launch-configuration sweeps of our two kernels (graph timing only): CuPy block
threads x head chunks, Triton rows per program x warps.

    python benchmarks/bench_gpu_qk.py [--json FILE] [--sweep]        # on a CUDA machine
    python benchmarks/bench_gpu_qk.py --device cpu --seq 64           # smoke run of the logic on a CPU
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import rope_ref

GOAL = 0.90  # issue 33: our fused kernels reach 90% of the copy bandwidth
_REL_ERR_LIMIT = 1e-2


# -- inputs ---------------------------------------------------------------------------------------------


class Inputs:
    """``sets`` independent (q, k) pairs on ``device`` plus preallocated buffers the candidates write."""

    def __init__(self, seq: int, hq: int, hk: int, d: int, sets: int, device: str, seed: int = 0) -> None:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.seq, self.hq, self.hk, self.d, self.device = seq, hq, hk, d, device

        def draw(h: int) -> torch.Tensor:
            return torch.randn((1, seq, h, d), generator=gen).to(device=device, dtype=torch.bfloat16)

        self.q = [draw(hq) for _ in range(sets)]
        self.k = [draw(hk) for _ in range(sets)]
        self.q_out = [t.clone() for t in self.q]  # written by the copy, rotated by in-place candidates
        self.k_out = [t.clone() for t in self.k]
        self.bytes_moved = 2 * sum(t.numel() * t.element_size() for t in (self.q[0], self.k[0]))

    @property
    def sets(self) -> int:
        return len(self.q)


def oracle(x: torch.Tensor, cfg: rope_ref.RopeConfig) -> np.ndarray:
    """float64 reference rotation of a bshd tensor at positions 0..S-1."""
    x64 = x.detach().to("cpu", torch.float64).numpy()
    return rope_ref.apply(x64, np.arange(x.shape[1])[None, :], cfg, axes="bshd")


def rel_err(out: Any, ref: np.ndarray) -> float:
    got = _to_numpy(out)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _to_numpy(out: Any) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu", torch.float64).numpy()
    return np.asarray(out.to_numpy(), dtype=np.float64)  # a CuPy Bf16Array


# -- candidates -----------------------------------------------------------------------------------------


class Candidate:
    """A rotation of input set ``i``: ``call(i)`` returns ``(q_rot, k_rot)`` (views of the results)."""

    def __init__(
        self,
        name: str,
        what: str,
        call: Callable[[int], tuple[Any, Any]],
        inplace: bool,
        stream_ctx: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name, self.what, self.call, self.inplace = name, what, call, inplace
        # a context that makes a non-torch library launch on the given torch stream (CuPy)
        self.stream_ctx = stream_ctx or (lambda _s: contextlib.nullcontext())


def _cupy_stream_ctx(stream: Any) -> Any:
    import cupy as cp

    return cp.cuda.ExternalStream(stream.cuda_stream)


def _bf16_tables(seq: int, cfg: rope_ref.RopeConfig, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle's half-width cos/sin ``(S, rd/2)`` in bfloat16 (the form flash-attn takes)."""
    cos, sin = rope_ref.cos_sin(np.arange(seq, dtype=np.float64), cfg)
    return (
        torch.from_numpy(np.ascontiguousarray(cos)).to(device, torch.bfloat16),
        torch.from_numpy(np.ascontiguousarray(sin)).to(device, torch.bfloat16),
    )


def _f32_tables(seq: int, cfg: rope_ref.RopeConfig, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle's half-width cos/sin as float32 ``(1, S, 1, rd/2)`` (bshd, broadcast over heads)."""
    cos, sin = rope_ref.cos_sin(np.arange(seq, dtype=np.float64), cfg)
    return tuple(
        torch.from_numpy(np.ascontiguousarray(t)).to(device, torch.float32)[None, :, None, :]
        for t in (cos, sin)
    )


def ours(inp: Inputs, cfg: rope_ref.RopeConfig) -> list[Candidate]:
    """Our CuPy and Triton kernels (and the eager torch kernel for scale), where they can run."""
    from rope_ref.backends import torch as rt

    cands = [
        Candidate(
            "copy",
            "q.copy_, k.copy_ (cudaMemcpyAsync D2D)",
            lambda i: (inp.q_out[i].copy_(inp.q[i]), inp.k_out[i].copy_(inp.k[i])),
            False,
        )
    ]
    if inp.device.startswith("cuda"):
        import rope_ref.backends.cupy as cb

        ok, why = cb.available()
        if ok:
            import cupy as cp

            def bits(t: torch.Tensor) -> Any:
                return cb.Bf16Array(cp.from_dlpack(t.view(torch.int16)).view(cp.uint16))

            cq, ck = [bits(t) for t in inp.q], [bits(t) for t in inp.k]
            iq, ik = [bits(t) for t in inp.q_out], [bits(t) for t in inp.k_out]
            cands.append(
                Candidate(
                    "cupy_qk",
                    "ours: cupy.apply_qk (one rope_qkv_apply_bf16 launch)",
                    lambda i: cb.apply_qk(cq[i], ck[i], cfg, axes="bshd", offset=0),
                    False,
                    _cupy_stream_ctx,
                )
            )
            cands.append(
                Candidate(
                    "cupy_qk_inplace",
                    "ours: cupy.apply_qk(inplace=True)",
                    lambda i: cb.apply_qk(iq[i], ik[i], cfg, axes="bshd", offset=0, inplace=True),
                    True,
                    _cupy_stream_ctx,
                )
            )
        else:
            print(f"cupy: not run ({why})")
    if rt.available(inp.device, kernel="triton")[0]:
        cands.append(
            Candidate(
                "triton_qk",
                "ours: torch.apply_qk(kernel='triton') (tables + one launch)",
                lambda i: rt.apply_qk(inp.q[i], inp.k[i], None, cfg, axes="bshd", offset=0, kernel="triton"),
                False,
            )
        )
        cands.append(
            Candidate(
                "triton_qk_inplace",
                "ours: torch.apply_qk(kernel='triton', inplace=True)",
                lambda i: rt.apply_qk(
                    inp.q_out[i],
                    inp.k_out[i],
                    None,
                    cfg,
                    axes="bshd",
                    offset=0,
                    kernel="triton",
                    inplace=True,
                ),
                True,
            )
        )
    if rt.available(inp.device, kernel="triton")[0] and inp.device.startswith("cuda"):
        from rope_ref.backends._torch_triton_qk import rotate_triton_qk

        cos, sin = _f32_tables(inp.seq, cfg, inp.device)  # (1, S, 1, rd/2): what the adapter hands the kernel
        cands.append(
            Candidate(
                "triton_qk_kernel",
                "ours: the rope_rows_qk launch alone (tables built once, outside the timing)",
                lambda i: rotate_triton_qk(
                    inp.q[i], inp.k[i], cos, sin, "half", cfg.rotary_dim, torch.float32
                ),
                False,
            )
        )
    cands.append(
        Candidate(
            "torch_qk",
            "ours: torch.apply_qk (eager kernel, for scale)",
            lambda i: rt.apply_qk(inp.q[i], inp.k[i], None, cfg, axes="bshd", offset=0),
            False,
        )
    )
    return cands


def peers(inp: Inputs, cfg: rope_ref.RopeConfig) -> tuple[list[Candidate], dict[str, str]]:
    """The GPU peers' documented calls on the same buffers; ``{peer: why not}`` for those that cannot run."""
    cands: list[Candidate] = []
    missing: dict[str, str] = {}
    if not inp.device.startswith("cuda"):
        return cands, {"all GPU peers": "needs a CUDA device"}
    seq, d = inp.seq, inp.d
    cos, sin = _bf16_tables(seq, cfg, inp.device)

    def attempt(peer: str, build: Callable[[], list[Candidate]]) -> None:
        try:
            cands.extend(build())
        except Exception as exc:  # noqa: BLE001 - an import or a CUDA extension failing: report, go on
            missing[peer] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    def flash_attn() -> list[Candidate]:
        fa = importlib.import_module("flash_attn.layers.rotary")

        def on_q_then_k(name: str, what: str, qs: list, ks: list, inplace: bool) -> Candidate:
            def call(i: int) -> tuple[Any, Any]:
                return tuple(fa.apply_rotary_emb(t[i], cos, sin, inplace=inplace) for t in (qs, ks))

            return Candidate(name, what, call, inplace)

        return [
            on_q_then_k(
                "flash_attn", "flash-attn apply_rotary_emb on q, then k (Triton)", inp.q, inp.k, False
            ),
            on_q_then_k(
                "flash_attn_inplace",
                "flash-attn apply_rotary_emb(inplace=True), q then k",
                inp.q_out,
                inp.k_out,
                True,
            ),
        ]

    def liger() -> list[Candidate]:
        lg = importlib.import_module("liger_kernel.transformers.rope")
        full_cos, full_sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]  # (1, S, D)

        def call(i: int) -> tuple[Any, Any]:
            qo, ko = lg.liger_rotary_pos_emb(
                inp.q_out[i].transpose(1, 2), inp.k_out[i].transpose(1, 2), full_cos, full_sin
            )
            return qo.transpose(1, 2), ko.transpose(1, 2)

        return [
            Candidate("liger", "Liger liger_rotary_pos_emb (Triton; in place on bshd memory)", call, True)
        ]

    def flashinfer() -> list[Candidate]:
        fi = importlib.import_module("flashinfer.rope")
        ids = torch.arange(seq, device=inp.device, dtype=torch.int32)

        def call(i: int) -> tuple[Any, Any]:
            q3, k3 = inp.q_out[i].view(seq, inp.hq, d), inp.k_out[i].view(seq, inp.hk, d)
            fi.apply_rope_pos_ids_inplace(q3, k3, ids, rotary_dim=d, interleave=False, rope_theta=cfg.base)
            return inp.q_out[i], inp.k_out[i]

        return [
            Candidate(
                "flashinfer", "FlashInfer apply_rope_pos_ids_inplace (cos/sin in the kernel)", call, True
            )
        ]

    def vllm() -> list[Candidate]:
        ops = importlib.import_module("vllm._custom_ops")
        cache = torch.cat([cos, sin], -1)  # (max_position, rotary_dim), vLLM's cos_sin_cache layout
        pos = torch.arange(seq, device=inp.device, dtype=torch.int64)

        def call(i: int) -> tuple[Any, Any]:
            ops.rotary_embedding(pos, inp.q_out[i].view(seq, -1), inp.k_out[i].view(seq, -1), d, cache, True)
            return inp.q_out[i], inp.k_out[i]

        return [Candidate("vllm", "vLLM _custom_ops.rotary_embedding (CUDA, in place)", call, True)]

    def transformer_engine() -> list[Candidate]:
        te = importlib.import_module("transformer_engine.pytorch.attention.rope")
        freqs = te.RotaryPositionEmbedding(d, rotary_base=cfg.base)(seq).to(inp.device)  # (S, 1, 1, D)
        fn = te.apply_rotary_pos_emb
        return [
            Candidate(
                "transformer_engine",
                "TransformerEngine apply_rotary_pos_emb(fused=True), q then k",
                lambda i: (
                    fn(inp.q[i], freqs, tensor_format="bshd", fused=True),
                    fn(inp.k[i], freqs, tensor_format="bshd", fused=True),
                ),
                False,
            )
        ]

    for peer, build in (
        ("flash-attn", flash_attn),
        ("liger-kernel", liger),
        ("flashinfer", flashinfer),
        ("vllm", vllm),
        ("transformer-engine", transformer_engine),
    ):
        attempt(peer, build)
    return cands, missing


# -- timing ---------------------------------------------------------------------------------------------


def _spin(device: str) -> None:
    """Keep the GPU busy ~50 us so the next launches queue up (host launch latency stays untimed)."""
    if device.startswith("cuda"):
        torch.cuda._sleep(100_000)


def _events_median(run: Callable[[], None], replays: int, device: str, spin: bool) -> float:
    """Median seconds of ``run()`` between CUDA events over ``replays`` (perf_counter off CUDA)."""
    times = []
    if not device.startswith("cuda"):
        for _ in range(replays):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    pairs = []
    for _ in range(replays):
        if spin:
            _spin(device)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        pairs.append((start, stop))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) / 1e3 for s, e in pairs)


def _schedule(sets: int, calls: int) -> list[int]:
    return [c % sets for c in range(calls)]


def time_eager(cand: Candidate, sets: int, calls: int, replays: int, device: str) -> float:
    order = _schedule(sets, calls)

    def batch() -> None:
        for i in order:
            cand.call(i)

    batch()  # warm-up (compilation, caches)
    batch()
    return _events_median(batch, replays, device, spin=False) / calls


def time_graph(cand: Candidate, sets: int, calls: int, replays: int, device: str) -> float:
    """Per-call device time from a CUDA graph of ``calls`` calls over the sets (see the module doc)."""
    order = _schedule(sets, calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), cand.stream_ctx(side):
        for i in order:  # warm-up on a side stream, as torch.cuda.graph asks
            cand.call(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        with cand.stream_ctx(torch.cuda.current_stream()):
            keep = [cand.call(i) for i in order]  # the results stay alive: their memory is the graph's
    for _ in range(3):
        graph.replay()
    t = _events_median(graph.replay, replays, device, spin=True) / calls
    del keep
    return t


def time_profiled(cand: Candidate, sets: int, calls: int, device: str) -> tuple[float, float]:
    """``(device seconds per call, launches per call)`` from the CUDA activity torch.profiler records (the
    kernels and copies of ``calls`` calls, summed; gaps between them are not counted)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    order = _schedule(sets, calls)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in order:
            cand.call(i)
        torch.cuda.synchronize()
    spans = [e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA]
    return 1e-6 * sum(spans) / calls, len(spans) / calls


def copy_ceiling(device: str, nbytes: int = 1 << 30, replays: int = 10) -> float:
    """GB/s (read + write counted) of one large device-to-device copy: the card's practical ceiling."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = _events_median(lambda: dst.copy_(src), replays, device, spin=True)
    return 2 * nbytes / t / 1e9


# -- the run --------------------------------------------------------------------------------------------


def check(cand: Candidate, inp: Inputs, refs: tuple[np.ndarray, np.ndarray]) -> float:
    """Rotate fresh copies of set 0 once; the larger of q's and k's relative error against the oracle."""
    src_q, src_k = inp.q[0].clone(), inp.k[0].clone()
    inp.q_out[0].copy_(inp.q[0])  # the in-place candidates rotate the *_out buffers
    inp.k_out[0].copy_(inp.k[0])
    qo, ko = cand.call(0)
    if inp.device.startswith("cuda"):
        torch.cuda.synchronize()
    if cand.name == "copy":
        refs = (src_q.double().cpu().numpy(), src_k.double().cpu().numpy())
    err = max(rel_err(qo, refs[0]), rel_err(ko, refs[1]))
    if not (torch.equal(inp.q[0], src_q) and torch.equal(inp.k[0], src_k)):
        raise AssertionError(f"{cand.name} wrote into its inputs")
    return err


def measure(cands: list[Candidate], inp: Inputs, cfg, args) -> list[dict]:
    refs = (oracle(inp.q[0], cfg), oracle(inp.k[0], cfg))
    rows = []
    for cand in cands:
        row: dict[str, Any] = {"impl": cand.name, "what": cand.what, "inplace": cand.inplace}
        try:
            row["rel_err"] = check(cand, inp, refs)
            row["correct"] = bool(row["rel_err"] <= _REL_ERR_LIMIT)
            row["eager_us"] = 1e6 * time_eager(cand, inp.sets, args.calls, args.replays, inp.device)
            if inp.device.startswith("cuda"):
                try:
                    t, n = time_profiled(cand, inp.sets, args.calls, inp.device)
                    row["profiled_us"], row["launches_per_call"] = 1e6 * t, n
                except Exception as exc:  # noqa: BLE001 - the profiler is a cross-check only
                    row["profiled_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                try:
                    row["graph_us"] = 1e6 * time_graph(cand, inp.sets, args.calls, args.replays, inp.device)
                except Exception as exc:  # noqa: BLE001 - a call that cannot be captured: eager only
                    row["graph_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - one broken candidate must not end the table
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            traceback.print_exc()
        rows.append(row)
        print(json.dumps(row), flush=True)
    copy = next(r for r in rows if r["impl"] == "copy")
    for r in rows:
        for key in ("eager", "graph", "profiled"):
            t, base = r.get(f"{key}_us"), copy.get(f"{key}_us")
            if t and base:
                r[f"{key}_fraction"] = base / t
                r[f"{key}_GBps"] = inp.bytes_moved / (t * 1e-6) / 1e9
    return rows


def sweeps(inp: Inputs, cfg, args) -> list[dict]:
    """Launch-configuration sweeps of our two kernels (graph timing; module constants patched per row)."""
    rows: list[dict] = []
    copy = next(c for c in ours(inp, cfg) if c.name == "copy")
    base = time_graph(copy, inp.sets, args.calls, args.replays, inp.device)
    rows.append({"sweep": "copy", "graph_us": 1e6 * base})
    try:
        import rope_ref.backends._cupy_plan as plan

        cand = next(c for c in ours(inp, cfg) if c.name == "cupy_qk")
        saved = (plan.BLOCK_THREADS, plan.MIN_PARALLEL_THREADS)
        lanes_tokens = inp.seq * (cfg.rotary_dim // 2)
        try:
            for threads in (64, 128, 256, 512):
                for chunks in (1, 2, 4):
                    plan.BLOCK_THREADS = threads
                    plan.MIN_PARALLEL_THREADS = lanes_tokens * chunks if chunks > 1 else saved[1]
                    t = time_graph(cand, inp.sets, args.calls, args.replays, inp.device)
                    rows.append(
                        {
                            "sweep": "cupy_qk",
                            "block_threads": threads,
                            "head_chunks": chunks,
                            "graph_us": 1e6 * t,
                            "fraction": base / t,
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            plan.BLOCK_THREADS, plan.MIN_PARALLEL_THREADS = saved
    except Exception as exc:  # noqa: BLE001
        rows.append({"sweep": "cupy_qk", "error": f"{type(exc).__name__}: {exc}"[:300]})
    try:
        from rope_ref.backends import _torch_triton as tt
        from rope_ref.backends import _torch_triton_qk as tq

        cand = next(c for c in ours(inp, cfg) if c.name == "triton_qk_kernel")
        meta, warps = tq.kernel_meta, tt.LAUNCH_OPTIONS["num_warps"]
        try:
            for rows_per in (16, 32, 64, 128):
                for nw in (4, 8):
                    tq.kernel_meta = lambda *a, r=rows_per: {**meta(*a), "ROWS": r}
                    tt.LAUNCH_OPTIONS["num_warps"] = nw
                    t = time_graph(cand, inp.sets, args.calls, args.replays, inp.device)
                    rows.append(
                        {
                            "sweep": "triton_qk_kernel",
                            "rows": rows_per,
                            "num_warps": nw,
                            "graph_us": 1e6 * t,
                            "fraction": base / t,
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            tq.kernel_meta, tt.LAUNCH_OPTIONS["num_warps"] = meta, warps
    except Exception as exc:  # noqa: BLE001
        rows.append({"sweep": "triton_qk_kernel", "error": f"{type(exc).__name__}: {exc}"[:300]})
    return rows


def table(rows: list[dict], gpu: str, bytes_moved: int) -> str:
    lines = [
        f"bf16 q+k rotation, {gpu}: {bytes_moved / 2**20:.0f} MiB moved per call (read + write of q and k)",
        "| impl | in place | rel err | graph us | graph GB/s | of copy (graph) | eager us | of copy (eager) "
        "|",
        "|---|---|---|---|---|---|---|---|",
    ]

    def f(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    for r in rows:
        if "error" in r:
            lines.append(f"| {r['impl']} | | error: {r['error']} | | | | | |")
            continue
        lines.append(
            f"| {r['impl']} | {'yes' if r['inplace'] else 'no'} | {f(r.get('rel_err'), '.1e')} | "
            f"{f(r.get('graph_us'), '.1f')} | {f(r.get('graph_GBps'), '.0f')} | "
            f"{f(100 * r['graph_fraction'], '.1f') + '%' if 'graph_fraction' in r else '-'} | "
            f"{f(r.get('eager_us'), '.1f')} | "
            f"{f(100 * r['eager_fraction'], '.1f') + '%' if 'eager_fraction' in r else '-'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the rows and the environment here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--sets", type=int, default=4, help="input sets cycled (defeats the L2 cache)")
    parser.add_argument("--calls", type=int, default=8, help="calls per graph / eager batch")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--sweep", action="store_true", help="also sweep our kernels' launch shapes")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_gpu_qk: no CUDA device", file=sys.stderr)
        return 2
    cfg = rope_ref.RopeConfig(128, layout="half", base=500000.0)
    inp = Inputs(args.seq, 32, 8, 128, args.sets, args.device)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    env = {
        "gpu": gpu,
        "torch": torch.__version__,
        "case": f"q (1,{args.seq},32,128) k (1,{args.seq},8,128) bf16 bshd half base 5e5",
        "bytes_moved": inp.bytes_moved,
        "sets": args.sets,
        "calls": args.calls,
        "replays": args.replays,
    }
    for mod in ("triton", "cupy", "flash_attn", "liger_kernel", "flashinfer", "vllm", "transformer_engine"):
        try:
            env[mod] = getattr(importlib.import_module(mod), "__version__", "?")
        except Exception:  # noqa: BLE001
            env[mod] = None
    if args.device.startswith("cuda"):
        env["copy_1GiB_GBps"] = copy_ceiling(args.device)
    print(json.dumps(env), flush=True)
    mine = ours(inp, cfg)
    theirs, missing = peers(inp, cfg)
    for peer, why in missing.items():
        print(f"{peer}: not run ({why})", flush=True)
    rows = measure(mine + theirs, inp, cfg, args)
    sweep_rows = sweeps(inp, cfg, args) if args.sweep and args.device.startswith("cuda") else []
    text = table(rows, gpu, inp.bytes_moved)
    goal = {
        r["impl"]: r.get("graph_fraction", 0.0) >= GOAL
        for r in rows
        if r["impl"] in ("cupy_qk", "triton_qk", "triton_qk_kernel")
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "environment": env,
                    "rows": rows,
                    "not_run": missing,
                    "sweeps": sweep_rows,
                    "goal": GOAL,
                    "goal_met": goal,
                },
                fh,
                indent=1,
            )
        print(f"wrote {args.json}")
    for r in sweep_rows:
        print(json.dumps(r))
    print(text)
    for name, met in goal.items():
        print(f"goal ({name} >= {GOAL:.0%} of copy, graph timing): {'met' if met else 'NOT met'}")
    bad = [r["impl"] for r in rows if r.get("correct") is False or "error" in r]
    if bad:
        print(f"wrong or failed: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
