"""The shipped golden set: it verifies, stays small, covers every op and bug class the issue lists,
and its expected values agree with independent derivations (hand values, explicit loops, mpmath,
published numbers), never with the oracle alone."""

from __future__ import annotations

import cmath
import json
import math

import mpmath
import numpy as np
import pytest
from rope_ref.conformance import catalogue, golden
from rope_ref.conformance.case import OPS
from shipped_golden import catalogue_cases, shipped_cases


@pytest.fixture(scope="module")
def shipped():
    return {c.id: c for c in shipped_cases()}


@pytest.mark.slow
def test_shipped_set_verifies():
    report = golden.verify_golden()
    assert report.ok, report.problems[:5]
    assert report.n_cases > 200


def test_shipped_set_is_small():
    # About 5.3 MB before issue 16; its varlen family (4149 packed tokens, 13 sequences, at 4 I/O dtypes)
    # and the other kernel-shape families add about 3.5 MB.
    size = sum(p.stat().st_size for p in golden.shipped_dir().iterdir())
    assert size < 9_500_000, size


@pytest.mark.slow
def test_catalogue_is_deterministic():
    a, b = catalogue.build_catalogue(), catalogue.build_catalogue()
    assert [c.id for c in a] == [c.id for c in b]
    for x, y in zip(a, b, strict=True):
        for k in x.inputs:
            assert np.array_equal(x.inputs[k], y.inputs[k])


def test_every_op_and_bug_class_is_covered(shipped):
    ops = {c.op for c in shipped.values()}
    assert ops == set(OPS)
    classes = {c.bug_class for c in shipped.values()}
    assert classes == set(catalogue.BUG_CLASSES) - {"custom"}
    manifest = golden.read_manifest()[1]
    assert set(manifest["bug_classes"]) == classes
    assert all(c.description for c in shipped.values())


def test_tolerance_rules_by_op(shipped):
    rules = {
        "inv_freq": {"table"},
        "attention_factor": {"table"},
        "cos_sin": {"trig"},
        "apply": {"rotation"},
        "apply_vjp": {"rotation"},
        "chatglm_position_ids": {"exact"},
        "chatglm_next_position_ids": {"exact"},
        "chatglm_apply_2d": {"rotation", "emulation"},
        "decay_upper_bound": {"decay"},
        "multiaxis_apply": {"rotation"},
        "mrope_position_ids": {"exact"},
        "mrope_decode_ids": {"exact"},
        "vision_ids": {"exact"},
        "mla_softmax_scale": {"scale"},
        "apply_axes": {"rotation"},
        "apply_qk": {"rotation"},
        "apply_qkv": {"rotation"},
        "round_trip": {"rotation"},
    }
    for c in shipped.values():
        assert c.tolerance in rules[c.op], c.id


def test_activation_cases_exist_in_every_io_dtype(shipped):
    names = {c.id.rsplit("-", 1)[0] for c in shipped.values() if c.io_dtype is not None}
    for name in names:
        for short in ("fp64", "fp32", "fp16", "bf16"):
            assert f"{name}-{short}" in shipped, f"{name}-{short}"


def test_inputs_are_exactly_representable_in_their_io_dtype(shipped):
    for c in shipped.values():
        if c.io_dtype is None:
            continue
        for name in ("x", "grad_out"):
            if name not in c.inputs:
                continue
            x = c.inputs[name]
            if c.io_dtype == "float64":
                assert x.dtype == np.float64
                continue
            assert x.dtype == np.float32, c.id
            if c.io_dtype == "float16":
                assert np.array_equal(x.astype(np.float16).astype(np.float32), x), c.id
            if c.io_dtype == "bfloat16":
                assert not np.any(x.view(np.uint32) & 0xFFFF), c.id
        for arr in c.expected.values():
            assert arr.dtype in (np.float64, np.int64)


def _apply_positions(shipped, prefix):
    return {
        float(p) for c in shipped.values() if c.id.startswith(prefix) for p in c.inputs["positions"].ravel()
    }


