"""The CPU peers (real RoPE libraries) through the suite: their verdicts must match their findings files.

A failure no finding explains, or a finding that no longer fails (stale), fails the test; a library that
is not installed is skipped with the reason. The precisions run here are a subset that still reaches
every finding (``rope-ref ecosystem`` runs them all).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest


def _peers_package():
    try:
        return importlib.import_module("rope_ref.peers")
    except ImportError:  # the checkout's peers/ before the package mapping is installed
        root = str(Path(__file__).resolve().parents[2])
        if root not in sys.path:
            sys.path.insert(0, root)
        return importlib.import_module("peers")


peers = _peers_package()
cli = importlib.import_module(peers.__name__ + ".cli_ecosystem")
findings_mod = importlib.import_module(peers.__name__ + "._findings")

# peer -> precisions checked in CI (each finding's precisions are covered)
CI_RUNS = {
    "hf:llama": ("fp32",),
    "hf:gpt-neox": ("bf16",),
    "hf:glm": ("fp32",),
    "hf:gptj": ("fp16",),
    "onnxruntime": ("fp16",),
    "onnxruntime:contrib": ("fp32",),
    "onnx-reference": ("bf16",),
    "rotary-embedding-torch": ("fp32", "fp16", "bf16"),
    "torchtune": ("bf16",),
    "mlx": ("fp32",),
    "mlx-lm": ("bf16",),
    # not installed by CI (TensorFlow); skipped there. bf16 reaches all six keras-hub findings. One Keras
    # backend per process: the second flavour skips with the reason.
    "keras-hub:torch": ("bf16",),
    "keras-hub:jax": ("bf16",),
}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One intra-op thread: these tensors are tiny, and CI's 2 cores are shared (3x faster here)."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cases():
    from shipped_golden import shipped_cases

    return shipped_cases()


@pytest.mark.parametrize("peer,precision", [(p, q) for p, qs in CI_RUNS.items() for q in qs])
@pytest.mark.slow
def test_peer_verdicts_match_findings(peer, precision, cases):
    ok, reason = peers.peer_status(peer)
    if not ok:
        pytest.skip(f"{peer}: {reason}")
    result = cli.run_peer(peer, precision, cases)
    problems = [
        f"unexplained failure {u['case']} [{u['bug_class']}, {u['kind']}]" for u in result["unexplained"]
    ]
    problems += [f"stale finding {f} (no longer fails at {precision})" for f in result["stale_findings"]]
    assert not problems, f"{peer} {result['version']} {precision}:\n" + "\n".join(problems)
    assert sum(result["counts"].values()) > 0


def test_findings_files_are_complete():
    """Every finding names a reproducer script that exists (or says why there is none yet)."""
    for peer in peers.peer_names():
        for f in findings_mod.load_findings(peer):
            assert f.root_cause.strip() and f.cases, (peer, f.id)
            script = Path(findings_mod.FINDINGS_DIR).parent / "reproducers" / f.reproducer
            assert script.is_file() or f.reproducer.startswith("none yet"), (peer, f.id, f.reproducer)


def test_import_rope_ref_stays_light():
    """Importing the peers package imports no peer library."""
    code = (
        "import sys; import rope_ref; "
        f"import importlib; importlib.import_module({peers.__name__!r}); "
        "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'mlx', 'keras') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    import subprocess

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr


def test_results_page_matches_its_json():
    """docs/results/ecosystem.md is the rendering of ecosystem.json (both written by rope-ref ecosystem)."""
    import json

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    if not (results / "ecosystem.json").is_file():
        pytest.skip("no results page in this checkout")
    page = json.loads((results / "ecosystem.json").read_text(encoding="utf-8"))
    assert cli.render_md(page) == (results / "ecosystem.md").read_text(encoding="utf-8")


def test_glue_layout_bridge_and_probes_against_the_oracle():
    """_glue's permutation, prefill plan and unit-vector probe, checked with rope_ref itself (no library)."""
    import numpy as np

    import rope_ref

    glue = importlib.import_module(peers.__name__ + "._glue")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 40))
    pos = np.array([0, 3, 3, 17, 250])
    half = rope_ref.RopeConfig(40, layout="half", rotary_dim=24)
    inter = rope_ref.RopeConfig(40, layout="interleaved", rotary_dim=24)
    perm = glue.layout_permutation(24, 40)
    y = rope_ref.apply(x[:, perm], pos, inter)[:, np.argsort(perm)]
    np.testing.assert_allclose(y, rope_ref.apply(x, pos, half), rtol=0, atol=1e-12)

    length, batch, slots = glue.prefill_plan(pos, 40)
    assert (length, batch) == (251, 2)  # position 3 appears twice: two batch rows
    assert len({(int(s), int(p)) for s, p in zip(slots, pos, strict=True)}) == pos.size  # no collisions
    assert glue.prefill_plan(pos, 40, cap=1000) is None

    for cfg in (half, inter):
        rows = np.repeat(pos, cfg.rotary_dim // 2)
        cos, sin = glue.probe_cos_sin(
            lambda e, c=cfg, r=rows: rope_ref.apply(e.reshape(-1, 40), r, c).reshape(e.shape), pos.size, cfg
        )
        want_cos, want_sin = rope_ref.cos_sin(pos.astype(float), cfg)
        np.testing.assert_allclose(cos, want_cos, atol=1e-12)
        np.testing.assert_allclose(sin, want_sin, atol=1e-12)


def test_keras_hub_findings_are_shared_and_complete():
    """keras-hub:torch and keras-hub:jax share findings/keras-hub.toml; each finding names its reproducer."""
    keras_findings = findings_mod.load_findings("keras-hub")
    assert len(keras_findings) == 6
    for flavour in ("keras-hub:torch", "keras-hub:jax"):
        loaded, file = cli.peer_findings(flavour)
        assert file == "keras-hub.toml" and loaded == keras_findings
    reproducers = Path(findings_mod.FINDINGS_DIR).parent / "reproducers"
    for f in keras_findings:
        assert f.root_cause.strip() and f.upstream and f.affected, f.id
        assert f.reproducer.startswith("keras_hub_") and (reproducers / f.reproducer).is_file(), f.id
    # the half-precision findings are declared for fp16/bf16 only
    half = {f.id for f in keras_findings if f.precisions}
    assert half == {"keras-hub-yarn-factor-in-compute-dtype", "keras-hub-float-positions-autocast"}
    assert cli.peer_findings("hf:llama")[1] == "hf_llama.toml"  # a peer's own file comes first


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in (Path(findings_mod.FINDINGS_DIR).parent / "reproducers").glob("keras_hub_*.py")),
)
def test_keras_hub_reproducers_fail_today(script):
    """Each keras-hub reproducer exits non-zero while its bug is present (needs keras-hub: skipped on CI)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("keras_hub") is None:
        pytest.skip("keras-hub is not installed (it pulls TensorFlow)")
    path = Path(findings_mod.FINDINGS_DIR).parent / "reproducers" / script
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr


def test_merge_pages_replaces_only_the_merged_peers_rows():
    """--merge / --update: rows of the merged peers replace theirs, in registry order; no keras needed."""

    def run(peer, precision):
        return {"peer": peer, "precision": precision, "counts": {}}

    order = ["hf:llama", "onnxruntime", "keras-hub:torch", "keras-hub:jax", "mlx"]
    base = {
        "runs": [run("hf:llama", "fp32"), run("mlx", "fp32")],
        "not_run": {"keras-hub:torch": "not installed", "keras-hub:jax": "not installed"},
        "findings": {"hf:llama": [{"id": "a"}], "keras-hub:torch": [], "mlx": []},
        "cases": 3,
    }
    new = {
        "runs": [run("keras-hub:torch", "fp32"), run("keras-hub:torch", "bf16")],
        "not_run": {},
        "findings": {"keras-hub:torch": [{"id": "k", "file": "keras-hub.toml"}]},
        "cases": 3,
    }
    page = cli.merge_pages(base, new, order)
    assert [(r["peer"], r["precision"]) for r in page["runs"]] == [
        ("hf:llama", "fp32"),
        ("keras-hub:torch", "fp32"),
        ("keras-hub:torch", "bf16"),
        ("mlx", "fp32"),
    ]
    assert page["not_run"] == {"keras-hub:jax": "not installed"}
    assert list(page["findings"]) == ["hf:llama", "keras-hub:torch", "mlx"]
    assert page["findings"]["keras-hub:torch"] == [{"id": "k", "file": "keras-hub.toml"}]
    assert cli.merge_pages(page, {"runs": [], "not_run": {}, "findings": {}, "cases": 3}, order) == page


def test_merge_refuses_rows_from_another_golden_set(tmp_path):
    """--merge of rows computed on another golden set exits 2 and writes nothing."""
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    other = tmp_path / "other.json"
    other.write_text('{"runs": [], "not_run": {}, "findings": {}, "cases": 1}', encoding="utf-8")
    args = parser.parse_args(["--merge", str(other), "--out", str(tmp_path / "page"), "-q"])
    assert cli.run(args) == 2
    assert not (tmp_path / "page").exists()


KERNEL_SHAPE_PEERS = (
    "hf:llama",
    "hf:gptj",
    "torchtune",
    "mlx",
    "mlx-lm",
    "rotary-embedding-torch",
    "onnxruntime",
    "onnxruntime:contrib",
    "onnx-reference",
)


@pytest.mark.parametrize("peer", KERNEL_SHAPE_PEERS)
def test_cpu_peers_run_kernel_shapes_natively(peer, cases):
    """Issue 16: the CPU peers whose libraries take these shapes run apply_axes / apply_qk through them (no
    case "operation missing" except the packed qkv and in-place ones), and every failure is explained."""
    ok, reason = peers.peer_status(peer)
    if not ok:
        pytest.skip(f"{peer}: {reason}")
    kernel = [c for c in cases if c.op in ("apply_axes", "apply_qk", "apply_qkv", "round_trip")]
    result = cli.run_peer(peer, "fp32", kernel)
    assert not result["unexplained"], result["unexplained"]
    assert result["counts"]["passed"] + result["counts"]["passed_oracle_tables"] >= 5, result["counts"]
    missing = [r for r in result["unsupported_reasons"] if r.startswith("[operation]")]
    allowed = ("in place", "packed-qkv", "packed qkv")
    assert all(any(a in r for a in allowed) for r in missing), missing


@pytest.mark.slow
def test_rotary_embedding_torch_offset_reproducer_fails_today():
    import importlib.util
    import subprocess

    if importlib.util.find_spec("rotary_embedding_torch") is None:
        pytest.skip("rotary-embedding-torch is not installed")
    path = (
        Path(findings_mod.FINDINGS_DIR).parent
        / "reproducers"
        / "rotary_embedding_torch_offset_half_positions.py"
    )
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
