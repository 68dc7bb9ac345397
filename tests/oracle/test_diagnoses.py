"""assert_rope_close names the common bugs it can estimate from the output (issue 29 point 2).

Every planted bug is written by hand, HF style (``inv_freq = 1 / base ** (arange(0, d, 2) / d)``,
``cat(freqs, freqs)``, ``rotate_half``), in float32 as a port would; the expected labels are explicit
numbers (the base the port used, the shift it made, the table length it had). A correct port is never
failed and a bug of another kind is never given one of these names. Every check runs with warnings as
errors: the checking code must not warn, even at positions above float16's 65504.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rope_ref
from rope_ref import diagnoses
from rope_ref.testing import assert_rope_close, assert_rope_vjp_close

D = 128
HALF = rope_ref.RopeConfig(D, layout="half")


def _bf16(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)


def port(x, pos, *, base=10000.0, inv_dtype=None, shift=0, rows=None, fill="clamp", rotary=D, pairs="half"):
    """A float32 HF-style RoPE of ``x (..., S, D)`` at ``pos (..., S)`` with one planted bug."""
    inv = (1.0 / base ** (np.arange(0, rotary, 2, dtype=np.float64) / rotary)).astype(np.float32)
    if inv_dtype == "float16":
        inv = inv.astype(np.float16).astype(np.float32)
    elif inv_dtype == "bfloat16":
        inv = _bf16(inv)
    p = np.asarray(pos, dtype=np.float64) + shift
    keep = np.ones(p.shape, dtype=bool)
    if rows is not None:  # a table of `rows` positions, read past its end
        keep = p < rows
        p = {"clamp": np.minimum(p, rows - 1), "wrap": np.mod(p, rows), "zero": np.where(keep, p, 0)}[fill]
    freqs = p.astype(np.float32)[..., None] * inv
    cos, sin = np.cos(freqs), np.sin(freqs)
    if fill == "zero":
        cos, sin = cos * keep[..., None], sin * keep[..., None]
    x = np.asarray(x, dtype=np.float32)
    out = x.copy()
    n = rotary // 2
    if pairs == "half":
        a, b = np.arange(n), np.arange(n) + n
    else:
        a, b = np.arange(0, rotary, 2), np.arange(1, rotary, 2)
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(29).standard_normal((2, 3, 96, D)).astype(np.float32)


def _ids(start=0, n=96):
    return np.stack([np.arange(start, start + n), np.arange(start + 7, start + 7 + n)])  # (B, S)


def _message(actual, x, ids, cfg=HALF, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        assert_rope_close(actual, x, ids, cfg, axes="bhsd", **kw)
    return str(info.value)


def _named(msg: str) -> str:
    line = next((ln for ln in msg.splitlines() if ln.strip().startswith("most resembles:")), "")
    return line.strip()


# -- a wrong base ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "used,config_base,layout",
    [
        (500000.0, 10000.0, "half"),
        (1e6, 10000.0, "half"),
        (10000.0, 500000.0, "half"),
        (5e6, 1e6, "interleaved"),
    ],
)
def test_wrong_base_is_estimated_and_named(x, used, config_base, layout):
    cfg = rope_ref.RopeConfig(D, layout=layout, base=config_base)
    y = port(x, _ids()[:, None, :], base=used, pairs=layout)
    assert_rope_close(
        port(x, _ids()[:, None, :], base=config_base, pairs=layout), x, _ids(), cfg, axes="bhsd"
    )
    msg = _message(y, x, _ids(), cfg)
    assert _named(msg).startswith(f"most resembles: base looks like {used:g} (config has {config_base:g})"), (
        msg
    )


def test_wrong_base_named_in_bfloat16_output(x):
    ids = _ids()
    y = _bf16(port(x, ids[:, None, :], base=500000.0))
    msg = _message(y, _bf16(x), ids, precision="bfloat16")
    assert "base looks like 500000 (config has 10000)" in _named(msg), msg


# -- inv_freq in half precision ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_inv_freq_in_half_precision_is_named(x, dtype):
    ids = _ids(start=2000)
    msg = _message(port(x, ids[:, None, :], inv_dtype=dtype), x, ids)
    assert _named(msg).startswith(f"most resembles: inv_freq computed in {dtype}"), msg


# -- positions shifted --------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, -1, 3, -5, 40])
def test_positions_shift_is_estimated(x, k):
    ids = _ids(start=10)
    msg = _message(port(x, ids[:, None, :], shift=k), x, ids)
    assert _named(msg).startswith(
        f"most resembles: positions shifted by {k:+d} (the angle of position p{k:+d}"
    ), msg


def test_off_by_one_shows_a_rotated_element_first_and_counts_the_exact_ones(x):
    """The classic off-by-one (positions from 1): position 0 must be x itself, but it is not the line's
    lead: the worst rotated element is, and the exact elements that differ are counted and named."""
    ids = _ids()
    msg = _message(port(x, ids[:, None, :], shift=1), x, ids)
    worst = msg.splitlines()[1]
    assert "err/tol inf" not in worst and "tol 0," not in worst, worst
    # Position 0 holds 1 token per batch row where ids start at 0: 3 heads x 128 channels of batch 0.
    assert "; 384 of them exact elements that must equal the input bit for bit, e.g. y[0, " in worst, worst
    assert "(position 0 (rotation by angle 0))" in worst
    assert "most resembles: positions shifted by +1" in msg


def test_only_exact_elements_wrong_reads_as_such(x):
    cfg = rope_ref.RopeConfig(D, layout="half", rotary_dim=32)
    ids = _ids()
    y = port(x, ids[:, None, :], rotary=32)
    assert_rope_close(y, x, ids, cfg, axes="bhsd")
    y[1, 2, 5, 40] += 0.25  # a pass-through channel
    worst = _message(y, x, ids, cfg).splitlines()[1].strip()
    assert worst.startswith("y[1, 2, 5, 40]: expected ")
    assert "pass-through channel 40 >= rotary_dim 32" in worst and "inf" not in worst, worst
    assert "1 of 73728 elements out of tolerance, all of them exact elements" in worst


# -- a table too short / a stale cache ----------------------------------------------------------------------


@pytest.mark.parametrize("fill,how", [("clamp", "clamped to row 299"), ("wrap", "wrapped to row p mod 300")])
@pytest.mark.parametrize("start", [0, 260])
def test_short_table_read_past_its_end_is_named_with_its_length(x, fill, how, start):
    ids = np.stack([np.arange(start, start + 96), np.arange(250, 250 + 96)])  # 300 falls inside
    msg = _message(port(x, ids[:, None, :], rows=300, fill=fill), x, ids)
    want = f"most resembles: a cos/sin table of 300 rows read past its end (positions >= 300 {how})"
    assert _named(msg).startswith(want), msg


def test_short_table_with_a_gap_in_the_positions(x):
    """Rows 0..95 and 400..495 with a table of 200: the length is read from the phase, not the gap."""
    ids = np.stack([np.arange(96), np.arange(400, 496)])
    msg = _message(port(x, ids[:, None, :], rows=200, fill="clamp"), x, ids)
    assert "a cos/sin table of 200 rows read past its end (positions >= 200 clamped to row 199)" in msg, msg


def test_short_table_with_other_garbage_is_named_by_its_pattern(x):
    ids = np.stack([np.arange(96), np.arange(400, 496)])
    msg = _message(port(x, ids[:, None, :], rows=200, fill="zero"), x, ids)
    assert _named(msg) == (
        "most resembles: a cos/sin table built for a shorter length, or a stale cache: every position up "
        "to 95 is right and every position from 400 on wrong"
    ), msg
    ids = _ids()
    msg = _message(port(x, ids[:, None, :], rows=50, fill="zero"), x, ids)
    assert "every position below 50 is right and every position from 50 on wrong" in msg, msg


def test_stale_dynamic_ntk_cache_is_named(x):
    """Dynamic NTK at seq_len 103 > 64 rescales the base; a cache built for a short prompt does not."""
    cfg = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    ids = _ids()
    msg = _message(port(x, ids[:, None, :]), x, ids, cfg)
    assert _named(msg).startswith("most resembles: a stale cache: frequencies of a short sequence"), msg
    assert "seq_len=103" in _named(msg)


# -- the VJP, large positions, and no false names ------------------------------------------------------------


def test_vjp_shift_is_named(x):
    ids = _ids(start=5)
    g = x[:, :, ::-1].copy()
    grad = port(g, -ids[:, None, :], shift=-2)  # rotated by -(p + 2)
    with pytest.raises(AssertionError) as info:
        assert_rope_vjp_close(grad, x, ids, HALF, g, axes="bhsd")
    assert "most resembles: positions shifted by +2" in str(info.value), info.value


def test_positions_above_float16_range_raise_no_warning(x):
    ids = _ids(start=70000)  # above 65504: float16 positions would be inf
    assert_rope_close(port(x, ids[:, None, :]), x, ids, HALF, axes="bhsd")
    msg = _message(port(x, ids[:, None, :], shift=1), x, ids)
    assert "positions shifted by +1" in msg and "float16" not in _named(msg), msg
    bf = port(x, _bf16(ids.astype(np.float32))[:, None, :])
    assert "positions quantised to bfloat16" in _message(bf, x, ids)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("start", [0, 5000, 99000])
def test_correct_ports_pass(x, dtype, start):
    ids = _ids(start=start)
    y = port(x, ids[:, None, :])
    if dtype == "bfloat16":
        xb = _bf16(x)
        assert_rope_close(_bf16(port(xb, ids[:, None, :])), xb, ids, HALF, axes="bhsd", precision="bfloat16")
    else:
        assert_rope_close(y.astype(dtype), x.astype(dtype), ids, HALF, axes="bhsd")


@pytest.mark.parametrize(
    "bug,kw,cfg,named",
    [
        ("layout", {"pairs": "interleaved"}, HALF, "layout swapped"),
        ("partial", {}, rope_ref.RopeConfig(D, layout="half", rotary_dim=64), "partial rotary ignored"),
    ],
)
def test_other_bugs_keep_their_names(x, bug, kw, cfg, named):
    ids = _ids(start=3)
    msg = _message(port(x, ids[:, None, :], **kw), x, ids, cfg)
    assert _named(msg).startswith(f"most resembles: {named}"), msg


def test_unexplained_noise_gets_no_name(x):
    ids = _ids()
    y = port(x, ids[:, None, :])
    y[:, :, 50:] += np.float32(1e-2) * np.random.default_rng(1).standard_normal(
        y[:, :, 50:].shape, dtype=np.float32
    )
    assert _named(_message(y, x, ids)) == ""


def test_round_figures():
    assert diagnoses._round_figures(498321.7) == [500000.0, 498000.0, 498322.0]
    assert diagnoses._round_figures(500000.0) == [500000.0]
    assert diagnoses._round_figures(1.04) == [1.04]  # rounded values <= 1 are no base


def test_a_wrong_magnitude_alone_is_not_given_a_rotation_name():
    """Far positions (angle tolerance beyond the amplitude) and a zero output: only the pair norm fails,
    and every mutated rotation would pass element by element, so none is named."""
    cfg = rope_ref.RopeConfig(64, layout="half")
    pos = np.arange(70000, 70100) * 1e6
    x = np.full((100, 64), 1e30, dtype=np.float32)
    with pytest.raises(AssertionError) as info:
        assert_rope_close(np.zeros_like(x), x, pos, cfg)
    assert "pair norm" in str(info.value) and "most resembles" not in str(info.value)


def test_no_warning_from_tables_or_gradients_at_far_positions():
    cfg = rope_ref.RopeConfig(64, layout="half")
    pos = np.arange(70000, 70100)
    cos, sin = rope_ref.cos_sin(pos, cfg)
    with pytest.raises(AssertionError, match="sin"):
        rope_ref.testing.assert_cos_sin_close(
            cos.astype(np.float32), (sin * 1.01).astype(np.float32), pos, cfg
        )
    ones = np.ones((100, 64), np.float16)
    with pytest.raises(AssertionError, match="grad_x"):
        assert_rope_vjp_close(ones, ones, pos, cfg, ones)


def test_scaling_ignored_is_named(x):
    cfg = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.Linear(4.0))
    ids = _ids()
    assert_rope_close(port(x, ids[:, None, :] / 4.0), x, ids, cfg, axes="bhsd")  # linear: positions / 4
    msg = _message(port(x, ids[:, None, :]), x, ids, cfg)
    assert _named(msg).startswith("most resembles: scaling ignored (the config's Linear not applied)"), msg
    msg = _message(port(x, ids[:, None, :] / 4.0, base=500000.0), x, ids, cfg)
    assert "base looks like 500000 (config has 10000)" in _named(msg), msg


def test_wrong_base_under_yarn_with_spaced_positions():
    """YaRN treats pairs apart (no single power law) and positions 200 apart alias the fast pairs: the
    base is still found, from the slow pairs and a search over YaRN's own frequencies."""
    cfg = rope_ref.RopeConfig(D, layout="half", scaling=rope_ref.YaRN(4.0, 4096))
    x = np.random.default_rng(3).standard_normal((64, D))
    pos = np.arange(64) * 200
    y = rope_ref.apply(x, pos, cfg.replace(base=500000.0)).astype(np.float32)  # the oracle, wrong base
    with pytest.raises(AssertionError) as info:
        assert_rope_close(y, x.astype(np.float32), pos, cfg)
    assert "most resembles: base looks like 500000 (config has 10000)" in str(info.value), info.value