def test_issue_positions_and_head_dims_are_present(shipped):
    pos = set()
    for c in shipped.values():
        if c.op == "apply":
            pos |= {float(p) for p in c.inputs["positions"].ravel()}
    for p in (255, 256, 257, 2047, 2048, 2049, 4095, 32768, 131071, 2**20, 16_800_000):
        assert p in pos, p
    assert any(p != int(p) for p in pos)  # fractional
    dims = {c.config["head_dim"] for c in shipped.values() if c.op == "apply"}
    for d in (2, 4, 8, 16, 32, 64, 80, 96, 120, 128, 256):
        assert d in dims
    layouts = {c.config["layout"] for c in shipped.values() if c.op == "apply"}
    assert layouts == {"half", "interleaved"}
    partial = {
        (c.config["layout"], c.config["rotary_dim"] < c.config["head_dim"])
        for c in shipped.values()
        if c.op == "apply"
    }
    assert ("interleaved", True) in partial and ("half", True) in partial


def test_decode_case_has_seq_len_one_and_batch(shipped):
    c = shipped["apply-decode_batched_d64-fp32"]
    assert c.inputs["x"].shape[2] == 1 and c.inputs["x"].shape[0] > 1
    assert len(set(c.inputs["positions"].ravel().tolist())) == c.inputs["x"].shape[0]


def test_every_scaling_type_beyond_twice_the_original_context(shipped):
    seen = {}
    for c in shipped.values():
        if c.op != "apply" or not c.config or not c.config["scaling"]:
            continue
        s = c.config["scaling"]
        orig = s.get("original_max_position_embeddings", 2048)
        seen.setdefault(s["rope_type"], 0.0)
        seen[s["rope_type"]] = max(seen[s["rope_type"]], float(np.max(c.inputs["positions"])) / orig)
    assert set(seen) == {"linear", "ntk", "dynamic", "yarn", "llama3", "longrope"}
    for kind, ratio in seen.items():
        assert ratio >= 2.0, (kind, ratio)


def test_dynamic_statelessness_pair_is_ordered(shipped):
    ids = list(shipped)
    for short in ("fp64", "fp32", "fp16", "bf16"):
        assert ids.index(f"apply-dynamic_long_d64-{short}") < ids.index(
            f"apply-dynamic_short_after_long_d64-{short}"
        )


def test_layouts_differ_far_beyond_any_tolerance(shipped):
    a = shipped["apply-layout_half_d64-fp64"]
    b = shipped["apply-layout_interleaved_d64-fp64"]
    assert np.array_equal(a.inputs["x"], b.inputs["x"])
    assert np.max(np.abs(a.expected["out"] - b.expected["out"])) > 1.0


# -- independent checks of expected values ------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_tiny_d4_hand_values(shipped, layout):
    c = shipped[f"apply-tiny_d4_{layout}-fp64"]
    for row, m in enumerate([0, 1, 3, 100]):
        c0, s0, c1, s1 = math.cos(m), math.sin(m), math.cos(0.01 * m), math.sin(0.01 * m)
        # x = [1, 0, 0, 1]; theta = (1, 0.01).
        want = [c0, -s1, s0, c1] if layout == "half" else [c0, s0, -s1, c1]
        np.testing.assert_allclose(c.expected["out"][row], want, rtol=0, atol=1e-15)
    assert np.array_equal(c.expected["out"][0], [1.0, 0.0, 0.0, 1.0])  # position 0: exact identity


def test_tiny_d2(shipped):
    out = shipped["apply-tiny_d2-bf16"].expected["out"]
    for m in range(4):
        np.testing.assert_allclose(out[m], [math.cos(m), math.sin(m)], atol=1e-15)


