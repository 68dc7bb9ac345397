"""The checks of the torch adapter's C++ CPU kernel (``kernel="cpp"``, ``backends/_torch_cpp.py``) that
need no compiled extension: the kernel list, the argument checks (one line naming the argument and value),
the missing-tool and failed-build errors (never a fallback to the eager kernel) and the build lock. The
kernel's values are tested in ``test_torch_cpp_kernel.py`` (slow: it builds the extension).
"""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends import _torch_core as core  # noqa: E402
from rope_ref.backends import _torch_cpp as tc  # noqa: E402
from rope_ref.backends import torch as rt  # noqa: E402
from rope_ref.backends._torch_checks import KERNELS, check_kernel  # noqa: E402

import rope_ref  # noqa: E402

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
HALF = rope_ref.RopeConfig(64, layout="half", base=5000.0)


def make(shape, dtype, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * 2.5).to(dtype)


def test_check_kernel_names_the_kernels():
    assert check_kernel("cpp") == "cpp" and "cpp" in KERNELS
    with pytest.raises(ValueError, match=r"kernel must be one of \('torch', 'triton', 'cpp'\), got 'c\+\+'"):
        check_kernel("c++")


def test_check_cpp_refuses_other_devices_dtypes_and_compute_dtypes():
    with pytest.raises(ValueError, match="kernel='cpp' runs on CPU tensors, got q on meta"):
        tc.check_cpp(torch.empty(2, 4, device="meta"), F32, "q")
    with pytest.raises(TypeError, match=r"got x.dtype=torch.int32"):
        tc.check_cpp(torch.zeros(2, 4, dtype=torch.int32), F32)
    with pytest.raises(ValueError, match=r"got compute_dtype=torch.bfloat16"):
        tc.check_cpp(torch.zeros(2, 4, dtype=BF16), BF16)
    tc.check_cpp(torch.zeros(2, 4, dtype=F16), F64)  # accepted
    with pytest.raises(TypeError, match=r"cos and sin of one dtype, got sin.dtype=torch.float64"):
        x = torch.zeros(3, 4)
        tc.rotate_cpp(x, torch.empty_like(x), torch.zeros(3, 2), torch.zeros(3, 2, dtype=F64), "half", 4)


def test_public_calls_refuse_what_the_kernel_cannot_do():
    cfg = HALF
    x = make((1, 6, 2, 64), BF16, seed=17)
    with pytest.raises(
        ValueError, match=r"kernel='cpp' computes in float32 or float64, got compute_dtype=torch.bfloat16"
    ):
        rt.apply(x, torch.arange(6)[:, None], cfg, kernel="cpp", compute_dtype="input")
    with pytest.raises(ValueError, match="kernel='cpp' runs on CPU tensors, got x on meta"):
        rt.apply(
            torch.empty(1, 6, 2, 64, device="meta"),
            torch.arange(6, device="meta")[:, None],
            cfg,
            kernel="cpp",
        )
    with pytest.raises(ValueError, match="kernel='cpp' runs on CPU tensors"):
        core.RotateFunction.apply(
            torch.empty(6, 64, device="meta"),
            torch.empty(6, 32, device="meta"),
            torch.empty(6, 32, device="meta"),
            "half",
            64,
            F32,
            "cpp",
        )


@pytest.fixture
def unbuilt(monkeypatch):
    """A process in which the extension has not been built yet (the real one comes back afterwards)."""
    monkeypatch.setattr(tc, "_MODULE", None)
    return monkeypatch


@pytest.fixture(autouse=True)
def no_real_build(monkeypatch):
    """None of these tests may compile: a real build would make them slow and hide a check that runs late."""

    def refuse():
        raise AssertionError("a check test reached the real build")

    monkeypatch.setattr(tc, "_build", refuse)


def test_missing_compiler_raises_one_line(unbuilt):
    from torch.utils import cpp_extension

    unbuilt.setattr(cpp_extension, "get_cxx_compiler", lambda: "no-such-cxx-7")
    assert tc.missing_tools() == "a C++ compiler ('no-such-cxx-7' is not on PATH; set CXX to one)"
    with pytest.raises(RuntimeError) as err:
        tc.extension()
    msg = str(err.value)
    want = "kernel='cpp' needs a C++ compiler ('no-such-cxx-7' is not on PATH; set CXX to one)"
    assert msg == want + " to build its C++ extension"
    assert tc._MODULE is None


def test_missing_ninja_raises_one_line(unbuilt):
    from torch.utils import cpp_extension

    unbuilt.setattr(cpp_extension, "is_ninja_available", lambda: False)
    assert tc.missing_tools() == "ninja (pip install ninja)"
    with pytest.raises(
        RuntimeError, match=r"^kernel='cpp' needs ninja \(pip install ninja\) to build its C\+\+ extension$"
    ):
        tc.extension()


def test_failed_build_raises_one_line_through_apply_and_is_not_cached(unbuilt):
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("Error building extension 'rope_ref_cpp_x'\n[1/2] c++ ... long compiler log")

    unbuilt.setattr(tc, "_build", broken)
    x = make((1, 4, 2, 64), F32, seed=18)
    for _ in range(2):  # no silent fallback to the eager kernel, and the failure is not remembered
        with pytest.raises(RuntimeError) as err:
            rt.apply(x, torch.arange(4)[:, None], HALF, kernel="cpp")
        assert (
            str(err.value)
            == "kernel='cpp' could not build its C++ extension: Error building extension 'rope_ref_cpp_x'"
        )
    assert len(calls) == 2


def test_lazy_build_runs_once_for_concurrent_first_calls(unbuilt):
    calls = []
    built = object()  # stands for the compiled module

    def slow_build():
        calls.append(threading.get_ident())
        time.sleep(0.2)
        return built

    unbuilt.setattr(tc, "_build", slow_build)
    got = []
    threads = [threading.Thread(target=lambda: got.append(tc.extension())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 6 and all(m is built for m in got)