# -- cos/sin tables and inverse frequencies ---------------------------------------------------------------


def hf_tables(pos, *, base=10000.0, inv_dtype=None, shift=0):
    """HF LlamaRotaryEmbedding.forward in float32: (cos, sin) of cat(freqs, freqs), (B, S, D)."""
    inv = (1.0 / base ** (np.arange(0, D, 2, dtype=np.float64) / D)).astype(np.float32)
    if inv_dtype == "float16":
        inv = inv.astype(np.float16).astype(np.float32)
    freqs = (np.asarray(pos) + shift).astype(np.float32)[..., None] * inv
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


@pytest.mark.parametrize(
    "kw,named",
    [
        ({"base": 500000.0}, "base looks like 500000 (config has 10000)"),
        ({"shift": 1}, "positions shifted by +1"),
        ({"inv_dtype": "float16"}, "inv_freq computed in float16"),
    ],
)
def test_cos_sin_table_bugs_are_named(kw, named):
    ids = _ids(start=100)
    rope_ref.testing.assert_cos_sin_close(*hf_tables(ids), ids, HALF)
    with pytest.raises(AssertionError) as info:
        rope_ref.testing.assert_cos_sin_close(*hf_tables(ids, **kw), ids, HALF)
    assert _named(str(info.value)).startswith(f"most resembles: {named}"), info.value