def test_default_inv_freq_explicit_loop(shipped):
    for d in (64, 80, 128, 256):
        for base, tag in ((1e4, "10000"), (5e5, "500000"), (1e6, "1e6")):
            got = shipped[f"inv_freq-default_d{d}_base{tag}"].expected["out"]
            with mpmath.workdps(40):
                want = [float(mpmath.power(base, mpmath.mpf(-2 * i) / d)) for i in range(d // 2)]
            np.testing.assert_allclose(got, want, rtol=4e-16)


def test_partial_inv_freq_uses_rotary_dim(shipped):
    got = shipped["inv_freq-partial_d80_r32"].expected["out"]
    assert got.shape == (16,)
    np.testing.assert_allclose(got, [10000.0 ** (-2 * i / 32) for i in range(16)], rtol=1e-15)


def _rotate_loop(x, positions, inv, layout, rotary_dim, factor=1.0):
    """Rotation written out pair by pair with Python complex numbers (RoFormer eq. 12)."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    n = rotary_dim // 2
    flat_x = x.reshape(-1, x.shape[-1])
    flat_o = out.reshape(-1, x.shape[-1])
    pos = np.broadcast_to(positions, x.shape[:-1]).reshape(-1)
    for r in range(flat_x.shape[0]):
        for i in range(n):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            z = complex(flat_x[r, a], flat_x[r, b]) * factor * cmath.exp(1j * float(pos[r]) * inv[i])
            flat_o[r, a], flat_o[r, b] = z.real, z.imag
    return out


def test_dynamic_short_after_long_is_unscaled(shipped):
    c = shipped["apply-dynamic_short_after_long_d64-fp32"]
    inv = [10000.0 ** (-2 * i / 64) for i in range(32)]
    want = _rotate_loop(c.inputs["x"], c.inputs["positions"], inv, "half", 64)
    np.testing.assert_allclose(c.expected["out"], want, rtol=0, atol=1e-12)
    longc = shipped["apply-dynamic_long_d64-fp32"]
    unscaled = _rotate_loop(longc.inputs["x"], longc.inputs["positions"], inv, "half", 64)
    assert np.max(np.abs(longc.expected["out"] - unscaled)) > 0.1  # the long call really is scaled


def test_longrope_switch_explicit(shipped):
    lr = catalogue._longrope_dict()
    theta = [10000.0 ** (-2 * i / 32) for i in range(16)]
    for seq_len, key in (
        (4095, "short_factor"),
        (4096, "short_factor"),
        (4097, "long_factor"),
        (131072, "long_factor"),
    ):
        got = shipped[f"inv_freq-longrope_d32-L{seq_len}"].expected["out"]
        np.testing.assert_allclose(got, [t / f for t, f in zip(theta, lr[key], strict=True)], rtol=1e-15)
        af = float(shipped[f"attention_factor-longrope_d32-L{seq_len}"].expected["value"])
        assert af == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_longrope_far_beyond_the_context_explicit(shipped):
    """Applied at up to 32x the 4096 context: long factors and the attention factor, by hand."""
    lr = catalogue._longrope_dict()
    inv = [10000.0 ** (-2 * i / 32) / f for i, f in enumerate(lr["long_factor"])]
    factor = math.sqrt(1 + math.log(32) / math.log(4096))
    for dt in ("fp64", "fp32", "fp16", "bf16"):
        c = shipped[f"apply-longrope_far_d32-{dt}"]
        assert float(np.max(c.inputs["positions"])) >= 2 * lr["original_max_position_embeddings"]
        want = _rotate_loop(c.inputs["x"], c.inputs["positions"], inv, "half", 32, factor)
        np.testing.assert_allclose(c.expected["out"], want, rtol=0, atol=1e-9)
        np.testing.assert_allclose(c.aux["inv_freq"], inv, rtol=1e-15)
        assert float(c.aux["attention_factor"]) == pytest.approx(factor, rel=1e-15)
        # position 0 is x times the attention factor (which must not be dropped)
        zero = np.flatnonzero(np.asarray(c.inputs["positions"]) == 0)[0]
        x0 = c.inputs["x"][:, zero].astype(np.float64)
        np.testing.assert_allclose(c.expected["out"][:, zero], factor * x0, rtol=1e-15)


def test_aux_tables_match_an_independent_derivation(shipped):
    """Every cos_sin/apply/apply_vjp file carries the inv_freq and attention factor it was built with."""
    for c in shipped.values():
        if c.op == "multiaxis_apply":  # per pair: base^(-2k/rotary_dim) of its stream's table, k = freq_index
            spec = c.params["spec"]
            assert set(c.aux) == {"pair_inv_freq", "pair_attention_factor"}, c.id
            for i, (s, k) in enumerate(zip(spec["streams"], spec["freq_index"], strict=True)):
                table = spec["tables"][s]
                if table["scaling"] is None:
                    want = table["base"] ** (-2 * k / table["rotary_dim"])
                    assert c.aux["pair_inv_freq"][i] == pytest.approx(want, rel=1e-15), c.id
                    assert c.aux["pair_attention_factor"][i] == 1.0, c.id
            continue
        if c.op not in ("cos_sin", "apply", "apply_vjp", "apply_axes", "apply_qk", "apply_qkv", "round_trip"):
            assert not c.aux, c.id
            continue
        assert set(c.aux) == {"inv_freq", "attention_factor"}, c.id
        assert (
            c.aux["inv_freq"].shape == (c.config["rotary_dim"] // 2,)
            and c.aux["attention_factor"].shape == ()
        )
        if c.config["scaling"] is None:
            rd, base = c.config["rotary_dim"], c.config["base"]
            np.testing.assert_allclose(
                c.aux["inv_freq"], [base ** (-2 * i / rd) for i in range(rd // 2)], rtol=1e-14
            )
            assert float(c.aux["attention_factor"]) == 1.0
        if c.op == "cos_sin":  # cos = A cos(m theta) with the stored tables
            m = np.asarray(c.inputs["positions"], dtype=np.float64)[..., None]
            want = float(c.aux["attention_factor"]) * np.cos(m * c.aux["inv_freq"])
            np.testing.assert_allclose(c.expected["cos"], want, rtol=0, atol=1e-9)


def test_requires_names_earlier_cases(shipped):
    ids = list(shipped)
    with_requires = {i: c.requires for i, c in shipped.items() if c.requires}
    # (case, the case it runs after): the dynamic-NTK leak pair and the state orders of issue 15.
    chains = (
        ("dynamic_short_after_long_d64", "dynamic_long_d64"),
        ("gemma3_local_base1e4_d64", "gemma3_global_base1e6_d64"),
        ("state_longrope_short_d32", "state_longrope_long_d32"),
        ("state_dynamic_between_d64", "state_dynamic_long_d64"),
        ("state_dynamic_at_l0_d64", "state_dynamic_between_d64"),
        ("state_dynamic_below_l0_d64", "state_dynamic_at_l0_d64"),
    )
    want = {
        f"apply-{case}-{d}": [f"apply-{before}-{d}"]
        for case, before in chains
        for d in ("fp64", "fp32", "fp16", "bf16")
    }
    assert with_requires == want
    for cid, reqs in with_requires.items():
        assert ids.index(reqs[0]) < ids.index(cid)


def test_yarn_attention_factors(shipped):
    def af(name):
        return float(shipped[f"attention_factor-{name}"].expected["value"])

    assert af("yarn_f10_d128") == pytest.approx(0.1 * math.log(10) + 1, rel=1e-15)
    assert af("yarn_f64_af1_d64") == 1.0
    assert af("yarn_f16_mscale1_d64") == pytest.approx(1.0, rel=1e-15)
    assert af("yarn_f40_mscale0707_d64") == pytest.approx(1.0, rel=1e-15)
    assert af("yarn_f40_mscale1_all0_d64") == pytest.approx(0.1 * math.log(40) + 1, rel=1e-15)
    c = shipped["apply-yarn_f4_attention_d64-fp64"]
    np.testing.assert_allclose(c.expected["out"][0], (0.1 * math.log(4) + 1) * c.inputs["x"][0], rtol=1e-15)


def test_llama3_bands_explicit(shipped):
    got = shipped["inv_freq-llama3_f8_d128"].expected["out"]
    orig, low, high, factor = 8192, 1.0, 4.0, 8.0
    bands = set()
    for i, g in enumerate(got):
        w = 500000.0 ** (-2 * i / 128)
        wavelen = 2 * math.pi / w
        if wavelen < orig / high:
            want = w
            bands.add("keep")
        elif wavelen > orig / low:
            want = w / factor
            bands.add("scale")
        else:
            s = (orig / wavelen - low) / (high - low)
            want = (1 - s) * w / factor + s * w
            bands.add("blend")
        assert g == pytest.approx(want, rel=1e-13), i
    assert bands == {"keep", "scale", "blend"}


def test_large_position_against_mpmath(shipped):
    c = shipped["apply-large_2p24_d128-fp64"]
    x, out = c.inputs["x"], c.expected["out"]
    with mpmath.workprec(200):
        _check_large_positions(x, out)


def _check_large_positions(x, out):
    for row, m in enumerate([2**24 - 1, 2**24, 16_800_000]):
        for i in (0, 1, 17, 63):
            theta = mpmath.mpf(m) * mpmath.power(10000, mpmath.mpf(-2 * i) / 128)
            ca, sa = mpmath.cos(theta), mpmath.sin(theta)
            xa, xb = mpmath.mpf(x[row, 0, i]), mpmath.mpf(x[row, 0, i + 64])
            assert abs(float(xa * ca - xb * sa) - out[row, 0, i]) < 1e-8
            assert abs(float(xb * ca + xa * sa) - out[row, 0, i + 64]) < 1e-8


def test_vjp_is_the_adjoint_of_the_rotation(shipped):
    for name in ("vjp_half_d32", "vjp_interleaved_d32", "vjp_partial_d64_r32", "vjp_yarn_d32"):
        c = shipped[f"apply_vjp-{name}-fp64"]
        cfg = c.config
        d, rd = cfg["head_dim"], cfg["rotary_dim"]
        inv = catalogue.evaluate("inv_freq", cfg, {}, {"seq_len": None})["out"]
        factor = float(catalogue.evaluate("attention_factor", cfg, {}, {"seq_len": None})["value"])
        if cfg["scaling"]:
            assert factor > 1.0
        x, g = c.inputs["x"], c.inputs["grad_out"]
        pos = np.broadcast_to(c.inputs["positions"], x.shape[:-1])
        y = _rotate_loop(x, pos, inv, cfg["layout"], rd, factor)
        # <R x, g> == <x, R^T g> for every x: the VJP is the adjoint.
        assert np.sum(y * g) == pytest.approx(np.sum(x * c.expected["out"]), rel=1e-12)
        # and it is the inverse rotation (times the factor) of g.
        back = _rotate_loop(g, -pos, inv, cfg["layout"], rd, factor)
        np.testing.assert_allclose(c.expected["out"], back, atol=1e-12)
        assert np.array_equal(c.expected["out"][..., rd:d], g[..., rd:d])


def test_chatglm_position_ids_by_hand(shipped):
    c2 = shipped["chatglm_position_ids-batch3_2d"].expected["out"]
    want_pos = [
        [0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 6, 6],
        [0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5],
        [0, 1, 2, 3, 4, 5, 3, 3, 3, 3, 3, 3],
    ]
    want_blk = [[0] * 7 + [1, 2, 3, 4, 5], [0] * 6 + [1, 2, 3, 4, 5, 6], [0] * 6 + [1, 2, 3, 4, 5, 6]]
    assert np.array_equal(c2[:, 0], want_pos) and np.array_equal(c2[:, 1], want_blk)
    c1 = shipped["chatglm_position_ids-batch3_1d"].expected["out"]
    assert np.array_equal(c1, [list(range(12)), list(range(12)), want_pos[2]])


def test_chatglm_emulation_output_is_fp16(shipped):
    c = shipped["chatglm_apply_2d-fp16_emulation_d128"]
    out = c.expected["out"]
    assert np.array_equal(out.astype(np.float16).astype(np.float64), out)
    assert c.io_dtype is None and c.tolerance == "emulation"


def test_decay_published_values(shipped):
    # Values computed in the field notes (performance.md §1) from RoFormer §3.4.3 / Su's blog.
    out = shipped["decay_upper_bound-d128_base10000"].expected["out"]
    table = dict(
        zip(
            [0, 1, 2, 4, 8, 10, 16, 20, 32, 50, 64, 100, 128, 150, 200, 250, 256],
            [
                32.500,
                31.538,
                28.956,
                22.604,
                19.817,
                17.954,
                15.775,
                15.242,
                13.384,
                12.630,
                10.090,
                10.227,
                9.273,
                7.589,
                7.245,
                6.548,
                6.543,
            ],
            strict=True,
        )
    )
    np.testing.assert_allclose(out, list(table.values()), atol=6e-4)
    np.testing.assert_allclose(
        shipped["decay_upper_bound-d64_base10000"].expected["out"], [8.81, 5.73, 7.47, 3.86, 3.84], atol=6e-3
    )


def test_verify_catches_a_wrong_expected_value(tmp_path):
    cases = [c for c in catalogue_cases() if c.id.startswith("apply-precision_256_d128")]
    cases[0].expected["out"][1, 0, 3] += 1e-6
    root = golden.write_golden(cases, tmp_path / "g", generator="test", source="custom")
    report = golden.verify_golden(root)
    assert not report.ok
    assert "apply-precision_256_d128-fp64" in report.problems[0] and "[1, 0, 3]" in report.problems[0]


@pytest.mark.slow
def test_verify_reports_stale_catalogue_sets(tmp_path):
    cases = [c for c in catalogue_cases() if c.id.startswith("apply-tiny_d2")]
    root = golden.write_golden(cases, tmp_path / "g", generator="test", source="catalogue")
    report = golden.verify_golden(root)
    assert not report.ok and any("stale" in p for p in report.problems)


def test_manifest_records_provenance():
    m = json.loads((golden.shipped_dir() / "manifest.json").read_text())
    assert m["provenance"]["generator"] == "rope-ref golden generate --out DIR"
    assert m["provenance"]["source"] == "catalogue"
    assert m["schema_version"] == golden.SCHEMA_VERSION and m["suite_version"] == golden.SUITE_VERSION
