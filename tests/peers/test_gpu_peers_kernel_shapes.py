"""The GPU peers' kernel-shape glue (issue 16), on the CPU, through fake libraries.

flash-attn, Liger, vLLM, TransformerEngine and FlashInfer need a CUDA GPU, so their adapters
(``peers/gpu_peers.py``) cannot run here. Each test installs a FAKE module under the library's import
name that implements the documented signature (``apply_rotary_emb(x, cos, sin, interleaved, inplace,
seqlen_offsets, cu_seqlens, max_seqlen)``, ``rotary_embedding(positions, query, key, head_size,
cos_sin_cache, is_neox)``, ...) with a correct float64 rotation on torch CPU tensors, and runs the shipped
golden set's kernel-shape cases (``apply_axes``, ``apply_qk``, ``apply_qkv``, ``round_trip``) through the
runner: the argument mapping, axes, offsets, ``cu_seqlens``, views and in-place writes of the adapter are
what is checked. A fake with a planted bug (offsets ignored, positions not restarted, strides ignored)
must fail.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rope_ref.conformance.kernel_shapes import KERNEL_OPS  # noqa: E402
from rope_ref.conformance.runner import Runner  # noqa: E402
from rope_ref.peers.gpu_peers import KERNEL_SUPPORT, GpuPeer  # noqa: E402
from shipped_golden import shipped_cases  # noqa: E402

CASES = [c for c in shipped_cases() if c.op in KERNEL_OPS]


# -- float64 rotation shared by the fakes -----------------------------------------------------------------


def _rotate(x, cos, sin, interleaved: bool):
    """Rotate float64 ``x`` (..., rd) by per-pair cos/sin (..., rd/2) in the given layout."""
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
    k = x.shape[-1] // 2
    a, b = x[..., :k], x[..., k:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)


def _write(out, x, cos, sin, interleaved: bool):
    """``out[..., :rd] = rotate(x[..., :rd])`` in x's dtype (cos/sin broadcast against x without d)."""
    rd = 2 * cos.shape[-1]
    y = _rotate(x[..., :rd].double(), cos.double(), sin.double(), interleaved)
    out[..., :rd] = y.to(out.dtype)
    return out


def _varlen_positions(cu, offsets, n_tok: int, restart: bool = True):
    """Per-token positions of packed sequences: ``t - cu[j] + offsets[j]`` for token t of sequence j."""
    cu = cu.long()
    seq = torch.searchsorted(cu[1:], torch.arange(n_tok), right=True)
    t = torch.arange(n_tok)
    return (t - cu[seq] if restart else t) + offsets[seq]


def _offsets(value, n: int):
    return value.long() if isinstance(value, torch.Tensor) else torch.full((n,), int(value))


# -- fake libraries ---------------------------------------------------------------------------------------


def fake_flash_attn(bug: str = ""):
    def apply_rotary_emb(
        x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None
    ):
        assert x.dtype == cos.dtype == sin.dtype, "Input and cos/sin must have the same dtype"
        assert cos.shape == sin.shape and 2 * cos.shape[1] <= x.shape[-1]
        if isinstance(seqlen_offsets, torch.Tensor):
            assert seqlen_offsets.dtype in (torch.int32, torch.int64)
        if cu_seqlens is None:
            batch, seqlen = x.shape[:2]
            assert cos.shape[0] >= seqlen, "seqlen_ro must be >= seqlen"
            off = _offsets(seqlen_offsets, batch)
            if bug == "ignore_offsets":
                off = torch.zeros_like(off)
            pos = torch.arange(seqlen)[None] + off[:, None]  # (B, S)
        else:
            assert max_seqlen is not None and cos.shape[0] >= max_seqlen
            off = _offsets(seqlen_offsets, cu_seqlens.numel() - 1)
            if bug == "ignore_offsets":
                off = torch.zeros_like(off)
            pos = _varlen_positions(cu_seqlens, off, x.shape[0], restart=bug != "no_restart")
        assert (int(pos.max()) if pos.numel() else 0) < cos.shape[0]
        out = x if inplace else x.clone()
        return _write(out, x, cos[pos].unsqueeze(-2), sin[pos].unsqueeze(-2), interleaved)

    def apply_rotary_emb_qkv_(
        qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False, seqlen_offsets=0, num_heads_q=None
    ):
        if qkv.dim() == 5:
            assert qkv.shape[2] == 3
            q, k = qkv[:, :, 0], qkv[:, :, 1]
            if bug == "rotate_v":
                k = qkv[:, :, 1:]
        else:
            assert num_heads_q is not None
            hk = (qkv.shape[2] - num_heads_q) // 2
            assert qkv.shape[2] == num_heads_q + 2 * hk
            q, k = qkv[:, :, :num_heads_q], qkv[:, :, num_heads_q : num_heads_q + hk]
            if bug == "rotate_v":
                k = qkv[:, :, num_heads_q:]
        apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
        apply_rotary_emb(k, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k, interleaved,
                         True, seqlen_offsets)  # fmt: skip
        return qkv

    mod = types.ModuleType("flash_attn.layers.rotary")
    mod.apply_rotary_emb = apply_rotary_emb
    mod.apply_rotary_emb_qkv_ = apply_rotary_emb_qkv_
    return {"flash_attn.layers.rotary": mod}


