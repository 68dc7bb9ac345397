"""Execute golden cases against a backend and record what happened, case by case.

The runner never stops on a misbehaving backend: an exception, a hang past the per-case timeout, a
wrong shape or dtype, NaN, or an input changed behind the caller's back are each recorded as a failure
of that case, and the run goes on. ``NotImplementedError`` marks a case *unsupported* (counted apart,
never a pass). Cases whose activations were quantised for another I/O dtype are *skipped*.
Cases run in the order given (the manifest order), on one backend instance, so that statefulness bugs
(dynamic NTK state leaking between calls) are visible; selecting a case with ``-k`` also runs the cases
it ``requires`` (earlier, in manifest order), so its reproducer line reproduces.

The per-case timeout runs the backend in a worker thread. A case whose call takes longer than the
timeout is recorded as a ``timeout`` failure whether or not the call eventually returned: a backend
that holds the GIL (a C extension or a busy loop that never releases it) cannot be interrupted
in-process, so the runner only regains control, and judges the case, once the call gives the GIL back.
A call that never returns while holding the GIL hangs the run; only a process-level timeout (for
example ``timeout 600 rope-ref conformance run ...``) stops it.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import shlex
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import kernel_shapes, multimodal
from .case import Case
from .diagnose import diagnose, exact_detail
from .golden_reading import GoldenCases
from .kernel_shapes import KERNEL_OPS
from .multimodal import MULTIMODAL_OPS
from .protocol import Backend, Unsupported
from .report import STATUSES, CaseResult, SuiteReport
from .tolerance import Comparison, check_case

__all__ = [
    "STATUSES",
    "CaseResult",
    "SuiteReport",
    "Runner",
    "load_xfails",
    "DEFAULT_TIMEOUT",
    "progress_printer",
    "select_cases",
]

_PROGRESS_CHAR = {
    "passed": ".",
    "failed": "F",
    "unsupported": "u",
    "skipped": "s",
    "xfailed": "x",
    "xpassed": "X",
}

#: Seconds one case may take before it is recorded as a hang.
DEFAULT_TIMEOUT = 60.0

# Which stored inputs are activations (converted with the backend's I/O dtype) per operation.
_ACTIVATIONS = {
    "apply": ("x",),
    "apply_vjp": ("x", "grad_out"),
    "chatglm_apply_2d": ("x",),
    "multiaxis_apply": ("x",),
    **kernel_shapes.ACTIVATIONS,
}
# Operations whose output is an activation in the backend's I/O dtype.
_IO_OUTPUT_OPS = ("apply", "apply_vjp", "chatglm_apply_2d", "multiaxis_apply", *KERNEL_OPS)


class _CaseFailure(Exception):
    """A recorded failure of one case (not a bug of the runner): ``kind`` says which check failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _NotDeclaredInPlace(Unsupported):
    """An in-place case of an operation the backend has but does not list in ``inplace_ops``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "operation")


# -- xfails ---------------------------------------------------------------------------------------------


def load_xfails(path: str | Path) -> dict[str, str]:
    """Read an xfail file: ``{case id or glob pattern: reason}``.

    Text format: one entry per line, ``CASE_ID_OR_GLOB  reason text``; blank lines and lines starting
    with ``#`` are ignored. A ``.json`` file holds an object mapping ids to reasons. Every entry needs a
    non-empty reason (``ValueError`` naming the file and line otherwise).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read xfail file {str(path)!r}: {exc.strerror or exc}") from None
    entries: dict[str, str] = {}
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"xfail file {str(path)!r} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"xfail file {str(path)!r} must hold a JSON object {{case id: reason}}")
        for key, reason in data.items():
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"xfail file {str(path)!r}: entry {key!r} needs a non-empty reason string")
            entries[key] = reason.strip()
        return entries
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[1].strip():
            raise ValueError(
                f"xfail file {str(path)!r} line {lineno}: entry {parts[0]!r} needs a reason after the id"
            )
        entries[parts[0]] = parts[1].strip()
    return entries