@pytest.mark.parametrize(
    "values,named",
    [
        (1.0 / 500000.0 ** (np.arange(0, D, 2) / D), "base looks like 500000 (config has 10000)"),
        (1.0 / 1e6 ** (np.arange(0, 64, 2) / 64), None),  # wrong width, not a base: shape error
        ((1.0 / 1e4 ** (np.arange(0, D, 2) / D)).astype(np.float16), "inv_freq computed in float16"),
    ],
)
def test_inv_freq_bugs_are_named(values, named):
    values = np.asarray(values).astype(np.float32)
    with pytest.raises(AssertionError) as info:
        rope_ref.testing.assert_inv_freq_close(values, HALF)
    if named is None:
        assert "inv_freq has shape (32,), expected (64,)" in str(info.value)
    else:
        assert _named(str(info.value)).startswith(f"most resembles: {named}"), info.value


# -- the helpers, called directly ---------------------------------------------------------------------------


def test_nice_bases_round_and_leave_out_the_configs_own():
    assert diagnoses.nice_bases([12345.678], HALF) == [12000.0, 12300.0, 12345.7]  # 10000 is the config's
    assert diagnoses.nice_bases([10000.4], HALF) == [10000.4]
    # roundest first, estimate by estimate (not sorted by value): 987654 -> 1e6, 990000, 988000, 987654;
    # then 1.02e6 adds only its 3-figure rounding (1e6 is already listed)
    got = diagnoses.nice_bases([987654.0, 1020000.0], HALF)
    assert got == [1000000.0, 990000.0, 988000.0, 987654.0, 1020000.0]
    assert diagnoses.base_label(500000.0, HALF) == "base looks like 500000 (config has 10000)"


def test_cut_text_names_the_first_wrong_position():
    assert diagnoses.cut_text(None) is None
    assert diagnoses.cut_text((2047.0, 2048.0)) == (
        "a cos/sin table built for a shorter length, or a stale cache: every position below 2048 is right "
        "and every position from 2048 on wrong"
    )
    assert "every position up to 100 is right and every position from 2048 on wrong" in diagnoses.cut_text(
        (100.0, 2048.0)
    )


def test_explain_picks_the_best_match_and_falls_back():
    cfg = rope_ref.RopeConfig(8, layout="half")
    x = np.random.default_rng(0).standard_normal((6, 8))
    pos = np.arange(6.0) * 7
    got = rope_ref.apply(x, pos + 1, cfg)
    policy = rope_ref.testing.precision_policy("float64")
    build = rope_ref.testing._builder(x, "apply", {}, None)
    near = got * (1 + 4e-16)  # a candidate that matches less closely, listed first
    candidates = [
        ("close", build(cfg, pos + 1, values=lambda: near.copy())),
        ("exact", build(cfg, pos + 1)),
        ("raises", lambda: (_ for _ in ()).throw(ValueError("does not fit"))),
    ]
    assert (
        diagnoses.explain(got, policy, candidates[:1]) == "close (matches the oracle run with that mistake)"
    )
    assert diagnoses.explain(got, policy, candidates) == "exact (matches the oracle run with that mistake)"
    assert diagnoses.explain(got, policy, candidates[2:], "the pattern") == "the pattern"
    assert diagnoses.explain(got, policy, [], None) is None


