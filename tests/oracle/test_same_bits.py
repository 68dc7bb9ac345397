"""The oracle's bits do not depend on the CPU, the BLAS, the thread count or NumPy's SIMD dispatch.

Three kinds of evidence:
1. a static check: no CPU-dependent NumPy/math function and no ``@`` anywhere in the oracle's source
   (``rope_ref/`` and the golden-vector generator);
2. golden generation with those NumPy functions patched to raise still succeeds (nothing on the value
   path reaches them, whatever the static check misses);
3. subprocesses under different ``NPY_DISABLE_CPU_FEATURES``, ``OPENBLAS_NUM_THREADS`` and
   ``OPENBLAS_CORETYPE`` produce the same bytes: the golden set (equal to the shipped set) and the
   reductions (attention, score curve, decay bound).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import rope_ref

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "conformance" / "golden"

# Functions whose results depend on the CPU (SIMD dispatch, FMA) or on the BLAS and its threads.
FORBIDDEN_NUMPY = {
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "power", "float_power", "hypot", "dot", "vdot", "inner",
    "matmul", "einsum", "tensordot", "linalg", "cbrt",
}  # fmt: skip
FORBIDDEN_MATH = {"sin", "cos", "tan", "exp", "expm1", "log", "log2", "log10", "log1p", "pow", "atan"}
# The value path: the oracle and the generator of golden vectors: its case families and golden writer.
# (The backends are judged by the oracle, not part of it.)
VALUE_PATH = (
    sorted((ROOT / "rope_ref").rglob("*.py"))
    + sorted((ROOT / "conformance" / "cases").rglob("*.py"))
    + sorted((ROOT / "conformance").glob("golden*.py"))
    + [ROOT / "conformance" / "catalogue.py", ROOT / "conformance" / "oracle_backend.py"]
)
# Display-only code may use anything: the command line's text and the decay plot's moving average. The
# judges (the tolerance model, the diagnoses of rope_ref.testing) bound and explain errors; they produce
# no value of the oracle.
DISPLAY_ONLY = {ROOT / "rope_ref" / "cli"}
JUDGES = {ROOT / "rope_ref" / "tolerance.py", ROOT / "rope_ref" / "diagnoses.py"}


def _violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append(f"{path.name}:{node.lineno} uses @ (BLAS)")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module, name = node.value.id, node.attr
            if module in ("np", "numpy") and name in FORBIDDEN_NUMPY:
                found.append(f"{path.name}:{node.lineno} uses np.{name}")
            if module == "math" and name in FORBIDDEN_MATH:
                found.append(f"{path.name}:{node.lineno} uses math.{name}")
        if isinstance(node, ast.ImportFrom) and node.module in ("math", "numpy"):
            bad = {a.name for a in node.names} & (FORBIDDEN_MATH | FORBIDDEN_NUMPY)
            if bad:
                found.append(f"{path.name}:{node.lineno} imports {sorted(bad)} from {node.module}")
    return found


def test_static_check_finds_no_cpu_dependent_function_on_the_value_path():
    files = [p for p in VALUE_PATH if not any(d in p.parents for d in DISPLAY_ONLY) and p not in JUDGES]
    assert len(files) > 10
    assert ROOT / "conformance" / "cases" / "common.py" in files
    problems = [v for p in files for v in _violations(p)]
    assert not problems, "\n".join(problems)


def test_static_check_catches_what_it_must(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import math\nimport numpy as np\n\ny = np.sin(1.0) + math.log(2.0) + (a @ b)\n")
    found = _violations(bad)
    assert len(found) == 3, found


def _raise(*args, **kwargs):
    raise AssertionError("a CPU-dependent NumPy function was called on the value path")


@pytest.mark.slow
def test_golden_generation_never_calls_cpu_dependent_numpy(tmp_path, monkeypatch):
    from rope_ref.cli import main

    for name in sorted(FORBIDDEN_NUMPY - {"linalg"}):
        if hasattr(np, name):
            monkeypatch.setattr(np, name, _raise)
    out = tmp_path / "golden"
    assert main(["golden", "generate", "--out", str(out)]) == 0
    assert (out / "manifest.json").is_file()


def _tree_digest(directory: pathlib.Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NPY_", "OPENBLAS_", "OMP_"))}
    env.update(extra)
    return env


def _features_above_baseline() -> list[str]:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


_CLI = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("restrict", [False, True], ids=["all-cpu-features", "baseline-only"])
@pytest.mark.slow
def test_regenerated_golden_set_equals_the_shipped_bytes(tmp_path, restrict):
    extra = {"NPY_DISABLE_CPU_FEATURES": " ".join(_features_above_baseline())} if restrict else {}
    out = tmp_path / "golden"
    subprocess.run(
        [sys.executable, "-c", _CLI, "golden", "generate", "--out", str(out)],
        env=_env(**extra),
        check=True,
        capture_output=True,
    )
    assert _tree_digest(out) == _tree_digest(SHIPPED)


_REDUCTIONS = """
import hashlib, numpy as np, rope_ref
from rope_ref import decay
cfg = rope_ref.RopeConfig(64, layout="half", base=10000.0)
rng = np.random.default_rng(3)
q, k, v = rng.standard_normal((2, 33, 64)), rng.standard_normal((2, 47, 64)), rng.standard_normal((2, 47, 5))
out, probs = rope_ref.attention(q, k, v, np.arange(33) + 14, np.arange(47), cfg)
parts = [out, probs, decay.score_curve(np.arange(0.0, 3000.0, 7.5), cfg, samples=300, correlation=0.6),
         decay.relative_upper_bound(np.arange(0.0, 5000.0, 3.0), cfg),
         *decay.abel_bound(q[0, :5], k[0, :5], np.arange(5) * 101.0, cfg)]
print(hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest())
"""


@pytest.mark.slow
def test_reductions_give_the_same_bits_under_any_blas_threads_and_cpu_features():
    settings = [
        {},
        {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        {"OPENBLAS_NUM_THREADS": "2", "OPENBLAS_CORETYPE": "Haswell"},
        {"OPENBLAS_CORETYPE": "Prescott"},
        {"NPY_DISABLE_CPU_FEATURES": " ".join(_features_above_baseline())},
    ]
    digests = {
        json.dumps(s): subprocess.run(
            [sys.executable, "-c", _REDUCTIONS], env=_env(**s), check=True, capture_output=True, text=True
        ).stdout.strip()
        for s in settings
    }
    assert len(set(digests.values())) == 1, digests


def test_import_does_not_load_mpmath():
    code = "import sys, rope_ref; print('mpmath' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_private_mpmath_context_ignores_the_callers_precision():
    mpmath = pytest.importorskip("mpmath")
    cfg = rope_ref.RopeConfig(96, layout="half", base=12345.678, scaling=rope_ref.NTKAware(3.0))
    with mpmath.workdps(5):  # a caller working at 5 digits
        low_precision_caller = rope_ref.inv_freq(cfg)
    rope_ref.scaling._theta_of_ln_base.cache_clear()  # recompute at the caller's default precision
    assert np.array_equal(low_precision_caller, rope_ref.inv_freq(cfg))
