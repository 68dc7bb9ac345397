"""The CUDA sources of the CuPy backend compile with ``nvcc -ptx`` (warnings are errors) for sm_80 and sm_90.

No GPU is needed: ``-ptx`` stops before any device code runs. Skipped with a reason where nvcc is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rope_ref.backends import _cupy_plan as plan

SOURCE = Path(plan.__file__).with_name("rope_kernels.cu")
KERNELS = sorted(
    set(plan.KERNEL_FOR_DTYPE.values()) | set(plan.QKV_KERNEL_FOR_DTYPE.values()) | {"rope_cos_sin_f32"}
)


def _nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow
def test_nvcc_ptx_compiles_without_warnings(arch: str, tmp_path: Path) -> None:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip(
            "nvcc not found (needs the CUDA toolkit); the CuPy kernels are compiled by NVRTC at run time"
        )
    ptx = tmp_path / f"rope_{arch}.ptx"
    cmd = [
        nvcc,
        "-ptx",
        f"-arch={arch}",
        "-std=c++14",
        "-Werror",
        "all-warnings",
        "-o",
        str(ptx),
        str(SOURCE),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}"
    assert "warning" not in (result.stdout + result.stderr).lower()
    text = ptx.read_text()
    entries = set(re.findall(r"\.visible \.entry (\w+)\(", text))
    assert entries == set(KERNELS), entries


def test_source_is_self_contained_for_nvrtc() -> None:
    # NVRTC (cupy.RawModule) has no system include path: the source must not include any header.
    text = SOURCE.read_text()
    assert not re.search(r"^\s*#\s*include", text, flags=re.M)


def test_shape_struct_matches_the_host_packing() -> None:
    text = SOURCE.read_text()
    max_outer = int(re.search(r"#define ROPE_MAX_OUTER (\d+)", text).group(1))
    assert max_outer == plan.MAX_OUTER
    body = re.search(r"struct RopeShape \{(.*?)\};", text, flags=re.S).group(1)
    fields: list[str] = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        assert decl.startswith("i64 "), decl  # every field int64: no padding
        for name in decl[4:].split(","):
            name = name.strip()
            arr = re.fullmatch(r"(\w+)\[ROPE_MAX_OUTER\]", name)
            if arr:
                fields += [f"{arr.group(1)}{d}" for d in range(max_outer)]
            else:
                fields.append(name)
    assert tuple(fields) == plan.SHAPE_FIELDS
    assert plan.shape_struct_dtype().itemsize == 8 * len(fields)