@pytest.mark.parametrize(
    ("row", "channel", "kind"), [(0, 31, "position 0"), (1, 32, "pass-through channel 32")]
)
def test_exact_line_tells_position_zero_from_a_pass_through_channel(row, channel, kind):
    cfg = rope_ref.RopeConfig(64, layout="half", rotary_dim=32)
    x = np.random.default_rng(1).standard_normal((3, 64))
    pos = np.array([0.0, 5.0, 9.0])
    y = rope_ref.apply(x, pos, cfg)
    y[row, channel] = np.nextafter(y[row, channel], 10.0)
    with pytest.raises(AssertionError) as info:
        assert_rope_close(y, x, pos, cfg, precision="float64")
    msg = str(info.value)
    assert kind in msg and "1 of 192 elements out of tolerance, all of them exact elements" in msg


def test_exact_line_counts_exact_and_rotated_failures_together():
    """One exact element (position 0) and two rotated ones fail: the line leads with the worst rotated
    element and counts all three, one of them exact."""
    cfg = rope_ref.RopeConfig(64, layout="half", rotary_dim=32)
    x = np.random.default_rng(1).standard_normal((3, 64))
    pos = np.array([0.0, 5.0, 9.0])
    y = rope_ref.apply(x, pos, cfg)
    y[0, 31] = np.nextafter(y[0, 31], 10.0)
    y[1, 3] += 1e-3
    y[2, 7] -= 2e-3
    with pytest.raises(AssertionError) as info:
        assert_rope_close(y, x, pos, cfg, precision="float64")
    line = str(info.value).splitlines()[1]
    assert line.startswith("  y[2, 7]: expected ")
    assert "; 3 of 192 elements out of tolerance; 1 of them exact elements that must equal the input" in line
    assert "e.g. y[0, 31]: " in line and line.endswith("(position 0 (rotation by angle 0))")


@pytest.mark.parametrize(
    ("row", "channel", "kind"), [(0, 31, "position 0"), (2, 40, "pass-through channel 40")]
)
def test_exact_line_of_a_gradient_tells_position_zero_from_a_pass_through_channel(row, channel, kind):
    """The VJP rotates grad_out by -pos: its exact elements are named like those of apply."""
    cfg = rope_ref.RopeConfig(64, layout="half", rotary_dim=32)
    rng = np.random.default_rng(9)
    x, g = rng.standard_normal((3, 64)), rng.standard_normal((3, 64))
    pos = np.array([0.0, 4.0, 13.0])
    grad = rope_ref.apply(g, -pos, cfg)  # the VJP: grad_out turned back
    grad[row, channel] = np.nextafter(grad[row, channel], 10.0)
    with pytest.raises(AssertionError) as info:
        assert_rope_vjp_close(grad, x, pos, cfg, g, precision="float64")
    msg = str(info.value)
    assert f"({kind}" in msg and "1 of 192 elements out of tolerance, all of them exact elements" in msg


@pytest.mark.parametrize(("times", "named"), [(3.5, True), (4.5, False), (30.0, False)])
def test_explain_names_a_candidate_only_within_four_times_the_tolerance(times, named):
    """EXPLAIN_SLACK is 4: one element off by ``times`` its own tolerance is named only when times <= 4."""
    cfg = rope_ref.RopeConfig(8, layout="half")
    x = np.random.default_rng(2).standard_normal((6, 8))
    pos = np.arange(1.0, 7.0) * 5
    policy = rope_ref.testing.precision_policy("float32")
    candidate = rope_ref.testing._builder(x, "apply", {}, None)(cfg, pos + 2)
    case, name = candidate()
    tol = rope_ref.tolerance.element_tolerance(case, name, policy).tol
    got = np.array(case.expected[name], dtype=np.float64)
    got[3, 1] += times * tol[3, 1]
    expected = "shifted (matches the oracle run with that mistake)" if named else "the pattern"
    assert diagnoses.explain(got, policy, [("shifted", candidate)], "the pattern") == expected


@pytest.mark.parametrize("start", [1, 40])
def test_a_correct_rotation_is_not_offered_as_a_shift_of_zero(start):
    """The shift estimated from a correct output is 0: no 'positions shifted by +0' candidate; a real
    shift of 3 still gives one (the control)."""
    cfg = rope_ref.RopeConfig(16, layout="half")
    x = np.random.default_rng(3).standard_normal((12, 16))
    pos = np.arange(start, start + 12.0)
    build = rope_ref.testing._builder(x, "apply", {}, None)

    def labels(got):
        return [lab for lab, _ in diagnoses.common_bug_candidates(x, got, pos, cfg, None, build, 1.0, None)]

    assert not [lab for lab in labels(rope_ref.apply(x, pos, cfg)) if "shifted" in lab]
    assert any(lab.startswith("positions shifted by +3") for lab in labels(rope_ref.apply(x, pos + 3, cfg)))
    cos, sin = rope_ref.cos_sin(pos, cfg)
    n = cfg.rotary_dim // 2
    tables = diagnoses.table_bug_candidates(cos[..., :n], sin[..., :n], pos, cfg, None, build)
    assert not [lab for lab, _ in tables if "shifted" in lab]


def test_a_stale_cache_is_offered_only_where_the_frequencies_depend_on_the_length():
    """With seq_len 5000, dynamic NTK (original 64) rescales its frequencies: a stale cache is a candidate;
    an unscaled config and linear scaling have one table for every length: it is not."""
    x = np.random.default_rng(5).standard_normal((6, 16))
    pos = np.arange(6.0)
    build = rope_ref.testing._builder(x, "apply", {}, None)
    wrong = rope_ref.apply(x, pos + 1, rope_ref.RopeConfig(16, layout="half"))

    def stale(cfg) -> bool:
        found = diagnoses.common_bug_candidates(x, wrong, pos, cfg, 5000, build, 1.0, None)
        return any(label.startswith("a stale cache") for label, _ in found)

    assert stale(rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.scaling.DynamicNTK(2.0, 64)))
    assert not stale(rope_ref.RopeConfig(16, layout="half"))
    assert not stale(rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.scaling.Linear(4.0)))