def select_cases(cases: Sequence[Case], select: str | None = None) -> list[Case]:
    """The cases whose id matches the regex ``select`` (all when ``None``), plus everything they
    ``require``, transitively, in the order of ``cases`` (prerequisites come earlier in a manifest)."""
    if select is None:
        return list(cases)
    try:
        pattern = re.compile(select)
    except re.error as exc:
        raise ValueError(f"-k {select!r} is not a valid regular expression: {exc}") from None
    by_id = {c.id: c for c in cases}
    wanted = {c.id for c in cases if pattern.search(c.id)}
    todo = list(wanted)
    while todo:
        for req in by_id[todo.pop()].requires:
            if req not in by_id:
                raise ValueError(f"a selected case requires {req!r}, which is not in this golden set")
            if req not in wanted:
                wanted.add(req)
                todo.append(req)
    return [c for c in cases if c.id in wanted]


def _xfail_reason(case_id: str, xfails: dict[str, str]) -> tuple[str, str] | None:
    if case_id in xfails:
        return case_id, xfails[case_id]
    for pattern, reason in xfails.items():
        if fnmatch.fnmatchcase(case_id, pattern):
            return pattern, reason
    return None


# -- the report -------------------------------------------------------------------------------------------


# -- running ---------------------------------------------------------------------------------------------


