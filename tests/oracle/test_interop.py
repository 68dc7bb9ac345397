"""The oracle accepts any library's arrays and always answers in float64 NumPy (issue 9, part 1).

Expected values come from the oracle called on plain NumPy copies made here by hand (``.tolist()``,
never through rope_ref's converter), from hand-written values, or from explicit loops.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from fresh_interpreter import modules_loaded_by

import rope_ref
from rope_ref._interop import foreign_to_numpy, is_foreign_array

torch = pytest.importorskip("torch")
xps = pytest.importorskip("array_api_strict")

HALF = rope_ref.RopeConfig(8, layout="half")
INTER = rope_ref.RopeConfig(8, layout="interleaved", rotary_dim=6)


def _rng() -> np.random.Generator:
    return np.random.default_rng(20240901)


def _host(values) -> np.ndarray:
    """A NumPy float64 copy made through Python floats, independent of the converter under test."""
    return np.array(values.tolist(), dtype=np.float64)


# -- conversions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_torch_float_dtypes_convert_exactly(dtype):
    t = torch.tensor([1.5, -0.1, 3.0e-3, 65000.0], dtype=getattr(torch, dtype))
    arr = foreign_to_numpy(t, "x")
    assert isinstance(arr, np.ndarray)
    expected = [float(v) for v in t.to(torch.float64)]  # widening in torch is exact
    assert arr.astype(np.float64).tolist() == expected
    assert arr.dtype == (np.float32 if dtype == "bfloat16" else np.dtype(dtype))


def test_torch_bfloat16_outside_float16_range_converts_exactly():
    """bfloat16 has float32's exponent range: values float16 cannot hold (2**20, 2**-30, a subnormal-in-
    float16 2**-20 * 1.0078125, bfloat16's largest finite) come back bit for bit (value = bits << 16)."""
    bits = [0x4980, 0x3080, 0x3581, 0xFF7F]
    t = torch.tensor(np.array(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    expected = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
    assert expected[:3] == [2.0**20, 2.0**-30, 2.0**-20 * 1.0078125]
    assert expected[3] == -(2 - 2**-7) * 2.0**127
    assert foreign_to_numpy(t, "x").astype(np.float64).tolist() == expected


def test_torch_integer_positions_keep_integers():
    arr = foreign_to_numpy(torch.arange(5, dtype=torch.int32), "positions")
    assert arr.dtype == np.int32 and arr.tolist() == [0, 1, 2, 3, 4]


def test_torch_requires_grad_negative_and_strided_views():
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    t = base.t()[::2].clone().requires_grad_(True)
    assert foreign_to_numpy(t, "x").tolist() == base.t()[::2].tolist()
    neg = torch.tensor([1.0, -2.0], dtype=torch.float64)._neg_view()
    assert foreign_to_numpy(neg, "x").tolist() == [-1.0, 2.0]


def test_array_api_strict_arrays_on_every_device():
    for device in xps.__array_namespace_info__().devices():
        if "no_" in str(device):  # devices emulating missing float64 cannot hold a float64 array
            continue
        a = xps.asarray([0.25, -1.0, 7.0], dtype=xps.float64, device=device)
        arr = foreign_to_numpy(a, "x")
        assert arr.dtype == np.float64 and arr.tolist() == [0.25, -1.0, 7.0]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: torch.zeros(2, 8, dtype=torch.complex64),
        lambda: xps.asarray([1j, 2j]),
    ],
    ids=["torch-complex", "strict-complex"],
)
def test_complex_arrays_raise_type_error_naming_the_type(bad):
    with pytest.raises(TypeError, match=r"complex .*(Tensor|Array)"):
        rope_ref.apply(bad(), 0, HALF)


@pytest.mark.parametrize(
    "obj, type_name",
    [
        (object(), "builtins.object"),
        ({"a": 1}, "builtins.dict"),
        ((i for i in range(8)), "builtins.generator"),
    ],
    ids=["object", "dict", "generator"],
)
def test_unsupported_objects_raise_type_error_naming_the_type(obj, type_name):
    with pytest.raises(TypeError, match=type_name):
        rope_ref.apply(obj, 0, HALF)


def test_plain_inputs_are_left_to_numpy():
    for obj in (np.zeros(3), np.float32(1.0), 3, 2.5, [1.0, 2.0], (1, 2), range(3), "text", None):
        assert foreign_to_numpy(obj, "x") is None
    assert not is_foreign_array(np.zeros(2))
    assert is_foreign_array(torch.zeros(2)) and is_foreign_array(xps.zeros(2))


def test_torch_meta_tensor_is_refused():
    with pytest.raises(TypeError, match="meta"):
        foreign_to_numpy(torch.empty(2, 8, device="meta"), "x")