def fake_liger(bug: str = ""):
    def liger_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        assert q.dim() == 4 and k.dim() == 4 and q.shape[2] == k.shape[2] == cos.shape[1]
        assert cos.shape[0] in (1, q.shape[0]) and cos.shape[-1] == q.shape[-1]
        half = cos.shape[-1] // 2
        c, s = cos[..., :half].unsqueeze(unsqueeze_dim), sin[..., :half].unsqueeze(unsqueeze_dim)
        qo = _write(q.clone(), q, c, s, False)
        return qo, (k.clone() if bug == "skip_k" else _write(k.clone(), k, c, s, False))

    mod = types.ModuleType("liger_kernel.transformers.rope")
    mod.liger_rotary_pos_emb = liger_rotary_pos_emb
    return {"liger_kernel.transformers.rope": mod}


def fake_vllm(bug: str = ""):
    def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
        assert query.dtype == key.dtype == cos_sin_cache.dtype, "query and cos_sin_cache dtypes differ"
        assert positions.dtype == torch.int64 and positions.dim() == 1
        n_tok = positions.numel()
        cos, sin = cos_sin_cache[positions].chunk(2, -1)  # (T, rd / 2)
        for t in (query, key):
            assert t.shape[0] == n_tok and t.stride(-1) == 1
            target = t.contiguous() if bug == "ignore_strides" else t
            rows = target.view(n_tok, -1, head_size)
            _write(rows, rows, cos.unsqueeze(1), sin.unsqueeze(1), not is_neox)

    ops = types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = rotary_embedding
    return {"vllm._custom_ops": ops, "vllm.model_executor.layers.rotary_embedding": types.ModuleType("re")}


def fake_te(bug: str = ""):
    class RotaryPositionEmbedding:
        def __init__(
            self,
            dim,
            rotary_percent=1.0,
            seq_len_interpolation_factor=None,
            pretrained_max_position_embeddings=None,
            rotary_base=10000.0,
            interleaved=False,
        ):
            self.inv_freq = 1.0 / rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
            self.interleaved = interleaved

        def __call__(self, max_seq_len, offset=0):
            freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float64) + offset, self.inv_freq)
            emb = freqs.repeat_interleave(2, -1) if self.interleaved else torch.cat((freqs, freqs), -1)
            return emb.float().reshape(emb.shape[0], 1, 1, emb.shape[1])

    def apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", start_positions=None, interleaved=False,
                             fused=False, cu_seqlens=None, cp_size=1, cp_rank=0):  # fmt: skip
        assert freqs.dim() == 4 and freqs.shape[1] == freqs.shape[2] == 1
        f = freqs.float().double()[:, 0, 0, :]
        half = f[..., 0::2] if interleaved else f[..., : f.shape[-1] // 2]
        if tensor_format == "thd":
            assert cu_seqlens is not None and cu_seqlens.dtype == torch.int32
            n = cu_seqlens.numel() - 1
            start = (
                start_positions.long() if start_positions is not None else torch.zeros(n, dtype=torch.long)
            )
            pos = _varlen_positions(cu_seqlens, start, t.shape[0], restart=bug != "no_restart")
        else:
            s_ax = 0 if tensor_format == "sbhd" else 1
            b, s = t.shape[1 - s_ax], t.shape[s_ax]
            start = (
                start_positions.long() if start_positions is not None else torch.zeros(b, dtype=torch.long)
            )
            pos = torch.arange(s)[None] + start[:, None]  # (B, S)
            pos = pos.T if tensor_format == "sbhd" else pos
        assert int(pos.max()) < f.shape[0]
        ang = half[pos].unsqueeze(-2)
        return _write(t.clone(), t, torch.cos(ang), torch.sin(ang), interleaved)

    mod = types.ModuleType("transformer_engine.pytorch.attention.rope")
    mod.RotaryPositionEmbedding = RotaryPositionEmbedding
    mod.apply_rotary_pos_emb = apply_rotary_pos_emb
    return {"transformer_engine.pytorch.attention.rope": mod}


def fake_flashinfer(bug: str = ""):
    def rotate(q, k, pos, rotary_dim, interleave, rope_scale, rope_theta, inplace):
        d = q.shape[-1]
        rd = rotary_dim or d
        inv = rope_theta ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        ang = (pos.double() / rope_scale)[:, None] * inv  # (nnz, rd / 2)
        c, s = torch.cos(ang).unsqueeze(1), torch.sin(ang).unsqueeze(1)
        outs = []
        for t in (q, k):
            assert t.dim() == 3 and t.shape[0] == pos.numel() and t.stride(-1) == 1
            outs.append(_write(t if inplace else t.clone(), t, c, s, interleave))
        return None if inplace else tuple(outs)

    def segments(q, indptr, offsets):
        assert indptr.dtype in (torch.int32, torch.int64) and offsets.dtype in (torch.int32, torch.int64)
        off = torch.zeros_like(offsets) if bug == "ignore_offsets" else offsets
        return _varlen_positions(indptr, off.long(), q.shape[0])

    mod = types.ModuleType("flashinfer.rope")

    def apply_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
        return rotate(
            q, k, segments(q, indptr, offsets), rotary_dim, interleave, rope_scale, rope_theta, False
        )

    def apply_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1,
                           rope_theta=1e4):  # fmt: skip
        rotate(q, k, segments(q, indptr, offsets), rotary_dim, interleave, rope_scale, rope_theta, True)

    def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
        return rotate(q, k, pos_ids, rotary_dim, interleave, rope_scale, rope_theta, False)

    def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1,
                                   rope_theta=1e4):  # fmt: skip
        rotate(q, k, pos_ids, rotary_dim, interleave, rope_scale, rope_theta, True)

    for fn in (apply_rope, apply_rope_inplace, apply_rope_pos_ids, apply_rope_pos_ids_inplace):
        setattr(mod, fn.__name__, fn)
    return {"flashinfer.rope": mod}


