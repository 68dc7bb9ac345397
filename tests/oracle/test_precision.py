"""``rope_ref.precision``: the dtype names, their aliases, their order and the policy a backend declares.

Expected values are the table of ``docs/tolerance.md`` (float64, float32, float16, bfloat16, widest first;
the short names of the command line) written out here.
"""

from __future__ import annotations

import dataclasses

import pytest

from rope_ref.precision import DTYPES, PRECISION_ALIASES, PrecisionPolicy, canonical_dtype

FIELDS = ("io_dtype", "angle_dtype", "compute_dtype")


def test_dtypes_widest_first():
    assert DTYPES == ("float64", "float32", "float16", "bfloat16")


@pytest.mark.parametrize(
    "alias,name",
    [
        ("fp64", "float64"),
        ("fp32", "float32"),
        ("fp16", "float16"),
        ("bf16", "bfloat16"),
        ("float64", "float64"),
        ("float32", "float32"),
        ("float16", "float16"),
        ("bfloat16", "bfloat16"),
    ],
)
def test_every_alias_maps_to_its_dtype(alias, name):
    assert canonical_dtype(alias) == name
    assert PRECISION_ALIASES[alias] == name


@pytest.mark.parametrize("bad", ["float8", "FP32", "", None, 32, ["float32"], ("fp16",)])
def test_canonical_dtype_rejects_with_the_argument_named(bad):
    with pytest.raises(ValueError, match="^io_dtype must be one of ") as info:
        canonical_dtype(bad, "io_dtype")
    assert str(info.value).endswith(f", got {bad!r}")


def test_canonical_dtype_names_dtype_by_default():
    with pytest.raises(ValueError, match="^dtype must be one of"):
        canonical_dtype("half")


def test_default_policy_is_float64_everywhere():
    assert PrecisionPolicy() == PrecisionPolicy("float64", "float64", "float64")
    assert [getattr(PrecisionPolicy(), f) for f in FIELDS] == ["float64"] * 3


def test_every_field_is_canonicalised_in_its_own_place():
    p = PrecisionPolicy(io_dtype="bf16", angle_dtype="fp32", compute_dtype="fp16")
    assert (p.io_dtype, p.angle_dtype, p.compute_dtype) == ("bfloat16", "float32", "float16")
    assert p == PrecisionPolicy("bfloat16", "float32", "float16")


@pytest.mark.parametrize("field", FIELDS)
def test_every_field_is_validated_and_named(field):
    with pytest.raises(ValueError, match=f"^{field} must be one of .*, got 'fp8'$"):
        PrecisionPolicy(**{field: "fp8"})


def test_policy_is_frozen_and_hashable():
    p = PrecisionPolicy("float32", "float32", "float16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.io_dtype = "float64"
    assert {p: 1}[PrecisionPolicy("fp32", "fp32", "fp16")] == 1