# -- the oracle functions on foreign arrays ---------------------------------------------------------


def _check_float64_numpy(result) -> None:
    assert isinstance(result, np.ndarray) and result.dtype == np.float64


@pytest.mark.parametrize("cfg", [HALF, INTER], ids=["half", "interleaved"])
@pytest.mark.parametrize("kind", ["torch64", "torch32", "torch-bf16", "strict64", "strict32"])
def test_apply_cos_sin_angles_on_foreign_arrays(cfg, kind):
    x = _rng().standard_normal((2, 5, 8))
    pos = np.arange(5) * 7
    if kind.startswith("torch"):
        dt = {"torch64": torch.float64, "torch32": torch.float32, "torch-bf16": torch.bfloat16}[kind]
        xf, pf = torch.tensor(x, dtype=dt), torch.tensor(pos)
        x_host = _host(xf.to(torch.float64))
    else:
        dt = xps.float64 if kind == "strict64" else xps.float32
        xf, pf = xps.asarray(x, dtype=dt), xps.asarray(pos)
        x_host = np.array([[[float(xf[i, j, k]) for k in range(8)] for j in range(5)] for i in range(2)])
    got = rope_ref.apply(xf, pf, cfg)
    _check_float64_numpy(got)
    np.testing.assert_array_equal(got, rope_ref.apply(x_host, pos.tolist(), cfg))
    cos, sin = rope_ref.cos_sin(pf, cfg)
    _check_float64_numpy(cos)
    ref_cos, ref_sin = rope_ref.cos_sin(pos.tolist(), cfg)
    np.testing.assert_array_equal(cos, ref_cos)
    np.testing.assert_array_equal(sin, ref_sin)
    ang = rope_ref.angles(pf, cfg)
    _check_float64_numpy(ang)
    # Independent value: m * base^(-2i/d), written out as a loop.
    for m_index, m in enumerate(pos):
        for i in range(cfg.rotary_dim // 2):
            assert math.isclose(ang[m_index, i], m * 10000.0 ** (-2 * i / cfg.rotary_dim), rel_tol=1e-15)


def test_assert_allclose_against_a_torch_result_reads_naturally():
    """The use case of the issue: compare a torch implementation with the oracle in one line."""
    x = torch.randn(3, 4, 8, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(4)
    # A tiny torch RoPE written here (half layout), independent of rope_ref.
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    ang = pos[:, None].double() * inv
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    rotated = torch.cat([-x[..., 4:], x[..., :4]], -1)
    mine = (x.double() * cos + rotated.double() * sin).float()
    np.testing.assert_allclose(mine.numpy(), rope_ref.apply(x, pos, HALF), rtol=1e-6, atol=1e-6)


def test_rotation_matrix_and_apply_complex_accept_foreign_arrays():
    x = torch.tensor(_rng().standard_normal((3, 8)))
    got = rope_ref.apply_complex(x, torch.tensor([0, 1, 2]), INTER)
    _check_float64_numpy(got)
    np.testing.assert_allclose(got, rope_ref.apply(_host(x), [0, 1, 2], INTER), rtol=0, atol=1e-15)
    r = rope_ref.rotation_matrix(xps.asarray(3), HALF)
    _check_float64_numpy(r)
    np.testing.assert_array_equal(r, rope_ref.rotation_matrix(3, HALF))


def test_chatglm_functions_accept_foreign_arrays():
    from rope_ref import chatglm
    b, m, g = chatglm.BOS_TOKEN_ID, chatglm.MASK_TOKEN_ID, chatglm.GMASK_TOKEN_ID
    ids = [[5, 6, g, b, 9, 9], [7, m, b, 9, 9, 9]]
    # Hand-written expectation (released get_position_ids, 2D): positions frozen at the mask index.
    expected = [[[0, 1, 2, 2, 2, 2], [0, 0, 0, 1, 2, 3]], [[0, 1, 1, 1, 1, 1], [0, 0, 1, 2, 3, 4]]]
    for arr in (torch.tensor(ids), xps.asarray(ids)):
        got = chatglm.position_ids(arr)
        assert isinstance(got, np.ndarray) and got.tolist() == expected
    x = _rng().standard_normal((2, 6, 16))
    pos, blk = np.array(expected)[:, 0], np.array(expected)[:, 1]
    ref = chatglm.apply_2d(x, pos, blk)
    got = chatglm.apply_2d(torch.tensor(x), torch.tensor(pos), xps.asarray(blk))
    _check_float64_numpy(got)
    np.testing.assert_array_equal(got, ref)


def test_decay_functions_accept_foreign_arrays():
    from rope_ref import decay
    cfg = rope_ref.RopeConfig(128, layout="half")
    got = decay.relative_upper_bound(torch.tensor([0.0, 10.0, 100.0]), cfg)
    _check_float64_numpy(got)
    # performance.md §1 table (d=128, base 1e4) and the closed form f(0) = (d/2 + 1)/2.
    np.testing.assert_allclose(got, [32.5, 17.954, 10.227], atol=5e-4)
    got = decay.relative_upper_bound(xps.asarray([256.0]), cfg)
    np.testing.assert_allclose(got, [6.543], atol=5e-4)


def test_torch_cuda_tensor_if_available():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device available")
    x = torch.randn(2, 8, device="cuda", dtype=torch.float64)
    expected = rope_ref.apply(_host(x.cpu()), [1, 2], HALF)
    np.testing.assert_array_equal(rope_ref.apply(x, [1, 2], HALF), expected)


def test_jax_arrays_if_installed():
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed: JAX interop not checked")
    x = jnp.asarray(_rng().standard_normal((2, 8)), dtype=jnp.float32)
    got = rope_ref.apply(x, [1, 2], HALF)
    _check_float64_numpy(got)
    np.testing.assert_array_equal(got, rope_ref.apply(_host(np.asarray(x)), [1, 2], HALF))


# -- light imports ----------------------------------------------------------------------------------

_HEAVY = ("torch", "cupy", "jax", "matplotlib", "array_api_strict")


@pytest.mark.parametrize(
    "statement",
    [
        "import rope_ref",
        "import rope_ref as r, numpy; r.apply(numpy.zeros((1, 8)), 0, r.RopeConfig(8, layout='half'));"
        "import rope_ref.chatglm, rope_ref.decay",
        "import rope_ref.backends.array_api",
        "import rope_ref.conformance.registry",
    ],
)
def test_importing_rope_ref_imports_no_heavy_library(statement):
    loaded = modules_loaded_by(statement, _HEAVY, timeout=60)
    assert loaded == [], f"{statement!r} imported {','.join(loaded)}"


# -- torch tensors without plain dense values, kept dtypes, objects left to NumPy ---------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged),
         r"nested torch tensor .*unbind"),
        (lambda: torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.qint8), r"quantized .*dequantize"),
        (lambda: torch.eye(3).to_sparse(), r"layout torch.sparse_coo; pass a dense one"),
        (lambda: torch.eye(3).to_sparse_csr(), r"layout torch.sparse_csr; pass a dense one"),
    ],
    ids=["nested", "quantized", "sparse-coo", "sparse-csr"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: nested and quantized tensors are prototypes
def test_non_dense_torch_tensors_are_refused_at_the_converter(make, match):
    with pytest.raises(TypeError, match=match):
        foreign_to_numpy(make(), "x")


def test_dtypes_other_than_bfloat16_are_kept():
    assert foreign_to_numpy(torch.ones(2, dtype=torch.float16), "x").dtype == np.float16
    assert foreign_to_numpy(torch.ones(2, dtype=torch.bfloat16), "x").dtype == np.float32
    with pytest.raises(TypeError, match="complex"):
        foreign_to_numpy(torch.ones(2, dtype=torch.complex128), "x")


class _ArrayOnly:
    """Not a sequence; speaks only ``__array__``: left to NumPy (None), never refused."""

    def __array__(self, dtype=None, copy=None):
        return np.arange(3.0)


def test_objects_with_an_array_protocol_are_left_to_numpy():
    assert foreign_to_numpy(_ArrayOnly(), "x") is None
    assert foreign_to_numpy(range(3), "x") is None and foreign_to_numpy(2.5, "x") is None


# -- the fallbacks of the generic converter: device copies, other protocols, CuPy and JAX ----------------


class _Dlpack:
    """A DLPack array on the host that hands out its buffer only as a copy (``copy=True``) when
    ``copy_only``, or never (raising ``error``); ``__array__`` only when ``array``."""

    def __init__(self, values, *, copy_only=False, array=False, error=BufferError):
        self._a, self._copy_only, self._error = np.asarray(values), copy_only, error
        self.dtype = self._a.dtype
        if array:
            self.__array__ = lambda dtype=None, copy=None: self._a.copy()

    def __dlpack__(self, **kw):
        if not self._copy_only or kw.get("copy") is not True:
            raise self._error("no zero-copy export")
        return self._a.copy().__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_a_device_array_is_fetched_as_a_host_copy_through_dlpack():
    got = foreign_to_numpy(_Dlpack([1.5, -2.0, 3.25], copy_only=True), "x")
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.tolist() == [1.5, -2.0, 3.25]


def test_without_dlpack_export_the_array_protocol_is_used():
    got = foreign_to_numpy(_Dlpack(np.array([4, 5], dtype=np.int16), array=True), "x")
    assert got.dtype == np.int16 and got.tolist() == [4, 5]


@pytest.mark.parametrize("error", [BufferError, RuntimeError, TypeError, ValueError])
def test_every_dlpack_refusal_falls_back_to_the_array_protocol(error):
    """Libraries refuse a DLPack export with any of these (device arrays, read-only or odd buffers)."""
    got = foreign_to_numpy(_Dlpack(np.array([4, -5, 6], dtype=np.int32), array=True, error=error), "x")
    assert got.dtype == np.int32 and got.tolist() == [4, -5, 6]


class _NamespaceOnly:
    """An Array API object (``__array_namespace__``) with no ``__dlpack__`` at all; ``__array__`` when
    ``array``."""

    dtype = np.dtype(np.float16)

    def __init__(self, *, array):
        if array:
            self.__array__ = lambda dtype=None, copy=None: np.array([0.5, -1.25], dtype=np.float16)

    def __array_namespace__(self, api_version=None):
        return np


def test_an_array_api_object_without_dlpack_is_read_through_its_array_protocol():
    got = foreign_to_numpy(_NamespaceOnly(array=True), "x")
    assert got.dtype == np.float16 and got.tolist() == [0.5, -1.25]
    with pytest.raises(TypeError, match=r"^offset: cannot move .*_NamespaceOnly to host memory \("):
        foreign_to_numpy(_NamespaceOnly(array=False), "offset")


def test_an_array_that_cannot_reach_the_host_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match=r"^k_positions: cannot move .*_Dlpack to host memory \(no zero-copy"):
        foreign_to_numpy(_Dlpack([1.0]), "k_positions")


