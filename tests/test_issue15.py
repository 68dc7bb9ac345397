"""Issue 15: the covering catalogue, its new families, the tolerance fixes and the coverage report.

Expected values here are written by hand or from first principles (never read back from the code under
test): bug classes and ids the catalogue must hold, tolerance facts derived in ``docs/tolerance.md``, and
the outcome of backends built to fail one family each.
"""

from __future__ import annotations

import json

import broken_backends as bb
import numpy as np
import pytest
from rope_ref.conformance import catalogue
from rope_ref.conformance.case import Case
from rope_ref.conformance.golden import load_golden
from rope_ref.conformance.protocol import Backend, PrecisionPolicy, Unsupported
from rope_ref.conformance.runner import Runner, select_cases
from rope_ref.conformance.tolerance import check_case, element_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NEW_FAMILIES = (
    "crossed_axes",
    "negative_positions",
    "explicit_seq_len",
    "scaling_parameters",
    "scaling_partial_rotary",
    "table_cache_state",
    "kernel_tails",
    "chatglm_incremental",
)
IOS = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def cases():
    return load_golden()


@pytest.fixture(scope="module")
def by_id(cases):
    return {c.id: c for c in cases}


# -- the catalogue ------------------------------------------------------------------------------------------


def test_covering_is_pairwise_and_shipped(by_id):
    rows = catalogue.covering_rows()
    assert len(rows) == 7 * 6  # every scaling x regime pair exactly once
    assert {(r[0], r[1]) for r in rows} == {
        (s, p) for s in catalogue.COVER_SCALINGS for p in catalogue.COVER_REGIMES
    }
    assert catalogue.pairwise_gaps(rows) == []
    # A covering that always uses the half layout leaves (scaling, interleaved) pairs open.
    half_only = [(s, p, "half", part, op) for s, p, _, part, op in rows]
    gaps = catalogue.pairwise_gaps(half_only)
    assert ("scaling", "layout", "yarn", "interleaved") in gaps
    crossed = [c for c in by_id.values() if c.bug_class == "crossed_axes"]
    assert len([c for c in crossed if c.op == "cos_sin"]) == 14
    assert len([c for c in crossed if c.op in ("apply", "apply_vjp")]) == 28 * 4


def test_new_families_have_cases_in_every_io_dtype(cases):
    for family in NEW_FAMILIES:
        mine = [c for c in cases if c.bug_class == family]
        assert mine, family
        assert family in catalogue.BUG_CLASSES
        activations = [c for c in mine if c.io_dtype is not None]
        if family != "chatglm_incremental":
            assert {c.io_dtype for c in activations} == {"float64", "float32", "float16", "bfloat16"}, family


