"""Garbage in, clean error out: every public function and every CLI subcommand under generated junk.

The contract (issue 17): a public function returns or raises ``ValueError``/``TypeError`` (never another
exception, never a crash), and leaves its inputs unchanged; ``rope-ref SUBCOMMAND ...`` exits 0 or 1, or
exits 2 with exactly one line on stderr, never a traceback, and writes nothing outside its working
directory (a fresh temporary one per example). Inputs mix plausible values (so calls reach deep code)
with junk: wrong types, shapes and dtypes, NaN/inf, empty arrays, huge values and huge sizes.

Examples: a few hundred under the default ``ci`` hypothesis profile, 10^4 per test under
``ROPE_REF_HYPOTHESIS_PROFILE=stress``. Memory is capped (``RLIMIT_AS``) during each call, so a function
that would try to allocate a huge table fails here with ``MemoryError`` instead of swapping.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import resource
import shutil
import tempfile
import warnings
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import legacy_numpy
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rope_ref.conformance import golden

import rope_ref
from rope_ref import decay
from rope_ref.cli import main

STRESS = os.environ.get("ROPE_REF_HYPOTHESIS_PROFILE", "ci") == "stress"
N_API = 10_000 if STRESS else 300
N_CLI = 10_000 if STRESS else 120
SETTINGS = dict(
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
    database=None,
    # No shrinking: some junk (2**2000, a 3 GiB table) is slow to shrink; the failing example is printed.
    phases=[Phase.explicit, Phase.generate],
)
MEMORY_HEADROOM = 3 * 2**30


@contextlib.contextmanager
def _memory_cap():
    """Cap the address space at its current size + 3 GiB while the code under test runs (reporting a
    failure afterwards runs uncapped)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        vm = int(fh.read().split()[0]) * resource.getpagesize()
    cap = vm + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# -- junk ----------------------------------------------------------------------------------------------

HUGE_INTS = [2**31, 2**40, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 2**64, 2**2000, -1, 0, 1]
SPECIAL_FLOATS = [
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1e308,
    1.7e308,
    -1.7e308,
    5e-324,
    1e-300,
    0.5,
    1e16,
]


class _Weird:
    """An object with no array protocol (and a ``__len__`` that lies)."""

    def __len__(self) -> int:
        return 3


scalar_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(HUGE_INTS),
    st.integers(-(10**6), 10**6),
    st.sampled_from(SPECIAL_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["half", "interleaved", "0:8", "nan", "1e3", "linear", ""]),
    st.binary(max_size=4),
    st.complex_numbers(max_magnitude=1e3),
    st.sampled_from(
        [np.float64("nan"), np.int64(-(2**63)), np.float32(3.5), np.bool_(True), np.uint64(2**64 - 1)]
    ),
    st.builds(_Weird),
    st.builds(object),
    st.just(Fraction(1, 3)),
    st.just(()),
    st.just({}),
    st.just({"rope_type": ["linear"]}),
)

SMALL_SHAPES = [
    (),
    (0,),
    (3,),
    (2, 8),
    (3, 1),
    (1, 2, 8),
    (2, 7),
    (0, 8),
    (4, 2, 8),
    (1, 1, 1, 1, 8),
    (2, 0, 8),
]
NUMERIC_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int8", "uint8", "uint64", "bool"]
floats_any = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(-1e6, 1e6), st.floats(allow_nan=True))


@st.composite
def numeric_arrays(draw, shape=None, dtype=None):
    shape = draw(st.sampled_from(SMALL_SHAPES)) if shape is None else shape
    dtype = np.dtype(draw(st.sampled_from(NUMERIC_DTYPES)) if dtype is None else dtype)
    elements = None
    if dtype.kind == "f":
        width = dtype.itemsize * 8
        elements = st.floats(width=width, allow_nan=True, allow_infinity=True)
    return draw(hnp.arrays(dtype, shape, elements=elements))