FAKES = {
    "flash-attn": fake_flash_attn,
    "liger-kernel": fake_liger,
    "vllm": fake_vllm,
    "transformer-engine": fake_te,
    "flashinfer": fake_flashinfer,
}


def peer(monkeypatch, library: str, precision: str = "fp32", bug: str = "") -> GpuPeer:
    for name, module in FAKES[library](bug).items():
        parts = name.split(".")
        for i in range(1, len(parts)):  # parents, so nothing real is imported
            parent = ".".join(parts[:i])
            if parent not in sys.modules:
                monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
        monkeypatch.setitem(sys.modules, name, module)
    return GpuPeer(library, precision, device="cpu")


def run(b: GpuPeer):
    report = Runner(b, timeout=120.0).run(CASES)
    return {r.case_id: r for r in report.results}, report


# What each adapter must pass at fp32 (the golden set has 33 kernel-shape cases per I/O dtype), per op.
MIN_PASSED = {
    "flash-attn": {"apply_axes": 10, "apply_qk": 4, "apply_qkv": 3, "round_trip": 1},
    "liger-kernel": {"apply_qk": 1},
    "vllm": {"apply_qk": 4, "apply_qkv": 3},
    "transformer-engine": {"apply_axes": 9, "round_trip": 1},
    "flashinfer": {"apply_qk": 4, "apply_qkv": 3},
}


@pytest.mark.parametrize("library", list(FAKES))
def test_adapter_passes_kernel_shapes(monkeypatch, library):
    results, report = run(peer(monkeypatch, library))
    bad = [f"{r.case_id}: {r.message}" for r in report.failures]
    assert not bad, "\n".join(bad)
    ran = [r for r in results.values() if r.status != "skipped"]
    passed: dict[str, int] = {}
    for r in ran:
        if r.status == "passed":
            passed[r.op] = passed.get(r.op, 0) + 1
        else:  # unsupported: with a reason, and "operation" only for calls the library lacks
            assert r.status == "unsupported" and r.message, (r.case_id, r.status)
            if r.unsupported_reason == "operation":
                lacks = r.op not in KERNEL_SUPPORT[library] and not (
                    r.op == "round_trip" and "apply_axes" in KERNEL_SUPPORT[library]
                )
                assert lacks or "in place" in r.message, (r.case_id, r.message)
    for op, n in MIN_PASSED[library].items():
        assert passed.get(op, 0) >= n, (library, op, passed)
    borrowed = {r.op for r in ran if r.status == "passed" and r.borrowed}
    assert borrowed <= set(GpuPeer.__init__.__globals__["_KERNEL_TABLES"].get(library, ()))


