"""``conformance.judge``: a port's output files judged case by case (which file, which key, what a missing
or unreadable file or tensor is), written here with the project's own safetensors / npz writers."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.judge import OUTPUT_SUFFIXES, OutputsJudge, RecordedOutputs, output_path
from rope_ref.conformance.safetensors_io import write_npz, write_safetensors
from small_cases import apply_case

import rope_ref
from rope_ref.precision import PrecisionPolicy

F64 = PrecisionPolicy("float64", "float64", "float64")


def _judge(tmp_path, case, precision=F64):
    [result] = OutputsJudge(RecordedOutputs(tmp_path, precision)).run([case]).results
    return result


@pytest.fixture
def case():
    return apply_case("apply-judged")


def test_safetensors_is_looked_for_first(tmp_path, case):
    assert OUTPUT_SUFFIXES == (".safetensors", ".npz")
    good = case.expected["out"]
    write_safetensors(tmp_path / "apply-judged.safetensors", {"outputs.out": good})
    write_npz(tmp_path / "apply-judged.npz", {"outputs.out": good * 2.0})
    assert output_path(tmp_path, "apply-judged") == tmp_path / "apply-judged.safetensors"
    assert _judge(tmp_path, case).status == "passed"


def test_a_directory_is_no_output_file(tmp_path, case):
    (tmp_path / "apply-judged.safetensors").mkdir()
    assert output_path(tmp_path, "apply-judged") is None
    write_npz(tmp_path / "apply-judged.npz", {"out": case.expected["out"]})
    assert output_path(tmp_path, "apply-judged") == tmp_path / "apply-judged.npz"
    assert _judge(tmp_path, case).status == "passed"  # the bare output name is accepted


def test_a_missing_file_is_unsupported_operation(tmp_path, case):
    r = _judge(tmp_path, case)
    assert (r.status, r.unsupported_reason) == ("unsupported", "operation")
    assert "no output file apply-judged.safetensors or .npz" in r.message
    assert r.reproducer == "rerun your program on case apply-judged, then judge it with -k '^apply-judged$'"


def test_the_prefixed_key_wins_over_the_bare_name(tmp_path, case):
    write_npz(
        tmp_path / "apply-judged.npz", {"outputs.out": case.expected["out"], "out": case.expected["out"] + 1}
    )
    assert _judge(tmp_path, case).status == "passed"


def test_an_unreadable_file_is_a_recorded_failure(tmp_path, case):
    (tmp_path / "apply-judged.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00garbage")
    r = _judge(tmp_path, case)
    assert (r.status, r.kind) == ("failed", "exception") and r.message.startswith("unreadable output file:")


def test_a_missing_tensor_is_a_shape_failure(tmp_path):
    pos = np.array([0.0, 3.0, 70.0])
    cfg = rope_ref.RopeConfig(8, layout="half")
    cos, sin = rope_ref.cos_sin(pos, cfg)
    from rope_ref.conformance.case import Case

    case = Case("cs", "cos_sin", {"head_dim": 8, "layout": "half"}, {"positions": pos},
                {"cos": cos, "sin": sin}, "tables", "trig")  # fmt: skip
    write_npz(tmp_path / "cs.npz", {"outputs.cos": cos})
    r = _judge(tmp_path, case)
    assert (r.status, r.kind) == ("failed", "shape")
    assert r.message == "cs.npz has no tensor 'outputs.sin' (keys: ['outputs.cos'])"
    write_npz(tmp_path / "cs.npz", {"outputs.cos": cos, "sin": sin})
    assert _judge(tmp_path, case).status == "passed"


def test_a_wrong_output_is_diagnosed(tmp_path, case):
    x, pos = case.inputs["x"], case.inputs["positions"]
    swapped = rope_ref.apply(x, pos, case.rope_config().replace(layout="interleaved"))
    write_npz(tmp_path / "apply-judged.npz", {"outputs.out": swapped})
    r = _judge(tmp_path, case)
    assert r.status == "failed" and r.diagnosis.startswith("layout swapped")


def test_the_declared_io_dtype_is_checked_on_the_files(tmp_path, case):
    write_npz(tmp_path / "apply-judged.npz", {"outputs.out": case.expected["out"].astype(np.float32)})
    r = _judge(tmp_path, case)
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype float32; the backend declares io dtype float64"