def _as_float_output(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f" or arr.dtype.name == "bfloat16":
        return arr.astype(np.float64)
    raise _CaseFailure("dtype", f"output {name!r} has dtype {arr.dtype}, expected a floating-point array")


def _fits(values: np.ndarray, dtype: str) -> bool:
    """True if every finite value is exactly representable in ``dtype``."""
    v = values[np.isfinite(values)]
    if dtype == "bfloat16":
        bits = v.astype(np.float32).view(np.uint32)
        return bool(np.all(bits & np.uint32(0xFFFF) == 0))
    return bool(np.all(v.astype(np.dtype(dtype)).astype(np.float64) == v))


class Runner:
    """Runs cases against one backend instance.

    ``spec`` / ``precision`` / ``golden`` are only used to write the one-line reproducer of a failure.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        spec: str | None = None,
        precision: str | None = None,
        golden: str | None = None,
    ) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be a rope_ref.conformance.Backend, got {type(backend).__name__}")
        if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
            raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
        self.backend = backend
        self.timeout = float(timeout)
        self.spec = spec or getattr(backend, "name", "?")
        self.precision = precision
        self.golden = golden
        #: ids of the cases this runner has executed (prerequisites already satisfied, in pytest mode).
        self.executed: set[str] = set()

    # -- one case ---------------------------------------------------------------------------------------
    def reproducer(self, case_id: str) -> str:
        cmd = ["rope-ref", "conformance", "run", "--backend", self.spec]
        if self.precision:
            cmd += ["--precision", self.precision]
        if self.golden:
            cmd += ["--golden", self.golden]
        cmd += ["-k", "^" + re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", case_id) + "$"]
        return " ".join(shlex.quote(c) for c in cmd)

    def applies(self, case: Case) -> bool:
        """A case with activation inputs runs only under the I/O dtype its inputs were quantised for."""
        return case.io_dtype is None or case.io_dtype == self.backend.precision.io_dtype

    def run_case(self, case: Case) -> CaseResult:
        result = CaseResult(case.id, case.op, case.bug_class, "passed", reproducer=self.reproducer(case.id))
        if not self.applies(case):
            result.status = "skipped"
            declared = self.backend.precision.io_dtype
            result.message = f"inputs quantised for io dtype {case.io_dtype}; backend declares {declared}"
            return result
        box: dict[str, Any] = {}
        self.executed.add(case.id)

        def work() -> None:
            try:
                box["value"] = self._execute(case, box)
            except BaseException as exc:  # noqa: BLE001 - every backend error becomes a recorded result
                box["error"] = exc
                box["trace"] = traceback.format_exc()

        start = time.perf_counter()
        worker = threading.Thread(target=work, name=f"rope-ref case {case.id}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        result.duration = time.perf_counter() - start
        if worker.is_alive():
            result.status, result.kind = "failed", "timeout"
            result.message = f"the backend did not return within the per-case timeout of {self.timeout:g}s"
            return result
        if result.duration > self.timeout:
            # The call returned, but late: it held the GIL, so join() could not give control back in time.
            result.status, result.kind = "failed", "timeout"
            result.message = (
                f"the backend took {result.duration:.3g}s, more than the per-case timeout of "
                f"{self.timeout:g}s (it held the GIL, so the call could not be interrupted in-process)"
            )
            return result
        error = box.get("error")
        if isinstance(error, NotImplementedError):
            result.status = "unsupported"
            result.message = f"{case.op} raised NotImplementedError" + (f": {error}" if str(error) else "")
            result.unsupported_reason = self._unsupported_reason(case.op, error)
        elif isinstance(error, _CaseFailure):
            result.status, result.kind, result.message = "failed", error.kind, str(error)
        elif error is not None:
            result.status, result.kind = "failed", "exception"
            result.message = (
                f"{case.op} raised {type(error).__name__}: {error}\n{box.get('trace', '')}".rstrip()
            )
        else:
            result.comparisons = box["value"]
            bad = [c for c in result.comparisons if not c.passed]
            result.borrowed = not bad and case.op in (getattr(self.backend, "oracle_tables", None) or ())
            if bad:
                result.diagnosis = box.get("diagnosis", "")
                result.detail = box.get("detail", "")
                result.status = "failed"
                nonfinite = any("non-finite" in c.note for c in bad)
                result.kind = "non-finite" if nonfinite else "mismatch"
                result.message = "\n".join(c.describe() for c in bad)
        return result

    def _unsupported_reason(self, op: str, error: NotImplementedError) -> str:
        """``Unsupported.reason``; else "operation" when the method is the protocol's own stub (or absent),
        "config" when the backend's own method raised."""
        if isinstance(error, _NotDeclaredInPlace):
            return "inplace"
        if isinstance(error, Unsupported):
            return error.reason
        return "operation" if self._stub(op) else "config"

    def _stub(self, op: str) -> bool:
        """True when the backend does not implement ``op`` (absent, or the protocol's own stub)."""
        mine = getattr(type(self.backend), op, None)
        return mine is None or mine is getattr(Backend, op, None)

    def _execute(self, case: Case, notes: dict | None = None) -> list[Comparison]:
        """Run one case and judge it; ``notes`` receives the ``diagnosis`` and ``detail`` of a failure."""
        if case.op in KERNEL_OPS:
            return self._execute_kernel_shape(case)
        b = self.backend
        io = b.precision.io_dtype
        activations = _ACTIVATIONS.get(case.op, ())
        originals = {k: np.array(v, copy=True) for k, v in case.inputs.items()}
        handed = {k: np.array(v, copy=True) for k, v in case.inputs.items()}
        # Activations take the backend's I/O dtype when the case was quantised for it; cases without an
        # I/O dtype (the fp16 emulation) hand their stored dtype through unchanged.
        act_dtype = io if case.io_dtype is not None else None
        converted = {k: b.from_numpy(v, act_dtype if k in activations else None) for k, v in handed.items()}
        snapshots = {k: np.array(b.to_numpy(v), copy=True) for k, v in converted.items()}
        raw = self._call(case, converted)
        outputs = self._outputs(case, raw)
        self._check_mutation(case, originals, handed, converted, snapshots, activations)
        policy = b.precision_for(case.op) if hasattr(b, "precision_for") else b.precision
        comparisons = check_case(case, outputs, policy)
        if notes is not None and not all(c.passed for c in comparisons):
            self._note_failure(case, outputs, comparisons, policy, notes)
        return comparisons

    @staticmethod
    def _note_failure(case: Case, outputs: dict, comparisons: list[Comparison], policy, notes: dict) -> None:
        """The common bug a failing output most resembles, and a readable worst element."""
        notes["diagnosis"] = diagnose(case, outputs, comparisons, policy)
        bad = [c for c in comparisons if not c.passed]
        notes["detail"] = exact_detail(case, outputs, max(bad, key=lambda c: c.ratio), policy)

    def _execute_kernel_shape(self, case: Case) -> list[Comparison]:
        """Issue 16 operations: views built by :func:`kernel_shapes.present`, in-place cases judged on the
        buffers the backend wrote, entries outside the views (and V of a packed qkv) checked bit for bit."""
        b = self.backend
        inplace = bool(case.params.get("inplace", False))
        if inplace and case.op not in (getattr(b, "inplace_ops", None) or ()):
            if self._stub(case.op):
                raise Unsupported("", "operation")  # reported as the out-of-place cases are
            raise _NotDeclaredInPlace(f"{case.op} in place: the backend does not list it in inplace_ops")
        originals = {k: np.array(v, copy=True) for k, v in case.inputs.items()}
        io = b.precision.io_dtype if case.io_dtype is not None else None
        presented = kernel_shapes.present(b, case, io)
        raw = kernel_shapes.call(b, case, presented)
        outputs = self._outputs(case, kernel_shapes.written(case, presented) if inplace else raw)
        problem = kernel_shapes.buffer_problem(b, presented, inplace)
        changed = [k for k, v in originals.items() if not np.array_equal(case.inputs[k], v)]  # finite inputs
        if problem is None and changed:
            problem = "changed the stored NumPy inputs it was converted from"
        if problem is not None:
            raise _CaseFailure("mutation", f"{case.op}: {problem}")
        problem = kernel_shapes.v_problem(case, outputs)
        if problem is not None:
            raise _CaseFailure("mismatch", f"{case.op}: {problem}")
        policy = b.precision_for(case.op) if hasattr(b, "precision_for") else b.precision
        return check_case(case, outputs, policy)

    def _call(self, case: Case, a: dict[str, Any]) -> Any:
        b, p = self.backend, case.params
        kw = {"seq_len": p["seq_len"]} if p.get("seq_len") is not None else {}
        op = case.op
        if op == "inv_freq":
            return b.inv_freq(case.rope_config(), **kw)
        if op == "attention_factor":
            return b.attention_factor(case.rope_config(), **kw)
        if op == "cos_sin":
            return b.cos_sin(a["positions"], case.rope_config(), **kw)
        if op == "apply":
            return b.apply(a["x"], a["positions"], case.rope_config(), **kw)
        if op == "apply_vjp":
            return b.apply_vjp(a["x"], a["positions"], case.rope_config(), a["grad_out"], **kw)
        if op == "chatglm_position_ids":
            return b.chatglm_position_ids(a["input_ids"], **p)
        if op == "chatglm_next_position_ids":
            if not hasattr(b, "chatglm_next_position_ids"):  # a backend class not derived from Backend
                raise Unsupported("chatglm_next_position_ids is not implemented", "operation")
            return b.chatglm_next_position_ids(a["input_ids"], **p)
        if op == "chatglm_apply_2d":
            return b.chatglm_apply_2d(a["x"], a["position_ids"], a["block_position_ids"], **p)
        if op == "decay_upper_bound":
            return b.decay_upper_bound(a["distances"], case.rope_config())
        if op in MULTIMODAL_OPS:
            return multimodal.call(b, op, a, p)
        raise ValueError(f"case {case.id!r}: unknown op {op!r}")

    def _outputs(self, case: Case, raw: Any) -> dict[str, np.ndarray]:
        names = list(case.expected)
        if len(names) > 1:
            if not isinstance(raw, (tuple, list)) or len(raw) != len(names):
                raise _CaseFailure(
                    "shape",
                    f"{case.op} returned {type(raw).__name__}, "
                    f"expected a tuple of {len(names)} ({', '.join(names)})",
                )
            items = list(zip(names, raw, strict=True))
        else:
            items = [(names[0], raw)]
        out = {}
        for name, value in items:
            arr = np.asarray(self.backend.to_numpy(value))
            expected = case.expected[name]
            if arr.shape != expected.shape:
                raise _CaseFailure(
                    "shape", f"output {name!r} has shape {arr.shape}, expected {expected.shape}"
                )
            if case.tolerance == "exact":
                if arr.dtype.kind not in "iu":
                    raise _CaseFailure(
                        "dtype", f"output {name!r} has dtype {arr.dtype}, expected an integer array"
                    )
                out[name] = arr.astype(np.float64)
                continue
            values = _as_float_output(name, arr)
            if case.op in _IO_OUTPUT_OPS and case.tolerance != "emulation":
                self._check_io_dtype(name, arr, values)
            out[name] = values
        return out

    def _check_io_dtype(self, name: str, arr: np.ndarray, values: np.ndarray) -> None:
        io = self.backend.precision.io_dtype
        ok_dtypes = {
            "float64": ("float64",),
            "float32": ("float32",),
            "float16": ("float16",),
            "bfloat16": ("bfloat16", "float32"),
        }[io]
        if arr.dtype.name not in ok_dtypes:
            raise _CaseFailure(
                "dtype", f"output {name!r} has dtype {arr.dtype.name}; the backend declares io dtype {io}"
            )
        if io == "bfloat16" and arr.dtype.name == "float32" and not _fits(values, "bfloat16"):
            raise _CaseFailure(
                "dtype",
                f"output {name!r} holds float32 values that bfloat16 cannot represent (declared io bfloat16)",
            )

    def _check_mutation(self, case, originals, handed, converted, snapshots, activations) -> None:
        """Inputs must be unchanged after the call (backend arrays: as they were right after conversion)."""
        inplace = bool(getattr(self.backend, "inplace", False))
        for k in originals:
            if inplace and k in activations:
                continue
            checks = (
                ("backend array", np.asarray(self.backend.to_numpy(converted[k])), snapshots[k]),
                ("NumPy array handed to from_numpy", handed[k], originals[k]),
            )
            for label, now, orig in checks:
                same = now.shape == orig.shape and np.array_equal(
                    now.astype(np.float64), orig.astype(np.float64), equal_nan=True
                )
                if not same:
                    raise _CaseFailure(
                        "mutation",
                        f"{case.op} changed its input {k!r} ({label}) "
                        "but the backend does not declare inplace=True",
                    )

    # -- a whole suite --------------------------------------------------------------------------------------
    def run(
        self,
        cases: Sequence[Case],
        *,
        select: str | None = None,
        xfails: dict[str, str] | None = None,
        progress: Callable[[int, int, CaseResult], None] | None = None,
    ) -> SuiteReport:
        """Run ``cases`` in order; ``select`` is a regex searched in each case id (``-k``).

        Cases a selected case ``requires`` run too, before it (:func:`select_cases`). A
        :class:`~.golden_reading.GoldenCases` is read case by case; a file found corrupt or over a limit
        when its case is reached raises :class:`~.golden_manifest.GoldenError` naming it.
        """
        chosen = select_cases(cases, select)
        xfails = dict(xfails or {})
        used: set[str] = set()
        warnings: list[str] = []
        results: list[CaseResult] = []
        start = time.perf_counter()
        # A golden set read case by case: each file is read when its case runs and released after.
        loaded = cases.stream(chosen) if isinstance(cases, GoldenCases) else chosen
        for i, case in enumerate(loaded, 1):
            result = self.run_case(case)
            match = _xfail_reason(case.id, xfails)
            if match is not None:
                key, reason = match
                used.add(key)
                result.xfail_reason = reason
                if result.status == "failed":
                    result.status = "xfailed"
                elif result.status == "passed":
                    result.status = "xpassed"
                    warnings.append(f"stale xfail: {case.id} passed (entry {key!r}: {reason})")
            results.append(result)
            if progress is not None:
                progress(i, len(chosen), result)
        for key in xfails:
            if key not in used:
                warnings.append(f"stale xfail: entry {key!r} matches no selected case")
        b = self.backend
        info = {
            "spec": self.spec,
            "name": str(b.name),
            "version": str(b.version),
            "device": str(b.device),
            "io_dtype": b.precision.io_dtype,
            "angle_dtype": b.precision.angle_dtype,
            "compute_dtype": b.precision.compute_dtype,
            "inplace": str(bool(getattr(b, "inplace", False))).lower(),
        }
        return SuiteReport(info, results, warnings, time.perf_counter() - start, self.golden or "shipped")


def progress_printer(stream) -> Callable[[int, int, CaseResult], None]:
    """A pytest-like progress line: one character per case, a percentage every 64 cases."""

    def show(i: int, n: int, result: CaseResult) -> None:
        stream.write(_PROGRESS_CHAR[result.status])
        if i % 64 == 0 or i == n:
            stream.write(f" [{i:>{len(str(n))}}/{n} {100 * i // max(n, 1):3d}%]\n")
        stream.flush()

    return show