def test_blind_spots_are_shipped(by_id):
    # negative positions in apply, cos_sin and apply_vjp
    assert np.min(by_id["apply-negative_d64-fp32"].inputs["positions"]) == -100000
    assert np.min(by_id["cos_sin-negative_d64"].inputs["positions"]) < 0
    assert np.min(by_id["apply_vjp-negative_interleaved_d32-bf16"].inputs["positions"]) < 0
    # explicit seq_len different from max(positions) + 1
    for cid in ("apply-seq_len_dynamic_d64-fp16", "apply_vjp-seq_len_longrope_d32-fp32"):
        c = by_id[cid]
        assert c.params["seq_len"] != int(np.max(c.inputs["positions"])) + 1
    assert by_id["cos_sin-seq_len_longrope_d32-L16384"].params["seq_len"] == 16384
    # Kimi-K2 betas (equal), truncate both ways, mscale pair, attention factor below 1
    kimi = by_id["inv_freq-yarn_kimi_k2_d64"].config["scaling"]
    assert kimi["beta_fast"] == kimi["beta_slow"] == 1.0
    assert by_id["inv_freq-yarn_beta16_2_notrunc_d64"].config["scaling"]["truncate"] is False
    assert by_id["inv_freq-yarn_gptoss_trunc_d64"].config["scaling"]["truncate"] is True
    assert float(by_id["attention_factor-yarn_af08_d64"].expected["value"]) == 0.8
    # LongRoPE 96 of 128 (Phi-4-mini)
    phi = by_id["apply-longrope_phi4mini_d128_r96-fp32"].config
    assert (phi["head_dim"], phi["rotary_dim"], phi["scaling"]["rope_type"]) == (128, 96, "longrope")
    # tail shapes: head counts and several hundred rows, none a multiple of 64
    heads = {by_id[f"apply-tail_{n}-fp32"].inputs["x"].shape[2] for n in ("heads28_d32", "heads40_d16")}
    assert heads == {28, 40}
    x71 = by_id["apply-tail_heads71_d8-bf16"].inputs["x"]
    assert x71.shape[2] == 71 and int(np.prod(x71.shape[:-1])) == 355
    # ChatGLM: a row with both mask tokens, left padding, next_position_ids
    from rope_ref import chatglm

    ids = by_id["chatglm_position_ids-mixed_masks_2d"].inputs["input_ids"]
    both = [(chatglm.MASK_TOKEN_ID in r) and (chatglm.GMASK_TOKEN_ID in r) for r in ids]
    assert any(both) and np.any(ids[:, 0] == 3)  # pad id 3 on the left


def test_next_position_ids_by_hand(by_id):
    """Row 0 of the mixed batch: pad pad 11 [MASK] 12 [gMASK] <sop> 30 31 32: context 6, [gMASK] at 5."""
    c = by_id["chatglm_next_position_ids-mixed_masks_2d_step0"]
    assert c.expected["out"][0].tolist() == [[5], [10 - 6]]
    c3 = by_id["chatglm_next_position_ids-mixed_masks_2d_step3"]
    assert c3.expected["out"][0].tolist() == [[5], [13 - 6]]
    # row 2: [MASK] at 2 only, <sop> at 6; 1D [MASK] rows keep the mask position
    assert by_id["chatglm_next_position_ids-mixed_masks_1d_step0"].expected["out"][2].tolist() == [2]


def test_next_position_ids_match_the_last_column_of_full_2d_ids(by_id):
    """Released incremental rule: [mask_position, seq_len - context_length] is the last column of the full
    2D ids (docs/chatglm.md); in 1D every row (either mask kind) gets the mask position."""
    from rope_ref import chatglm

    for steps in (0, 3):
        for dim in ("2d", "1d"):
            c = by_id[f"chatglm_next_position_ids-mixed_masks_{dim}_step{steps}"]
            params = {k: v for k, v in c.params.items() if k != "position_encoding_2d"}
            full = chatglm.position_ids(c.inputs["input_ids"], position_encoding_2d=True, **params)
            last = full[:, :, -1:]
            want = last if dim == "2d" else last[:, 0, :]
            np.testing.assert_array_equal(c.expected["out"], want)


def test_custom_sets_default_to_revealing_positions_and_model_names():
    from rope_ref import RopeConfig

    pos = catalogue.revealing_positions(RopeConfig(128, layout="half"), 8)
    assert {257, 2049, 4097} <= set(pos.tolist())
    cs = catalogue.custom_cases(RopeConfig(64, layout="half"), name="llama-3-8b", ops=("apply",))
    assert [c.id for c in cs] == ["apply-llama-3-8b-fp32"]
    assert 2049 in cs[0].inputs["positions"].ravel().tolist()


# -- the new broken backends: each fails its family, from that family's cases alone -------------------------


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("broken", bb.BROKEN_ISSUE15, ids=lambda c: c.__name__)
def test_new_broken_backend_fails_its_family_alone(cases, broken, io):
    (family,) = broken.targets
    pattern = "|".join(f"^{c.id}$" for c in cases if c.bug_class == family).replace(".", r"\.")
    chosen = select_cases(cases, pattern)
    report = Runner(broken(io)).run(chosen)
    assert any(r.bug_class == family for r in report.failures), f"{broken.__name__} passed {family} at {io}"
    # ... and a correct float32 port passes exactly those cases.
    assert Runner(bb.Float32Backend(io)).run(chosen).ok


