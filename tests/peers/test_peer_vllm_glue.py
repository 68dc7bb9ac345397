"""The vLLM peer's glue (``peers/vllm_peer.py``) on the CPU, through a FAKE vllm.

vLLM needs its own environment (``peers/envs/vllm.sh``: its transformers pin conflicts with the test extra),
so its real rows come from there. Here a fake ``vllm`` implements the documented calls the adapter makes:
``get_rope(head_size, max_position, is_neox_style, rope_parameters, dtype)`` returning a module with a
``cos_sin_cache`` (``[cos | sin]`` rows), ``forward_native(positions, query, key)`` on flattened tokens and
``_compute_inv_freq(base)``; an ``MRotaryEmbedding`` for ``mrope_section``; and
``vllm._custom_ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)`` in place. Each
rotates correctly in float64, so the shipped golden cases the adapter runs must pass (what is checked is the
argument mapping, token flattening, positions, head counts, in-place writes), and a fake with a planted bug
must fail.
"""

from __future__ import annotations

import contextlib
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rope_ref.conformance.runner import Runner  # noqa: E402
from rope_ref.peers import vllm_peer  # noqa: E402
from shipped_golden import shipped_cases  # noqa: E402

CASES = shipped_cases()
SELECT = r"^(apply|cos_sin|inv_freq|apply_vjp|apply_qk|apply_qkv|multiaxis_apply)-.*"


def _rotate(x, cos, sin, neox: bool):
    """float64 rotation of ``x`` (..., rd) by per-pair cos/sin (..., rd/2)."""
    if neox:
        k = x.shape[-1] // 2
        a, b = x[..., :k], x[..., k:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


def _apply_rows(positions, t, head_size, cache, neox, sections=None, interleaved=False):
    """Rotate token rows ``t`` (T, H * D) by gathered cache rows; M-RoPE picks a stream per pair."""
    n = positions.shape[-1]
    x = t.reshape(n, -1, head_size)
    rd = cache.shape[-1]
    if sections is None:
        rows = cache.double()[positions.long()]
    else:  # (3, T) positions: pair i reads stream s(i)
        k = rd // 2
        stream = np.repeat([0, 1, 2], sections) if not interleaved else _interleaved_streams(sections, k)
        full = cache.double()[positions.long()]  # (3, T, rd)
        idx = torch.as_tensor(np.concatenate([stream, stream]))
        rows = full[idx, :, torch.arange(rd)].T  # rows[t, c] = full[idx[c], t, c]
    cos, sin = rows[:, None, : rd // 2], rows[:, None, rd // 2 :]
    y = x.double().clone()
    y[..., :rd] = _rotate(x[..., :rd].double(), cos, sin, neox)
    return y.to(t.dtype).reshape(t.shape)


def _interleaved_streams(sections, k):
    s = np.zeros(k, dtype=int)
    s[1 : 3 * sections[1] : 3] = 1
    s[2 : 3 * sections[2] : 3] = 2
    return s


class _FakeRope(torch.nn.Module):
    def __init__(self, head_size, rotary_dim, max_position, base, neox, dtype, factor=1.0, mrope=None):
        super().__init__()
        self.head_size, self.rotary_dim, self.base, self.is_neox_style = head_size, rotary_dim, base, neox
        self.mrope = mrope
        inv = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        t = torch.arange(int(max_position * factor), dtype=torch.float64) / factor
        f = t[:, None] * inv[None]
        self.cos_sin_cache = torch.cat([f.cos(), f.sin()], -1).to(dtype)

    def _compute_inv_freq(self, base):
        return 1.0 / (base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float) / self.rotary_dim))

    def forward_native(self, positions, query, key=None):
        kw = {} if self.mrope is None else {"sections": self.mrope[0], "interleaved": self.mrope[1]}
        q = _apply_rows(positions, query, self.head_size, self.cos_sin_cache, self.is_neox_style, **kw)
        k = (
            None
            if key is None
            else _apply_rows(positions, key, self.head_size, self.cos_sin_cache, self.is_neox_style, **kw)
        )
        return q, k

    def forward_cpu(self, positions, query, key=None):  # vLLM's RotaryEmbedding.forward_cpu: the C++ op
        sys.modules["vllm._custom_ops"].rotary_embedding(
            positions, query, key, self.head_size, self.cos_sin_cache.to(query.dtype), self.is_neox_style
        )
        return query, key


class MRotaryEmbedding(_FakeRope):
    def forward_cpu(self, positions, query, key=None):  # CustomOp.forward_cpu's default
        return self.forward_native(positions, query, key)