@st.composite
def odd_arrays(draw):
    shape = draw(st.sampled_from(SMALL_SHAPES))
    kind = draw(
        st.sampled_from(["complex", "object", "str", "datetime", "masked", "matrix", "ragged", "nonc"])
    )
    if kind == "complex":
        return np.full(shape, 1 + 2j)
    if kind == "object":
        arr = np.empty(shape, dtype=object)
        arr.fill(draw(scalar_junk))
        return arr
    if kind == "str":
        return np.full(shape, "ab")
    if kind == "datetime":
        return np.zeros(shape, dtype="M8[s]")
    if kind == "masked":
        data = np.arange(16.0).reshape(2, 8)
        return np.ma.masked_array(data, mask=data > 5)
    if kind == "matrix":
        return legacy_numpy.matrix(np.arange(16.0).reshape(2, 8))
    if kind == "ragged":
        return [[0.0, 1.0], [2.0]]
    return np.arange(32.0).reshape(4, 8)[:, ::2]  # non-contiguous


junk = st.one_of(scalar_junk, numeric_arrays(), odd_arrays(), st.lists(scalar_junk, max_size=3))


def _cfgs() -> list:
    from rope_ref import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, RopeConfig, YaRN

    return [
        RopeConfig(8, layout="half"),
        RopeConfig(8, layout="interleaved", rotary_dim=4),
        RopeConfig(16, layout="half", scaling=DynamicNTK(2.0, 16)),
        RopeConfig(16, layout="interleaved", base=500000.0, scaling=YaRN(4.0, 32)),
        RopeConfig(16, layout="half", scaling=Llama3(8.0, 1.0, 4.0, 32)),
        RopeConfig(8, layout="half", scaling=Linear(2.0)),
        RopeConfig(8, layout="half", scaling=NTKAware(2.0)),
        RopeConfig(8, layout="half", scaling=LongRoPE([1.0] * 4, [2.0] * 4, 32)),
    ]


CFGS = _cfgs()


def maybe(plausible, junk_strategy=junk):
    """Mostly plausible (so the call goes deep), sometimes junk."""
    return st.one_of(plausible, plausible, junk_strategy)


cfg_st = maybe(st.sampled_from(CFGS))
seq_len_st = st.one_of(
    st.none(), st.none(), st.sampled_from([1, 8, 16, 33, 4096, 2**40, 2**2000, 0, -1]), scalar_junk
)
positions_st = maybe(
    st.one_of(
        numeric_arrays(shape=(3,), dtype="int64"),
        hnp.arrays("int64", st.sampled_from([(0,), (1,), (3,), (3, 1)]), elements=st.integers(0, 2**20)),
        hnp.arrays("float64", st.sampled_from([(3,), (3, 1)]), elements=floats_any),
        st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(SPECIAL_FLOATS)), max_size=4),
    )
)


@st.composite
def x_for(draw, head_dims=(8, 16)):
    d = draw(st.sampled_from(head_dims))
    shape = draw(st.sampled_from([(3, d), (1, 3, d), (2, 3, 1, d), (0, d), (3, 1, d)]))
    dtype = draw(st.sampled_from(["float64", "float32", "float16", "int64"]))
    return draw(numeric_arrays(shape=shape, dtype=dtype))


x_st = maybe(x_for())


def _kw(**strategies):
    """A dict strategy where each keyword is present or absent."""
    return st.fixed_dictionaries({}, optional=strategies)