# -- tolerance fixes ----------------------------------------------------------------------------------------


def _table_case(values, op="inv_freq") -> Case:
    cfg = catalogue.make_config(128, "half", base=500000.0)
    return Case("t", op, cfg, {}, {"out": np.asarray(values, dtype=np.float64)}, "tables", "table")


def test_table_tolerance_does_not_depend_on_io_dtype(by_id):
    case = by_id["inv_freq-default_d128_base500000"]
    tols = {
        io: element_tolerance(case, "out", PrecisionPolicy(io, "float32", "float32")).tol
        for io in ("float32", "float16", "bfloat16")
    }
    np.testing.assert_array_equal(tols["float16"], tols["float32"])
    np.testing.assert_array_equal(tols["bfloat16"], tols["float32"])
    # The slowest frequencies of base 5e5 are ~1e-6: a 1% error must fail at fp16 I/O too.
    e = case.expected["out"]
    got = e * 1.01
    res = check_case(case, {"out": got}, PrecisionPolicy("float16", "float32", "float32"))
    assert not res[0].passed and res[0].n_bad == e.size


def test_decay_tolerance_has_no_activation_roundoff(by_id):
    case = by_id["decay_upper_bound-d128_base10000"]
    tol = {
        io: element_tolerance(case, "out", PrecisionPolicy(io, "float32", "float32")).tol
        for io in ("float32", "bfloat16")
    }
    np.testing.assert_array_equal(tol["bfloat16"], tol["float32"])
    e = case.expected["out"]
    assert np.all(tol["bfloat16"][e > 0] < 0.01 * e[e > 0])  # far below the value (was 2.5x at bf16)


def test_exact_rule_honours_a_declared_float32_compute_dtype(by_id):
    case = by_id["apply-tiny_d4_half-fp64"]  # position 0 row: exact elements
    policy = PrecisionPolicy("float64", "float32", "float32")
    x = case.inputs["x"].astype(np.float64)
    got = case.expected["out"].copy()
    got[0] = x[0].astype(np.float32).astype(np.float64)  # what torchtune/MLX return at position 0
    assert all(r.passed for r in check_case(case, {"out": got}, policy))
    wrong = got.copy()
    wrong[0, 0] = np.nextafter(np.float32(wrong[0, 0]), np.float32(2)).astype(np.float64)
    assert not check_case(case, {"out": wrong}, policy)[0].passed
    # A float64-compute backend gets no such allowance.
    case64 = by_id["apply-layout_half_d64-fp64"]
    got64 = case64.expected["out"].copy()
    got64[..., 0, :] = np.float32(got64[..., 0, :]).astype(np.float64) + 1e-9  # position 0 rows, perturbed
    assert not check_case(case64, {"out": got64}, PrecisionPolicy())[0].passed


def test_yarn_near_cancellation_is_budgeted_only_without_truncation(by_id):
    notrunc = element_tolerance(
        by_id["inv_freq-yarn_f32_notrunc_d64"], "out", PrecisionPolicy("float32", "float32", "float32")
    ).tol
    trunc = element_tolerance(
        by_id["inv_freq-yarn_gptoss_trunc_d64"], "out", PrecisionPolicy("float32", "float32", "float32")
    ).tol
    e_no = by_id["inv_freq-yarn_f32_notrunc_d64"].expected["out"]
    e_tr = by_id["inv_freq-yarn_gptoss_trunc_d64"].expected["out"]
    # Same base, d and factor: without truncation the ramp pairs get a larger relative budget ...
    assert np.max(notrunc / e_no) > 2 * np.max(trunc / e_tr)
    # ... still far below the error of ignoring truncate=False (ramp bounds moved to integers).
    ignored = by_id["inv_freq-yarn_gptoss_trunc_d64"].expected["out"]
    assert np.any(np.abs(ignored - e_no) > notrunc)