def _get_rope(head_size, max_position, is_neox_style=True, rope_parameters=None, dtype=None, **_):
    p = dict(rope_parameters or {})
    rd = int(head_size * p.get("partial_rotary_factor", 1.0))
    kind = p.get("rope_type", "default")
    if kind not in ("default", "linear"):
        raise ValueError(f"fake get_rope: no {kind}")
    factor = float(p.get("factor", 1.0)) if kind == "linear" else 1.0
    if "mrope_section" in p:
        return MRotaryEmbedding(
            head_size,
            rd,
            max_position,
            p["rope_theta"],
            is_neox_style,
            dtype,
            mrope=(p["mrope_section"], p.get("mrope_interleaved", False)),
        )
    return _FakeRope(head_size, rd, max_position, p["rope_theta"], is_neox_style, dtype, factor)


def _install(monkeypatch, *, planted: str = ""):
    root = types.ModuleType("vllm")
    root.__version__ = "0.32.0+fake"
    ops = types.ModuleType("vllm._custom_ops")

    def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
        neox = (not is_neox) if planted == "layout" else is_neox
        query.copy_(_apply_rows(positions, query, head_size, cos_sin_cache, neox))
        if key is not None:
            key.copy_(_apply_rows(positions, key, head_size, cos_sin_cache, neox))

    ops.rotary_embedding = rotary_embedding
    config = types.ModuleType("vllm.config")
    config.VllmConfig = lambda: object()
    config.set_current_vllm_config = lambda cfg: contextlib.nullcontext()
    monkeypatch.setitem(sys.modules, "vllm.config", config)
    rope_mod = types.ModuleType(vllm_peer._ROPE)
    rope_mod.get_rope = _get_rope
    for name in ("vllm.model_executor", "vllm.model_executor.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm", root)
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", ops)
    monkeypatch.setitem(sys.modules, vllm_peer._ROPE, rope_mod)


def _run(flavour, precision="fp32", select=SELECT):
    backend = vllm_peer.make_backend(precision, flavour=flavour)
    return Runner(backend, precision=precision).run(CASES, select=select)


def test_missing_vllm_is_one_line_saying_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setitem(sys.modules, vllm_peer._ROPE, None)
    ok, why = vllm_peer.available()
    assert not ok and "peers/envs/vllm.sh" in why and "\n" not in why


@pytest.mark.parametrize("flavour", ["cpu", pytest.param("native", marks=pytest.mark.slow)])
def test_glue_passes_against_a_correct_fake(monkeypatch, flavour):
    _install(monkeypatch)
    report = _run(flavour)
    ran = [r for r in report.results if r.status in ("passed", "failed")]
    failed = [f"{r.case_id}: {r.message.splitlines()[0]}" for r in ran if r.status == "failed"]
    assert not failed, "\n".join(failed[:20])
    ops_run = {r.op for r in ran}
    assert {"apply", "cos_sin", "inv_freq", "apply_qk", "apply_qkv", "multiaxis_apply"} <= ops_run, ops_run
    if flavour == "native":
        assert "apply_vjp" in ops_run


def test_cpu_flavour_writes_in_place(monkeypatch):
    import rope_ref

    _install(monkeypatch)
    peer = vllm_peer.make_backend("fp32", flavour="cpu")
    cfg = rope_ref.RopeConfig(16, layout="half")
    q = torch.randn(5, 4, 16)  # thd, 4 q heads, 2 kv heads
    k = torch.randn(5, 2, 16)
    pos = np.array([0, 3, 4, 9, 100])
    want_q = peer.apply(q.clone(), pos[:, None], cfg)
    q2, k2 = peer.apply_qk(q, k, cfg, axes="thd", positions=pos, inplace=True)
    assert q2 is q and k2 is k
    torch.testing.assert_close(q, want_q, atol=1e-6, rtol=0)
    with pytest.raises(ValueError):  # 4 q heads, 3 kv heads: refused before vLLM sees it
        peer.apply_qk(q, torch.randn(5, 3, 16), cfg, axes="thd", positions=pos)


def test_positions_past_the_cache_are_refused_not_crashed(monkeypatch):
    import rope_ref

    _install(monkeypatch)
    peer = vllm_peer.make_backend("fp32", flavour="cpu")
    s = rope_ref.scaling.scaling_from_hf({"rope_type": "linear", "factor": 2.0})
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=s)
    rope = peer._rope(cfg, np.array([10]))
    rows = rope.cos_sin_cache.shape[0]
    with pytest.raises(vllm_peer.Unsupported, match="past vLLM's cos_sin_cache"):
        peer._forward(rope, torch.tensor([rows]), torch.zeros(1, 16), torch.zeros(1, 16))


def test_a_planted_layout_bug_fails(monkeypatch):
    _install(monkeypatch, planted="layout")
    report = _run("cpu", select=r"^apply_qk-")
    assert any(r.status == "failed" for r in report.results)