def _cut_case(pos, *, cfg=None):
    """The oracle's float32 judgement of ``apply`` on 8 channels at ``pos``: ``(case, name, tol, policy)``."""
    cfg = cfg or rope_ref.RopeConfig(8, layout="half")
    x = np.random.default_rng(7).standard_normal((len(pos), 8))
    policy = rope_ref.testing.precision_policy("float32")
    case, name = rope_ref.testing._builder(x, "apply", {}, None)(cfg, np.asarray(pos, dtype=np.float64))()
    tol = rope_ref.tolerance.element_tolerance(case, name, policy).tol
    return case, name, tol, policy


def _spoiled(case, name, tol, rows, times):
    """The oracle's answer with element 0 of each row in ``rows`` off by ``times`` its own tolerance."""
    got = np.array(case.expected[name], dtype=np.float64)
    got[rows, 0] += times * tol[rows, 0]
    return got


@pytest.mark.parametrize(("times", "cut"), [(19.0, None), (21.0, (4.0, 5.0)), (1e6, (4.0, 5.0))])
def test_cut_at_needs_the_first_wrong_position_at_twenty_times_its_tolerance(times, cut):
    """Positions 0..4 right, 5..9 wrong: a cut at 5 only when the tokens at 5 fail by err/tol >= 20 (an
    error that grows with the position starts near 1); 19 is below, 21 above the documented limit."""
    pos = np.arange(10.0)
    case, name, tol, policy = _cut_case(pos)
    got = _spoiled(case, name, tol, np.arange(5, 10), times)
    assert diagnoses.cut_at(case, name, got, policy, pos) == cut


def test_cut_at_reports_the_last_right_and_the_first_wrong_position_across_a_gap():
    """Positions 0, 3, 4, 40, 41, 42 (unsorted): right below 40, wrong from 40: ``(4, 40)``."""
    pos = np.array([41.0, 0.0, 4.0, 40.0, 3.0, 42.0])
    case, name, tol, policy = _cut_case(pos)
    got = _spoiled(case, name, tol, pos >= 40, 50.0)
    assert diagnoses.cut_at(case, name, got, policy, pos) == (4.0, 40.0)


@pytest.mark.parametrize(
    ("pos", "wrong", "why"),
    [
        (np.array([0.0, 0.0, 3.0, 5.0, 6.0]), [3, 4], "one right position other than 0 is no evidence"),
        (np.array([0.0, 1.0, 2.0, 5.0, 6.0]), [3, 4], None),  # the control: two right positions
        (np.arange(12.0), [4, 5, 6, 7, 8, 9, 10], "one in eight from the cut on passes (< nine in ten)"),
        (np.arange(12.0), [4, 5, 6, 7, 8, 9, 10, 11], None),  # the control: every one from 4 fails
        (np.array([1.0, 2.0, 3.5, 4.0]), [2, 3], "a cut at a non-integer position is no table length"),
        (np.arange(6.0), [], "nothing wrong"),
        (np.arange(1.0, 6.0), [0, 1, 2, 3, 4], "everything wrong"),
    ],
)
def test_cut_at_gives_nothing_without_the_pattern_of_a_short_table(pos, wrong, why):
    case, name, tol, policy = _cut_case(pos)
    got = _spoiled(case, name, tol, np.array(wrong, dtype=int), 50.0)
    found = diagnoses.cut_at(case, name, got, policy, pos)
    if why is None:
        assert found == (float(pos[pos < pos[wrong[0]]].max()), float(pos[wrong[0]]))
    else:
        assert found is None, why


def test_cut_at_reads_nan_as_wrong_and_gives_nothing_for_what_it_cannot_judge():
    pos = np.arange(8.0)
    case, name, tol, policy = _cut_case(pos)
    got = _spoiled(case, name, tol, np.arange(4, 8), 50.0)
    got[4:, 1] = np.nan
    got[4, 0] = case.expected[name][4, 0]  # position 4 wrong by its NaN alone
    assert diagnoses.cut_at(case, name, got, policy, pos) == (3.0, 4.0)
    assert diagnoses.cut_at(case, name, got[:, :3], policy, pos) is None  # shapes that do not broadcast
    with pytest.raises(KeyError):  # a mistake of the caller is not hidden as "no estimate"
        diagnoses.cut_at(case, "no such output", got, policy, pos)


# -- the estimators, at the helpers -------------------------------------------------------------------------

CFG16 = rope_ref.RopeConfig(16, layout="half")


def _hf_inv_freq(base, d=16):
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def test_bases_from_freqs_reads_the_base_of_the_observed_frequencies():
    assert diagnoses.bases_from_freqs(_hf_inv_freq(5e5), CFG16, None) == pytest.approx([5e5], rel=1e-9)
    spoiled = _hf_inv_freq(5e5)
    spoiled[3] *= 7.0
    weight = np.ones(8)
    weight[3] = 0.0  # a pair without evidence does not move the estimate
    assert diagnoses.bases_from_freqs(spoiled, CFG16, None, weight) == pytest.approx([5e5], rel=1e-9)
    assert diagnoses.bases_from_freqs(spoiled, CFG16, None)[0] < 4e5  # the control: unweighted it does


@pytest.mark.parametrize("scaling", [None, rope_ref.Linear(4.0)], ids=["unscaled", "linear-4"])
def test_bases_from_freqs_reads_the_exponent_over_the_rotated_channels(scaling):
    """Partial rotary (head_dim 16, rotary_dim 12): omega_i = base^(-2i/12) for the 6 rotated pairs, so
    the exponent's denominator is rotary_dim, not head_dim (which would read 1e4 * 50^(4/3) ~ 1.8e6)."""
    cfg = rope_ref.RopeConfig(16, layout="half", rotary_dim=12, scaling=scaling)
    obs = _hf_inv_freq(5e5, 12) / (1.0 if scaling is None else 4.0)
    found = diagnoses.bases_from_freqs(obs, cfg, None)
    assert found == pytest.approx([5e5] * (1 if scaling is None else 2), rel=1e-6)


