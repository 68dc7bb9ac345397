"""Judge outputs written by any program (a C++ or Rust port) against a golden set.

The program reads each case's inputs from the set and writes, into an outputs directory, one file per
case named ``<case id>.safetensors`` (or ``<case id>.npz``) holding one tensor per expected output,
under the key ``outputs.<name>`` (``<name>`` alone is accepted too): ``outputs.out`` for ``apply``.
:class:`OutputsJudge` is a :class:`~rope_ref.conformance.runner.Runner` whose "call" reads that file, so
the outputs go through the same checks (shape, dtype against the declared I/O dtype, tolerance model,
diagnosis of a failure) and the same report and verdict as ``rope-ref conformance run``. A case with
no output file is *unsupported* ("operation missing"): not a pass, and ``--require-all`` fails it.
The layout is specified in ``docs/golden-format.md`` ("Judging a port's outputs").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rope_ref.precision import PrecisionPolicy

from .case import Case
from .protocol import Backend, Unsupported
from .runner import Runner, _CaseFailure
from .safetensors_io import SafetensorsError, read_npz, read_safetensors
from .tolerance import Comparison, check_case

__all__ = ["RecordedOutputs", "OutputsJudge", "output_path", "OUTPUT_SUFFIXES"]

#: File suffixes looked for, in this order, for each case id.
OUTPUT_SUFFIXES = (".safetensors", ".npz")


def output_path(outputs: str | Path, case_id: str) -> Path | None:
    """The output file of ``case_id`` in ``outputs``, or None."""
    for suffix in OUTPUT_SUFFIXES:
        path = Path(outputs) / f"{case_id}{suffix}"
        if path.is_file():
            return path
    return None


class RecordedOutputs(Backend):
    """The "backend" of a judge: it runs nothing; it only declares the precision the port computed in."""

    name = "recorded-outputs"
    version = "-"
    device = "files"

    def __init__(self, outputs: str | Path, precision: PrecisionPolicy) -> None:
        self.outputs = Path(outputs)
        self.precision = precision

    def from_numpy(self, array, dtype=None):
        return array

    def to_numpy(self, array):
        return np.asarray(array)


class OutputsJudge(Runner):
    """A runner whose backend call reads ``<outputs>/<case id>.safetensors|.npz``."""

    backend: RecordedOutputs

    def reproducer(self, case_id: str) -> str:
        return f"rerun your program on case {case_id}, then judge it with -k '^{case_id}$'"

    def _execute(self, case: Case, notes: dict | None = None) -> list[Comparison]:
        path = output_path(self.backend.outputs, case.id)
        if path is None:
            raise Unsupported(f"no output file {case.id}.safetensors or .npz", "operation")
        try:
            if path.suffix == ".npz":
                tensors = read_npz(path)
            else:
                tensors = read_safetensors(path)[0]
        except SafetensorsError as exc:
            raise _CaseFailure("exception", f"unreadable output file: {exc}") from None
        raw = []
        for name in case.expected:
            for key in (f"outputs.{name}", name):
                if key in tensors:
                    raw.append(tensors[key])
                    break
            else:
                raise _CaseFailure(
                    "shape", f"{path.name} has no tensor 'outputs.{name}' (keys: {sorted(tensors)})"
                )
        outputs = self._outputs(case, raw if len(raw) > 1 else raw[0])
        policy = self.backend.precision
        comparisons = check_case(case, outputs, policy)
        if notes is not None and not all(c.passed for c in comparisons):
            self._note_failure(case, outputs, comparisons, policy, notes)
        return comparisons
