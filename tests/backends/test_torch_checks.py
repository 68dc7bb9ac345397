"""The torch adapter's argument checks (``backends/_torch_checks.py``): configs, tensors, positions,
broadcasting, angle and compute dtypes. Expected messages and values are written out here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")

import rope_ref.backends._torch_core as core  # noqa: E402

from rope_ref import RopeConfig  # noqa: E402

CPU = torch.device("cpu")
CFG4 = RopeConfig(4, layout="half", base=10000.0)


def test_check_config_and_check_x():
    assert core.check_config(CFG4) is CFG4
    with pytest.raises(TypeError, match="cfg must be a rope_ref.RopeConfig, got dict"):
        core.check_config({"head_dim": 4})
    x = torch.zeros(2, 4)
    assert core.check_x(x, 4) is x and core.check_x(x, None) is x
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got ndarray"):
        core.check_x(np.zeros((2, 4)), 4, "q")
    with pytest.raises(TypeError, match="real floating dtype"):
        core.check_x(torch.zeros(2, 4, dtype=torch.int32), 4)
    with pytest.raises(TypeError, match="real floating dtype"):
        core.check_x(torch.zeros(2, 4, dtype=torch.complex64), 4)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=None, got x.shape=\(\)"):
        core.check_x(torch.tensor(1.0), None)
    with pytest.raises(ValueError, match=r"head_dim=8, got x.shape=\(2, 4\)"):
        core.check_x(x, 8)
    for dtype in core.FLOAT_DTYPES:
        assert core.check_x(torch.zeros(3, dtype=dtype), 3).dtype == dtype


def test_as_positions_accepts_integers_and_reals():
    got = core.as_positions([3, 1, 2], CPU)
    assert isinstance(got, torch.Tensor) and got.tolist() == [3, 1, 2] and got.device == CPU
    assert core.as_positions(np.array([1.5, 2.0]), CPU).dtype == torch.float64
    assert core.as_positions(np.array([7], dtype=np.uint8), CPU).tolist() == [7]
    assert core.as_positions(5, CPU).tolist() == 5
    t = torch.tensor([0, 4], dtype=torch.int16)
    assert torch.equal(core.as_positions(t, CPU), t)
    assert core.as_positions(torch.tensor([1.0, -2.5]), CPU).tolist() == [1.0, -2.5]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (True, "must be integer or real positions, got bool"),
        (np.bool_(False), "must be integer or real positions, got bool"),
        (None, "got NoneType"),
        ("12", "got str"),
        (b"12", "got bytes"),
        (np.array([1 + 2j]), "got dtype complex128"),
        (np.array([True, False]), "got dtype bool"),
        (np.array(["1"]), "got dtype <U1"),
        (torch.tensor([True]), "got dtype torch.bool"),
        (torch.tensor([1 + 1j]), "got dtype torch.complex64"),
    ],
)
def test_as_positions_refuses_non_numbers(bad, message):
    with pytest.raises(TypeError, match=message):
        core.as_positions(bad, CPU, "pos")


def test_as_positions_refuses_non_finite_reals_naming_the_first(compiling_off=None):
    with pytest.raises(ValueError, match="ids must be finite, got nan"):
        core.as_positions([1.0, float("nan"), float("inf")], CPU, "ids")
    with pytest.raises(ValueError, match="positions must be finite, got -inf"):
        core.as_positions(torch.tensor([[0.0, 2.0], [-math.inf, 1.0]]), CPU)


def test_as_positions_skips_the_finiteness_check_while_compiling(compiling):
    got = core.as_positions(torch.tensor([1.0, math.inf]), CPU)
    assert got[1].item() == math.inf


def test_check_broadcast():
    core.check_broadcast(torch.zeros(3), (2, 3))
    core.check_broadcast(torch.zeros(2, 1), (2, 3))
    core.check_broadcast(torch.zeros(()), (2, 3))
    with pytest.raises(
        ValueError, match=r"ids of shape \(4,\) does not broadcast against x.shape\[:-1\] = \(2, 3\)"
    ):
        core.check_broadcast(torch.zeros(4), (2, 3), "ids")
    with pytest.raises(ValueError, match=r"positions of shape \(5, 2, 3\)"):
        core.check_broadcast(torch.zeros(5, 2, 3), (2, 3))  # broadcasts, but would enlarge x


def test_angle_and_compute_dtypes():
    assert core.check_angle_dtype(torch.float32) is torch.float32
    assert core.check_angle_dtype(torch.float64) is torch.float64
    for bad in (torch.float16, torch.bfloat16, "float32", None):
        with pytest.raises(ValueError, match="angle_dtype must be torch.float32 or torch.float64"):
            core.check_angle_dtype(bad)
    f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
    assert [core.resolve_compute_dtype(None, d) for d in (f16, bf16, f32, f64)] == [f32, f32, f32, f64]
    assert [core.resolve_compute_dtype("input", d) for d in (f16, bf16, f32)] == [f16, bf16, f32]
    assert core.resolve_compute_dtype(f64, f16) is f64 and core.resolve_compute_dtype(bf16, f32) is bf16
    for bad in ("float32", torch.int32, "inputs"):
        with pytest.raises(ValueError, match="compute_dtype must be None, 'input' or one of"):
            core.resolve_compute_dtype(bad, f32)


def test_float_dtypes_and_autograd_paths_are_the_documented_ones():
    assert core.FLOAT_DTYPES == (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    assert core.AUTOGRAD_PATHS == ("function", "native")
    assert core.check_autograd("function") == "function" and core.check_autograd("native") == "native"
    for bad in ("fast", "Function", None, 1):
        with pytest.raises(ValueError, match=f"autograd must be 'function' or 'native', got {bad!r}"):
            core.check_autograd(bad)


def test_as_positions_moves_them_to_the_device():
    """Positions land on x's device (here "meta", which needs no GPU), from lists and from tensors."""
    meta = torch.device("meta")
    assert core.as_positions([0, 3], meta).device == meta
    assert core.as_positions(torch.tensor([1.5, 2.0]), meta).device == meta
    assert core.as_positions(np.array([7], dtype=np.int16), meta).dtype == torch.int16