@pytest.mark.parametrize(
    ("scaling", "base"),
    [
        (rope_ref.Llama3(8.0, 1.0, 4.0, 8192), 1e6),
        (rope_ref.Llama3(8.0, 1.0, 4.0, 8192), 1e3),
        (rope_ref.YaRN(32.0, 4096), 5e5),
    ],
    ids=["llama3-1e6", "llama3-1e3", "yarn-32"],
)
def test_bases_from_freqs_searches_a_factor_8_either_side_of_the_log_fit(scaling, base):
    """Scalings that treat pairs apart bend the power law: the log fit lands 2 to 5 times off the base the
    frequencies were built with, and the search over the scaled frequencies (a factor 8 either side) still
    finds that base."""
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=scaling)
    first, searched = diagnoses.bases_from_freqs(rope_ref.inv_freq(cfg.replace(base=base)), cfg, None)
    assert not 0.5 < first / base < 2.0  # the premise: the first estimate alone is too far off
    assert searched == pytest.approx(base, rel=1e-6)


@pytest.mark.parametrize("how", ["rotation", "table"])
def test_half_precision_frequencies_are_named_under_an_attention_factor(how):
    """YaRN (factor 4) multiplies cos and sin by A = 0.1 ln 4 + 1 (YaRN eq. 22): a port that rounds YaRN's
    frequencies to float16 still multiplies by A, and the candidate built for that mistake must too."""
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.YaRN(4.0, 64))
    x = np.random.default_rng(8).standard_normal((12, 16))
    pos = np.arange(12.0) * 5
    theta = pos[:, None] * rope_ref.inv_freq(cfg).astype(np.float16).astype(np.float64)
    cos, sin = (0.1 * np.log(4.0) + 1.0) * np.cos(theta), (0.1 * np.log(4.0) + 1.0) * np.sin(theta)
    with pytest.raises(AssertionError) as info:
        if how == "rotation":
            y = np.concatenate([x[:, :8] * cos - x[:, 8:] * sin, x[:, 8:] * cos + x[:, :8] * sin], axis=-1)
            assert_rope_close(y, x, pos, cfg)
        else:
            rope_ref.testing.assert_cos_sin_close(np.tile(cos, 2), np.tile(sin, 2), pos, cfg)
    assert "most resembles: inv_freq computed in float16" in str(info.value), info.value


def test_bases_from_freqs_adds_a_fitted_base_under_a_scaling():
    """Linear scaling divides every frequency by 4: the log fit reads base 5e5 from the scaled table
    (obs / omega is the same ratio as unscaled), and the golden-section search over the scaled
    frequencies finds 5e5 too."""
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.Linear(4.0))
    found = diagnoses.bases_from_freqs(_hf_inv_freq(5e5) / 4.0, cfg, None)
    assert len(found) == 2 and found == pytest.approx([5e5, 5e5], rel=1e-6)


@pytest.mark.parametrize(
    ("obs", "cfg", "why"),
    [
        (_hf_inv_freq(5e5)[:7], CFG16, "one frequency per pair needed"),
        (_hf_inv_freq(5e5, 2), rope_ref.RopeConfig(2, layout="half"), "one pair holds no base"),
        (np.r_[1.0, -_hf_inv_freq(5e5)[1:]], CFG16, "no positive frequency past pair 0"),
        (_hf_inv_freq(0.5), CFG16, "a base of 0.5 is no base"),
    ],
)
def test_bases_from_freqs_gives_nothing_without_evidence(obs, cfg, why):
    assert diagnoses.bases_from_freqs(obs, cfg, None) == [], why


def test_observed_freqs_fit_the_angles_over_the_widest_span():
    omega = np.array([0.9, 0.05, 1e-3])
    P = np.array([3.0, 4.0, 6.0, 11.0, 43.0])
    est, span, gap = diagnoses._observed_freqs(P, np.exp(1j * omega * P[:, None]))
    assert (span, gap) == (40.0, 1.0)
    np.testing.assert_allclose(est, omega, rtol=1e-12)
    assert diagnoses._observed_freqs(P[:1], np.ones((1, 3))) is None


def test_estimate_shift_reads_the_offset_and_skips_empty_pairs():
    omega = np.array([1.0, 0.1, 0.01])
    P = np.array([0.0, 2.0, 7.0])
    W = 2.0 * np.exp(1j * omega * (P[:, None] + 23.0))
    assert diagnoses._estimate_shift(P, W, omega) == pytest.approx(23.0, abs=1e-9)
    W[:, 2] = 0.0  # the slowest pair holds nothing: 23 from the next (0.1 * 23 < pi: no wrap)
    assert diagnoses._estimate_shift(P, W, omega) == pytest.approx(23.0, abs=1e-9)
    assert diagnoses._estimate_shift(P, np.zeros_like(W), omega) is None


def test_table_candidates_need_the_first_wrong_position_and_a_whole_shift():
    omega = _hf_inv_freq(1e4)
    P = np.arange(0.0, 12.0)
    used = np.minimum(P, 7.0)  # a table of 8 rows, clamped
    W = np.exp(1j * omega * used[:, None])

    def build(cfg, pos):
        return tuple(np.asarray(pos).tolist())

    found = diagnoses._table_candidates(P, W, omega, CFG16, P, 8.0, 1.0, build)
    assert found[0][0] == "a cos/sin table of 8 rows read past its end (positions >= 8 clamped to row 7)"
    assert found[0][1] == (0, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7)
    assert diagnoses._table_candidates(P, W, omega, CFG16, P, 8.5, 1.0, build) == []  # not a position
    half = W.copy()
    half[8] = np.exp(1j * omega * 7.5)  # rotated by a position half-way between rows
    assert diagnoses._table_candidates(P, half, omega, CFG16, P, 8.0, 1.0, build) == []