def test_bfloat16_from_the_array_protocol_widens_exactly_and_complex_is_refused():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = [1.0, -3.0e38, 2.0**-130, 0.1]  # beyond float16, subnormal in float32, a rounded value
    bf16 = np.array(values, dtype=ml_dtypes.bfloat16)
    got = foreign_to_numpy(_Dlpack(bf16, array=True), "x")
    assert got.dtype == np.float32
    assert got.astype(np.float64).tolist() == [float(v) for v in bf16.astype(np.float64)]
    hidden = _Dlpack(np.array([1 + 2j]), array=True)
    hidden.dtype = None  # a complex array that does not say so until converted
    with pytest.raises(TypeError, match=r"^q must be a real array, got a complex .*_Dlpack"):
        foreign_to_numpy(hidden, "q")


def _fake_library_array(monkeypatch, module: str, cls: str, **attrs):
    """An instance of a class registered as ``module.cls`` (array-api-compat recognises it by that)."""
    import sys
    import types

    base = type(cls, (), {})
    monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(**{cls: base}))
    return type("Fake" + cls, (base,), attrs)()


def test_cupy_arrays_are_copied_to_the_host_with_get(monkeypatch):
    host = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    arr = _fake_library_array(monkeypatch, "cupy", "ndarray", dtype=host.dtype, get=lambda self: host)
    assert is_foreign_array(arr)
    got = foreign_to_numpy(arr, "x")
    assert got.dtype == np.float32 and got.tolist() == host.tolist()