# -- protocol and coverage -----------------------------------------------------------------------------------


#: Issue 20's operations, which a backend written before issue 15 does not have either.
ISSUE20_OPS = {"multiaxis_apply", "mrope_position_ids", "mrope_decode_ids", "vision_ids", "mla_softmax_scale"}


class _OldBackend(bb.Float32Backend):
    """A backend written before issue 15: no next_position_ids, and no cos_sin for scaled configs."""

    chatglm_next_position_ids = Backend.chatglm_next_position_ids
    multiaxis_apply = Backend.multiaxis_apply
    mrope_position_ids = Backend.mrope_position_ids
    mrope_decode_ids = Backend.mrope_decode_ids
    vision_ids = Backend.vision_ids
    mla_softmax_scale = Backend.mla_softmax_scale

    def cos_sin(self, positions, cfg, seq_len=None):
        if cfg.scaling is not None:
            raise NotImplementedError("scaled tables are internal")
        return super().cos_sin(positions, cfg, seq_len)


def make_old_backend(precision: str | None = None) -> _OldBackend:
    """``module:attr`` factory for the CLI test."""
    return _OldBackend({"fp16": "float16", "bf16": "bfloat16"}.get(precision or "", "float32"))


def test_old_backend_runs_every_old_case_and_reports_reasons(cases):
    report = Runner(_OldBackend("float32")).run(cases)
    assert report.ok, report.failure_details()
    unsupported = [r for r in report.results if r.status == "unsupported"]
    by_reason = {}
    for r in unsupported:
        by_reason.setdefault(r.unsupported_reason, set()).add(r.op)
    assert by_reason == {"operation": {"chatglm_next_position_ids", *ISSUE20_OPS}, "config": {"cos_sin"}}
    table = report.coverage_table()
    assert "chatglm_incremental" in table and "NOT COVERED: 4 operation missing" in table
    assert "config not expressible" in table
    assert not report.complete


class _PolicyBackend(bb.Float32Backend):
    """Declares float64 angles for cos_sin only; takes inv_freq from the oracle; no bf16 for decay."""

    oracle_tables = frozenset({"inv_freq"})

    def __init__(self, io_dtype="float32"):
        super().__init__(io_dtype)
        self.precision_by_op = {"cos_sin": PrecisionPolicy(io_dtype, "float64", "float64")}

    def decay_upper_bound(self, distances, cfg):
        raise Unsupported("decay needs float64 accumulation", "dtype")


def test_per_op_policy_borrowed_tables_and_dtype_reason(cases):
    report = Runner(_PolicyBackend("float32")).run(cases)
    res = {r.case_id: r for r in report.results}
    # float32 cos/sin judged under a declared float64 policy must fail (the policy is honoured) ...
    assert res["cos_sin-d64_precision_positions"].status == "failed"
    assert res["apply-layout_half_d64-fp32"].status == "passed"  # ... the rest keeps its own policy
    assert res["inv_freq-default_d64_base10000"].borrowed
    assert res["decay_upper_bound-d128_base10000"].unsupported_reason == "dtype"
    assert "dtype missing" in report.coverage_table()
    assert json.loads(json.dumps(report.to_json()))["cases"][0].get("borrowed") is True


def test_cli_require_all_and_coverage_after_verdict(capsys):
    from rope_ref.cli import main

    argv = ["conformance", "run", "--backend", "test_issue15:make_old_backend", "-q", "--precision", "fp32"]
    assert main(argv + ["-k", "chatglm_next|^apply-layout"]) == 0
    out = capsys.readouterr().out
    verdict = out.index("PASSED:")
    assert "2 of 6 applicable cases ran" in out[verdict:]
    assert out.index("coverage (applicable cases per bug class)") > verdict
    assert main(argv + ["-k", "chatglm_next|^apply-layout", "--require-all"]) == 1
    assert "FAILED:" in capsys.readouterr().out