def test_by_position_sums_every_token_at_a_position():
    p = np.array([[5.0, 2.0], [2.0, 9.0]])
    z = np.array([[[1.0, 2j], [3.0, 1j]], [[10.0, 5j], [7.0, 0.5]]])
    P, W = diagnoses._by_position(p, z)
    assert P.tolist() == [2.0, 5.0, 9.0]
    assert W.tolist() == [[13.0, 6j], [1.0, 2j], [7.0, 0.5]]  # position 2: two tokens summed


def test_rotate_with_turns_each_pair_by_sign_times_position_and_scales_it():
    cfg = rope_ref.RopeConfig(6, layout="interleaved", rotary_dim=4)
    v = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.5, -1.0, 2.0, 0.0, 7.0, 8.0]])
    pos, omega = np.array([3.0, 10.0]), np.array([0.2, 0.05])
    got = diagnoses._rotate_with(v, pos, cfg, omega, 1.5, -1.0)
    for t in range(2):
        for i, (a, b) in enumerate(((0, 1), (2, 3))):
            ang = -pos[t] * omega[i]
            rot = 1.5 * np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]]) @ v[t, [a, b]]
            np.testing.assert_allclose(got[t, [a, b]], rot, rtol=1e-14)
        assert got[t, 4:].tolist() == v[t, 4:].tolist()  # pass-through channels untouched, unscaled
    assert v[0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # the input is not written


@pytest.mark.parametrize("error", [ValueError, TypeError, ZeroDivisionError])
def test_explain_skips_a_candidate_that_does_not_fit_the_config(error):
    cfg = rope_ref.RopeConfig(8, layout="half")
    x = np.random.default_rng(8).standard_normal((3, 8))
    pos = np.array([2.0, 5.0, 11.0])
    build = rope_ref.testing._builder(x, "apply", {}, None)

    def bad():
        raise error("does not fit")

    got = rope_ref.apply(x, pos, cfg)
    policy = rope_ref.testing.precision_policy("float64")
    assert diagnoses.explain(got, policy, [("bad", bad), ("fits", build(cfg, pos))]) == (
        "fits (matches the oracle run with that mistake)"
    )


def test_estimate_shift_skips_pairs_that_do_not_turn():
    omega = np.array([1.0, 0.1, 0.0])  # a zero frequency (proportional RoPE) holds no phase
    P = np.array([1.0, 4.0])
    W = np.exp(1j * omega * (P[:, None] + 6.0))
    assert diagnoses._estimate_shift(P, W, omega) == pytest.approx(6.0, abs=1e-9)


def test_candidates_that_cannot_be_estimated_are_no_candidates():
    """Halves of different widths (a ValueError inside the estimate) give no candidate, not an error."""
    build = rope_ref.testing._builder(np.ones((3, 16)), "apply", {}, None)
    pos = np.arange(3.0)
    assert diagnoses.table_bug_candidates(np.ones((3, 8)), np.ones((3, 5)), pos, CFG16, None, build) == []
    v, got = np.ones((3, 16)), np.ones((3, 9))
    assert diagnoses.common_bug_candidates(v, got, pos, CFG16, None, build, 1.0, None) == []


_TABLE = "a cos/sin table of {n} rows read past its end (positions >= {n} {how})"


@pytest.mark.parametrize(
    "rows, fill, candidates",
    [
        (8, "clamp", [(8, "clamped to row 7", "clamp"), (1, "wrapped to row p mod 1", "wrap")]),
        (5, "wrap", [(1, "clamped to row 0", "clamp"), (5, "wrapped to row p mod 5", "wrap")]),
    ],
)
def test_table_candidates_of_a_gradient_read_the_row_back_through_the_sign(rows, fill, candidates):
    """The VJP rotates by -p: phasors sit at -p, and the row the first wrong token read is ``first - k``."""
    omega = _hf_inv_freq(1e4)
    pos = np.arange(12.0)
    used = np.minimum(pos, rows - 1) if fill == "clamp" else np.mod(pos, rows)
    P, W = -pos[::-1], np.exp(-1j * omega * used[::-1, None])  # sorted signed positions, turned by -row
    found = diagnoses._table_candidates(P, W, omega, CFG16, pos, float(rows), -1.0, lambda cfg, p: p)
    assert [label for label, _ in found] == [_TABLE.format(n=n, how=how) for n, how, _ in candidates]
    for (n, _, how), (_, rows_read) in zip(candidates, found, strict=True):
        want = np.minimum(pos, n - 1) if how == "clamp" else np.mod(pos, n)
        assert rows_read.tolist() == want.tolist()


_GENERIC = (
    "; an exact element that must equal the input bit for bit (pass-through channels or position 0); "
    "1 of {n} elements out of tolerance, all of them exact elements"
)


@pytest.mark.parametrize(
    ("op", "expected", "got", "line"),
    [
        (
            "inv_freq",
            np.array([1.0, 0.1, 0.01, 0.001]),
            np.array([1.0, 0.1, 0.015, 0.001]),
            "inv_freq[2]: expected 0.01, got 0.015, |err| 0.005" + _GENERIC.format(n=4),
        ),
        (  # a 0-d output: named without an index
            "attention_factor",
            np.asarray(1.25),
            np.asarray(1.5),
            "inv_freq: expected 1.25, got 1.5, |err| 0.25" + _GENERIC.format(n=1),
        ),
    ],
)
def test_exact_line_outside_a_rotation_names_no_channel(op, expected, got, line):
    """Only apply / apply_vjp tell position 0 from a pass-through channel; any other op (every element
    exact under the ``exact`` rule) gets the generic kind."""
    case = rope_ref.testing._case(op, CFG16, {}, {"inv_freq": expected}, "exact", None)
    policy = rope_ref.testing.precision_policy("float64")
    (c,) = [c for c in rope_ref.tolerance.compare_output(case, "inv_freq", got, policy) if not c.passed]
    assert diagnoses.exact_line(c, case, "inv_freq", got, policy) == line


def test_estimate_bases_needs_two_positions():
    """One position holds no frequency (the fit needs a gap): no base, not an error, at the helper."""
    omega = _hf_inv_freq(1e4)
    W = np.exp(1j * omega * 9.0)[None, :]
    assert diagnoses._estimate_bases(np.array([9.0]), W, CFG16, omega, None) == []
    P = np.array([9.0, 10.0, 13.0, 30.0])
    found = diagnoses._estimate_bases(P, np.exp(1j * _hf_inv_freq(5e4) * P[:, None]), CFG16, omega, None)
    assert found == pytest.approx([5e4], rel=1e-9)  # the control: four positions give the base


@pytest.mark.parametrize(("base", "labels"), [(4.0, []), (1e4, ["float16", "bfloat16"])])
def test_half_precision_frequencies_are_offered_only_where_rounding_changes_them(base, labels):
    """Base 4 on 4 channels: inv_freq = [1, 1/2], exact in float16 and bfloat16, so rounding them is no
    mistake to name; base 1e4: inv_freq[1] = 1e-2 rounds in both."""
    cfg = rope_ref.RopeConfig(4, layout="half", base=base)
    x = np.random.default_rng(10).standard_normal((6, 4))
    pos = np.arange(1.0, 7.0) * 3
    build = rope_ref.testing._builder(x, "apply", {}, None)
    got = rope_ref.apply(x, pos, cfg)
    found = diagnoses.common_bug_candidates(x, got, pos, cfg, None, build, 1.0, None)
    half = [label for label, _ in found if label.startswith("inv_freq computed in")]
    assert half == [
        f"inv_freq computed in {d} (the frequencies rounded to {d} before the angle)" for d in labels
    ]


@pytest.mark.parametrize("row", [10.0, -3.0])
def test_table_candidates_need_a_row_inside_the_table(row):
    """The first wrong token (at 8) turned by row 10 or row -3: no table of n <= 8 rows reads that row."""
    omega = _hf_inv_freq(1e4)
    P = np.arange(0.0, 12.0)
    used = P.copy()
    used[8:] = row
    W = np.exp(1j * omega * used[:, None])
    assert diagnoses._table_candidates(P, W, omega, CFG16, P, 8.0, 1.0, lambda cfg, p: p) == []


def test_explain_names_a_ratio_of_exactly_the_slack_and_keeps_the_first_of_equal_matches(monkeypatch):
    """``ratio <= EXPLAIN_SLACK`` (4 itself names the bug, just above does not); of two candidates that
    match equally well, the first listed wins."""
    ratios = {"a": 4.0, "b": 4.0, "c": np.nextafter(4.0, 5.0), "d": 2.0, "e": 2.0}

    def compare_output(case, name, got, policy):
        return [type("C", (), {"ratio": ratios[case]})()]

    monkeypatch.setattr(diagnoses.tolerance, "compare_output", compare_output)

    def cands(*labels):
        return [(lab, lambda lab=lab: (lab, "out")) for lab in labels]

    assert diagnoses.EXPLAIN_SLACK == 4.0
    assert diagnoses.explain(None, None, cands("c", "a")) == "a (matches the oracle run with that mistake)"
    assert diagnoses.explain(None, None, cands("c"), "none") == "none"
    assert diagnoses.explain(None, None, cands("a", "b")).startswith("a (")
    assert diagnoses.explain(None, None, cands("b", "a")).startswith("b (")
    assert diagnoses.explain(None, None, cands("a", "e", "d")).startswith("e (")


def test_bases_from_freqs_search_steps_over_bases_that_are_no_base():
    """Observed base 1.5 under a linear scaling: the search window (a factor 8 either side) reaches bases
    <= 1, which the config refuses; those trials count as misfits, not errors."""
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.Linear(4.0))
    found = diagnoses.bases_from_freqs(_hf_inv_freq(1.5) / 4.0, cfg, None)
    assert found == pytest.approx([1.5, 1.5], rel=1e-6)