@pytest.mark.parametrize("library", ["flash-attn", "vllm", "flashinfer"])
def test_low_precision_io(monkeypatch, library):
    """bf16/fp16 activations: tables in the activation dtype (flash-attn, vLLM) stay within the bounds."""
    for precision in ("bf16", "fp16"):
        _, report = run(peer(monkeypatch, library, precision))
        bad = [f"{r.case_id}: {r.message}" for r in report.failures]
        assert not bad, "\n".join(bad)
        assert report.counts()["passed"] >= 5


def test_flash_attn_in_place_writes_the_handed_views(monkeypatch):
    results, _ = run(peer(monkeypatch, "flash-attn"))
    for cid in (
        "apply_axes-bshd-q-of-packed-inplace-half-fp32",
        "apply_axes-bhsd-transposed-inplace-half-fp32",
        "apply_qkv-thd-qkv-inplace-interleaved-fp32",
    ):
        assert results[cid].status in ("passed", "unsupported"), (cid, results[cid].message)
    assert results["apply_qkv-thd-qkv-inplace-interleaved-fp32"].status == "passed"
    assert results["apply_axes-thd-lengths-starts-interleaved-partial-fp32"].status == "passed"
    assert results["apply_axes-bhsd-offset-rows-interleaved-fp32"].status == "passed"


SLOW = pytest.mark.slow  # flash-attn is the costliest adapter to run twice: one of its bugs in the quick run

BUGS = [
    pytest.param("flash-attn", "ignore_offsets", "apply_axes-thd-lengths-starts-interleaved-partial-fp32",
                 marks=SLOW),
    ("flash-attn", "ignore_offsets", "apply_axes-bshd-decode-rows-interleaved-fp32"),
    pytest.param("flash-attn", "no_restart", "apply_axes-thd-lengths-half-fp32", marks=SLOW),
    pytest.param("flash-attn", "rotate_v", "apply_qkv-bhsd-4-4-interleaved-offset-fp32", marks=SLOW),
    ("liger-kernel", "skip_k", "apply_qk-bshd-32-8-half-fp32"),
    ("vllm", "ignore_strides", "apply_qkv-thd-qkv-inplace-interleaved-fp32"),
    ("transformer-engine", "no_restart", "apply_axes-thd-scalar-start-half-fp32"),
    ("flashinfer", "ignore_offsets", "apply_qkv-thd-8-1-interleaved-partial-fp32"),
]


@pytest.mark.parametrize(("library", "bug", "case_id"), BUGS)
def test_planted_bug_fails(monkeypatch, library, bug, case_id):
    good, _ = run(peer(monkeypatch, library))
    assert good[case_id].status == "passed", (case_id, good[case_id].message)
    bad, report = run(peer(monkeypatch, library, bug=bug))
    assert bad[case_id].status == "failed", (case_id, bad[case_id].status, bad[case_id].message)
    assert not report.ok


def test_unsupported_reasons(monkeypatch):
    """Forms a library cannot express are reported unsupported with the reason, never run wrongly."""
    fa, _ = run(peer(monkeypatch, "flash-attn"))
    r = fa["apply_axes-bshd-ids-half-fp32"]  # HF (B, S) ids: rows neither arange + offset nor shared
    assert r.status == "unsupported" and "arange" in r.message
    fi, _ = run(peer(monkeypatch, "flashinfer"))
    assert fi["apply_axes-bshd-ids-half-fp32"].unsupported_reason == "operation"
    r = fi["apply_qk-bhsd-16-4-half-partial-offset-fp32"]
    assert r.status == "unsupported" and "bhsd" in r.message
    te, _ = run(peer(monkeypatch, "transformer-engine"))
    assert te["round_trip-bshd-yarn-half-fp32"].status == "unsupported"


def test_bad_input_is_a_value_error(monkeypatch):
    b = peer(monkeypatch, "flash-attn")
    from rope_ref import RopeConfig

    cfg = RopeConfig(8, layout="half")
    x = torch.zeros(5, 2, 8, dtype=torch.float32)
    with pytest.raises(ValueError, match="cu_seqlens"):
        b.apply_axes(x, cfg, axes="thd", cu_seqlens=np.array([0, 3, 2, 5]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        b.apply_axes(x, cfg, axes="thd", cu_seqlens=np.array([0, 3, 4]))
    with pytest.raises(ValueError, match="axes"):
        b.apply_axes(x, cfg, axes="bshd", positions=np.arange(5))
    with pytest.raises(ValueError, match="num_heads"):
        b.apply_qkv(
            torch.zeros(5, 5, 8), cfg, axes="thd", num_heads_q=2, num_heads_kv=2, positions=np.arange(5)
        )
    with pytest.raises(ValueError, match="offset"):
        b.apply_axes(torch.zeros(2, 3, 2, 8), cfg, axes="bshd", offset=np.array([1, 2, 3]))