API = {
    "apply": st.tuples(st.tuples(x_st, positions_st, cfg_st), _kw(seq_len=seq_len_st)),
    "apply_complex": st.tuples(st.tuples(x_st, positions_st, cfg_st), _kw(seq_len=seq_len_st)),
    "angles": st.tuples(st.tuples(positions_st, cfg_st), _kw(seq_len=seq_len_st)),
    "cos_sin": st.tuples(st.tuples(positions_st, cfg_st), _kw(seq_len=seq_len_st)),
    "inv_freq": st.tuples(st.tuples(cfg_st, seq_len_st), st.just({})),
    "attention_factor": st.tuples(st.tuples(cfg_st, seq_len_st), st.just({})),
    "rotation_matrix": st.tuples(st.tuples(maybe(st.integers(0, 100)), cfg_st), _kw(seq_len=seq_len_st)),
    "layout_permutation": st.tuples(st.tuples(cfg_st), st.just({})),
    "inverse_layout_permutation": st.tuples(st.tuples(cfg_st), st.just({})),
    "pair_indices": st.tuples(st.tuples(cfg_st), st.just({})),
    "default_inv_freq": st.tuples(
        st.tuples(maybe(st.sampled_from([10000.0, 2.0, 1e308])), maybe(st.sampled_from([2, 8, 128]))),
        st.just({}),
    ),
    "sinusoidal_embedding": st.tuples(
        st.tuples(positions_st, maybe(st.sampled_from([2, 8, 16]))), _kw(base=maybe(st.just(10000.0)))
    ),
    "attention": st.tuples(
        st.tuples(x_st, x_st, x_st, positions_st, positions_st, cfg_st),
        _kw(mask=st.one_of(st.none(), junk), seq_len=seq_len_st),
    ),
    "RopeConfig": st.tuples(
        st.tuples(maybe(st.sampled_from([2, 8, 64, 128]))),
        _kw(
            layout=maybe(st.sampled_from(["half", "interleaved"])),
            rotary_dim=maybe(st.sampled_from([2, 4, 8])),
            base=maybe(st.sampled_from([10000.0, 1e6])),
            scaling=st.one_of(st.none(), st.sampled_from([c.scaling for c in CFGS]), junk),
        ),
    ),
    "Linear": st.tuples(st.tuples(maybe(st.sampled_from([2.0, 1.0]))), st.just({})),
    "NTKAware": st.tuples(st.tuples(maybe(st.sampled_from([2.0, 1e300]))), st.just({})),
    "DynamicNTK": st.tuples(st.tuples(maybe(st.just(2.0)), maybe(st.just(4096))), st.just({})),
    "YaRN": st.tuples(
        st.tuples(maybe(st.just(4.0)), maybe(st.just(4096))),
        _kw(
            beta_fast=junk,
            beta_slow=junk,
            mscale=junk,
            mscale_all_dim=junk,
            attention_factor=junk,
            truncate=junk,
        ),
    ),
    "Llama3": st.tuples(
        st.tuples(maybe(st.just(8.0)), maybe(st.just(1.0)), maybe(st.just(4.0)), maybe(st.just(8192))),
        st.just({}),
    ),
    "LongRoPE": st.tuples(
        st.tuples(maybe(st.just([1.0] * 4)), maybe(st.just([2.0] * 4)), maybe(st.just(4096))),
        _kw(factor=junk, attention_factor=junk),
    ),
    "scaling_from_hf": st.tuples(
        st.tuples(
            st.one_of(
                junk,
                st.fixed_dictionaries(
                    {
                        "rope_type": maybe(
                            st.sampled_from(["linear", "dynamic", "yarn", "llama3", "longrope", "ntk"])
                        )
                    },
                    optional={
                        "factor": maybe(st.just(2.0)),
                        "original_max_position_embeddings": junk,
                        "type": junk,
                    },
                ),
            )
        ),
        _kw(max_position_embeddings=maybe(st.just(4096))),
    ),
    "preset": st.tuples(st.tuples(maybe(st.sampled_from(rope_ref.preset_names()))), st.just({})),
    "RopeConfig.from_hf": st.tuples(
        st.tuples(
            st.one_of(
                junk,
                st.fixed_dictionaries(
                    {
                        "hidden_size": maybe(st.just(512)),
                        "num_attention_heads": maybe(st.just(4)),
                        "rope_theta": maybe(st.just(10000.0)),
                    },
                    optional={
                        "head_dim": junk,
                        "partial_rotary_factor": maybe(st.just(0.5)),
                        "max_position_embeddings": maybe(st.just(2048)),
                        "rope_scaling": junk,
                    },
                ),
            )
        ),
        _kw(layout=maybe(st.sampled_from(["half", "interleaved"]))),
    ),
    "decay.relative_upper_bound": st.tuples(
        st.tuples(maybe(hnp.arrays("float64", (5,), elements=floats_any)), cfg_st),
        _kw(seq_len=seq_len_st, max_bytes=maybe(st.just(1 << 20))),
    ),
    "decay.abel_bound": st.tuples(
        st.tuples(x_st, x_st, maybe(hnp.arrays("float64", (3,), elements=floats_any)), cfg_st),
        _kw(seq_len=seq_len_st),
    ),
    "decay.score_curve": st.tuples(
        st.tuples(maybe(hnp.arrays("float64", (4,), elements=floats_any)), cfg_st),
        _kw(samples=maybe(st.sampled_from([0, 1, 16])), seed=maybe(st.just(0)), correlation=junk),
    ),
    "decay.decay_distances": st.tuples(
        st.tuples(maybe(st.sampled_from([16.0, 256.0])), maybe(st.sampled_from([1.0, 0.5]))), st.just({})
    ),
    "decay.config_label": st.tuples(st.tuples(cfg_st), st.just({})),
}