def test_observed_freqs_start_from_the_smallest_gap_wherever_it_is():
    """Gaps 2, 1, 57: the first estimate comes from the gap of 1 (pair 0 turns 2 rad per position, so a
    gap of 2 or the whole span of 60 would alias it); then the spans 2 and 60 refine it."""
    omega = np.array([2.0, 0.9, 0.01])
    P = np.array([0.0, 2.0, 3.0, 60.0])
    est, span, gap = diagnoses._observed_freqs(P, np.exp(1j * omega * P[:, None]))
    assert (span, gap) == (60.0, 1.0)
    np.testing.assert_allclose(est, omega, rtol=1e-12)


def test_estimate_shift_resolves_the_wrap_from_a_weak_slow_pair():
    """A shift of 23 wraps pair 0 (1 rad per position) more than three turns; the slow pair 1, though its
    phasor is a millionth of pair 0's, still carries the turn count."""
    omega = np.array([1.0, 0.01])
    P = np.array([0.0, 3.0])
    W = np.exp(1j * omega * (P[:, None] + 23.0)) * np.array([1.0, 1e-6])
    assert diagnoses._estimate_shift(P, W, omega) == pytest.approx(23.0, abs=1e-9)


@pytest.mark.parametrize(("shift", "offered"), [(2.2, True), (2.3, False), (2.45, False), (-1.8, True)])
def test_a_shift_is_offered_only_within_a_quarter_position_of_a_whole_one(shift, offered):
    """The shift estimate must lie within 0.25 of a whole number: 2.2 reads as +2, 2.3 and 2.45 as no
    shift, -1.8 as -2."""
    cfg = rope_ref.RopeConfig(16, layout="half")
    x = np.random.default_rng(11).standard_normal((12, 16))
    pos = np.arange(12.0) * 3 + 5
    build = rope_ref.testing._builder(x, "apply", {}, None)
    got = rope_ref.apply(x, pos + shift, cfg)
    labels = [lab for lab, _ in diagnoses.common_bug_candidates(x, got, pos, cfg, None, build, 1.0, None)]
    shifted = [lab for lab in labels if lab.startswith("positions shifted")]
    k = round(shift)
    want = f"positions shifted by {k:+d} (the angle of position p{k:+d} used at position p)"
    assert shifted == ([want] if offered else [])