def test_jax_arrays_are_read_through_their_array_protocol(monkeypatch):
    host = np.array([7.0, 8.5])

    def no_dlpack(self, **kw):
        raise AssertionError("a JAX array is read with __array__, not DLPack")

    arr = _fake_library_array(
        monkeypatch, "jax", "Array", dtype=host.dtype, __array__=lambda self, dtype=None, copy=None: host,
        __dlpack__=no_dlpack,
    )
    assert foreign_to_numpy(arr, "x").tolist() == [7.0, 8.5]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: torch.empty(2, device="meta"), r"^k_positions is a torch tensor on the 'meta' device"),
        (lambda: torch.eye(2).to_sparse(), r"^k_positions is a torch tensor with layout torch.sparse_coo"),
        (lambda: torch.zeros(2, dtype=torch.complex64), r"^k_positions must be a real array, got a complex"),
    ],
    ids=["meta", "sparse", "complex"],
)
def test_torch_refusals_name_the_argument(make, match):
    with pytest.raises(TypeError, match=match):
        foreign_to_numpy(make(), "k_positions")


def test_numpy_scalars_and_bytes_are_not_foreign():
    assert not is_foreign_array(np.float32(1.5)) and not is_foreign_array(np.int64(3))
    assert foreign_to_numpy(b"ab", "x") is None and foreign_to_numpy(np.float16(2.0), "x") is None