def _resolve(name: str):
    if name == "RopeConfig.from_hf":
        return rope_ref.RopeConfig.from_hf
    if name.startswith("decay."):
        return getattr(decay, name.split(".", 1)[1])
    return getattr(rope_ref, name)


def _walk(obj, depth=0):
    """Arrays and containers reachable from an argument (to check that nothing was mutated)."""
    yield obj
    if depth < 3 and isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item, depth + 1)


def _fingerprint(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "fciub":
            return ("nd", type(obj), obj.dtype, obj.shape, np.array(obj, copy=True))
        return (
            "nd",
            type(obj),
            obj.dtype,
            obj.shape,
            [id(v) for v in obj.ravel().tolist()] if obj.dtype.kind == "O" else obj.tobytes(),
        )
    if isinstance(obj, (list, dict)):
        return ("seq", type(obj), len(obj), [id(v) for v in (obj.values() if isinstance(obj, dict) else obj)])
    return None


def _same(a, b) -> bool:
    if a is None:
        return True
    if a[0] == "nd":
        if a[:4] != b[:4]:
            return False
        if isinstance(a[4], np.ndarray):
            return np.array_equal(a[4], b[4], equal_nan=a[4].dtype.kind in "fc")
        return a[4] == b[4]
    return a == b


# A call that runs for seconds on a small input is a finding too (huge sizes must be refused up front).
@settings(max_examples=N_API, deadline=timedelta(seconds=5), **SETTINGS)
@given(data=st.data())
@pytest.mark.slow
def test_public_functions_raise_only_value_or_type_errors(data):
    name = data.draw(st.sampled_from(sorted(API)), label="function")
    args, kwargs = data.draw(API[name], label="arguments")
    fn = _resolve(name)
    watched = [o for a in (*args, kwargs) for o in _walk(a)]
    before = [_fingerprint(o) for o in watched]
    with warnings.catch_warnings(), _memory_cap():
        warnings.simplefilter("ignore")
        try:
            fn(*args, **kwargs)
        except (ValueError, TypeError):
            pass
    for obj, fp in zip(watched, before, strict=True):
        assert _same(fp, _fingerprint(obj)), f"{name} changed its input {type(obj).__name__}"


# -- the command line ------------------------------------------------------------------------------------

PRESETS = list(rope_ref.preset_names())
NUM_TEXT = [
    "8",
    "16",
    "128",
    "0",
    "-2",
    "7",
    "1099511627776",
    "x",
    "1e3",
    "",
    "nan",
    "inf",
    "1e400",
    "-1e308",
]


def opt(flag, values):
    """``[flag, value]`` or nothing."""
    return st.one_of(st.just([]), st.sampled_from(values).map(lambda v: [flag, str(v)]))


def flag(name):
    return st.sampled_from([[], [name]])


def _join(parts):
    return [a for part in parts for a in part]


JSON_JUNK = [
    "",
    "[",
    "[" * 5000,
    "{}",
    "nan",
    "\xff\xfe",
    '{"rope_theta": 1e400}',
    '{"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000.0}',
    '{"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 1' + "0" * 400 + "}",
    '{"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000.0, '
    '"rope_scaling": {"rope_type": ["linear"], "factor": 2}}',
    '{"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000.0, '
    '"rope_scaling": {"rope_type": "yarn", "factor": 1e300, "original_max_position_embeddings": 4096}}',
    '{"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000.0, '
    '"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 4096}',
    '{"hidden_size": -512, "num_attention_heads": 0, "rope_theta": -1}',
    '{"hidden_size": 1099511627776, "num_attention_heads": 1, "rope_theta": 10000.0}',
]
SCALING_SPECS = [
    "linear:2",
    "ntk:2",
    "ntk:1e300",
    "dynamic:2:4096",
    "yarn:8:4096",
    "llama3:8:8192",
    "llama3:8:1:4:8192",
    "yarn:8:4096@500000",
    "linear:0",
    "linear:nan",
    "linear:inf",
    "dynamic:2:x",
    "dynamic:2:1.5",
    "bogus:1",
    ":",
    "@",
    "yarn:8:4096@nan",
    "linear",
    "linear:2:3",
    "",
]

table_argv = st.tuples(
    st.just([["table"]]),
    st.lists(
        st.one_of(
            opt("--head-dim", NUM_TEXT[:7] + ["1099511627776", "x"]),
            opt("--layout", ["half", "interleaved", "diag"]),
            opt("--rotary-dim", ["4", "8", "0", "3", "x"]),
            opt("--base", ["10000", "0", "-1", "nan", "inf", "1e308", "abc", "1.0000001"]),
            opt(
                "--positions",
                [
                    "0:4",
                    "0,1,2",
                    "",
                    "nan",
                    "1e308",
                    "0:1e9",
                    "-9223372036854775808",
                    "a:b",
                    "0:8:0",
                    "1e400",
                    "0.5,1.5",
                    "9007199254740993",
                ],
            ),
            opt("--digits", ["6", "-1", "18", "100", "x", "0"]),
            opt("--preset", PRESETS[:3] + ["nope"]),
            opt("--scaling", SCALING_SPECS),
            st.just(["--hf-config", "config.json"]),
        ),
        max_size=5,
    ),
).map(lambda t: ["table", "--head-dim", "8"] + _join(t[1]) if not t[1] else ["table"] + _join(t[1]))

decay_argv = st.lists(
    st.one_of(
        opt("--head-dim", ["8", "16", "64", "0", "7", "-4", "1099511627776", "x"]),
        opt("--rotary-dim", ["4", "8", "0", "3"]),
        opt("--base", ["10000", "500000", "0", "1", "-1", "nan", "inf", "1e308"]),
        opt("--scaling", SCALING_SPECS),
        opt("--max-distance", ["64", "256", "0", "-1", "1e308", "nan", "inf"]),
        opt("--step", ["1", "0.5", "0", "-1", "1e-10", "nan"]),
        opt("--window", ["1", "4", "0", "-5", "1000000000"]),
        opt("--csv", ["curves.csv", "", "no/such/dir/x.csv"]),
        flag("--log-x"),
    ),
    max_size=5,
).map(lambda parts: ["decay", "--head-dim", "16", *_join(parts)])

run_argv = st.lists(
    st.one_of(
        opt("--backend", ["numpy", "nope", "array-api:numpyy", "array-api:", ":", "numpy:", "json:loads"]),
        opt("--precision", ["fp64", "float64", "fp32", "bf16", "fp8"]),
        opt("--golden", ["small", "nonexistent", "config.json", ".", "junkset"]),
        opt("-k", ["inv_freq", "(", "^$", "apply", "[z-a]"]),
        opt("--xfails", ["xfails.txt", "nonexistent", "config.json", "xfails.json", "."]),
        opt("--json-report", ["r.json", ".", "no/such/dir/r.json"]),
        opt("--junit-xml", ["r.xml", ".", "no/such/dir/r.xml"]),
        opt("--timeout", ["1", "0", "-1", "inf", "nan", "x", "1e300"]),
        flag("--list"),
    ),
    max_size=5,
).map(lambda parts: ["conformance", "run", "--backend", "numpy", "--golden", "small", "-q", *_join(parts)])

generate_argv = st.tuples(
    st.one_of(
        st.sampled_from(PRESETS[:4] + ["nope", ""]).map(lambda p: ["--preset", p]),
        st.just(["--hf-config", "config.json", "--layout", "half"]),
        st.just(["--hf-config", "config.json"]),
    ),
    st.lists(
        st.one_of(
            opt("--format", ["safetensors", "npz", "zip"]),
            opt(
                "--shape",
                ["1,8,2,128", "1,2,1,64", "1,2,1,128", "0,1,1,128", "1000,1000,1000,128", "a", "1,1,1,-8"],
            ),
            opt("--positions", ["0:2", "0,1", "0:8", "nan", "1e308,0"]),
            opt("--dtype", ["fp32", "bf16", "float32", "fp8"]),
            opt("--ops", ["apply", "apply,apply", "inv_freq,cos_sin", "nope", ""]),
            opt("--layout", ["half", "interleaved", "x"]),
            flag("--force"),
        ),
        max_size=4,
    ),
    st.sampled_from(["out", "out2", "", ".", "a/b/c", "x" * 300, "small"]),
).map(lambda t: ["golden", "generate", *t[0], *_join(t[1]), "--out", t[2]])

verify_argv = st.sampled_from(["small", "nonexistent", "config.json", ".", "junkset"]).map(
    lambda d: ["golden", "verify", d]
)

cli_argv = st.one_of(table_argv, decay_argv, run_argv, generate_argv, verify_argv)


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("garbage-small") / "set"
    assert main(["golden", "generate", "--preset", "llama-3.1-8b", "--out", str(root)]) == 0
    return root


def _digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@contextlib.contextmanager
def _workdir(base: Path):
    d = Path(tempfile.mkdtemp(dir=base))
    old = os.getcwd()
    os.chdir(d)
    try:
        yield d
    finally:
        os.chdir(old)
        shutil.rmtree(d, ignore_errors=True)


@settings(max_examples=N_CLI, deadline=timedelta(seconds=30), **SETTINGS)
@given(argv=cli_argv, config_text=st.sampled_from(JSON_JUNK), manifest_text=st.sampled_from(JSON_JUNK))
@pytest.mark.slow
def test_cli_exits_cleanly(small_set, tmp_path_factory, capsys, argv, config_text, manifest_text):
    base = tmp_path_factory.getbasetemp() / "garbage-cli"
    base.mkdir(exist_ok=True)
    shipped_before = _digest_tree(golden.shipped_dir())
    with _workdir(base) as work:
        shutil.copytree(small_set, work / "small")
        (work / "config.json").write_text(config_text, encoding="utf-8", errors="surrogateescape")
        (work / "junkset").mkdir()
        (work / "junkset" / "manifest.json").write_text(
            manifest_text, encoding="utf-8", errors="surrogateescape"
        )
        (work / "xfails.txt").write_text("inv_freq-llama-3.1-8b flaky\n\x00garbage line\n")
        (work / "xfails.json").write_text(manifest_text, encoding="utf-8", errors="surrogateescape")
        inputs_before = {
            "small": _digest_tree(work / "small"),
            "config": (work / "config.json").read_bytes(),
        }
        capsys.readouterr()
        with warnings.catch_warnings(), _memory_cap():
            warnings.simplefilter("ignore")
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: usage errors
                code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        assert code in (0, 1, 2, 3), (code, err)  # 3: a corrupt golden set (issue 28)
        if code in (2, 3):
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1, err
            assert lines[0].startswith("rope-ref"), lines[0]
        if argv[:2] != ["golden", "generate"] or argv[-1] != "small":
            assert _digest_tree(work / "small") == inputs_before["small"], "the golden set was modified"
        assert (work / "config.json").read_bytes() == inputs_before["config"]
        # Nothing outside the working directory: its parent holds only per-example directories.
        assert all(p.is_dir() for p in base.iterdir())
    assert _digest_tree(golden.shipped_dir()) == shipped_before
