"""Assertions for tests of a RoPE implementation: the oracle's answer judged by the conformance tolerance.

``numpy.testing.assert_allclose(mine, rope_ref.apply(...), atol=...)`` needs a tolerance the user
has to guess: a correct float32 kernel is off by ~4e-4 at positions near 5000, so a guessed ``atol``
either fails correct code or hides real bugs. The functions here compute the oracle's answer and
judge every element with the conformance suite's position- and dtype-aware tolerance model
(:mod:`rope_ref.tolerance`, derived in ``docs/tolerance.md``): the same verdict
``rope-ref conformance run`` gives. On failure the message names the worst element, expected, got,
tolerance, err/tol, how many elements are out, and, where it can be told, the bug the output most
resembles (layout swapped, rotation direction reversed, positions quantised to bfloat16/float16,
partial rotary ignored, attention factor missing, a wrong base with the base it looks like, inv_freq
computed in float16/bfloat16, positions shifted by k, a cos/sin table too short read past its end, a
stale cache of a length-dependent scaling, the scaling ignored): the output is judged again against
the oracle's answer for each mutated computation, and one that passes names the bug
(:mod:`rope_ref.diagnoses`). A worst element that must be exact (a pass-through channel, position 0)
is shown after the worst rotated one, with a count. The checks never warn (``-W error`` safe).

Inputs may be NumPy arrays, Python sequences or other libraries' arrays (torch tensors on any device
and of any float dtype, CuPy, JAX, ...); they are moved to host memory by :mod:`rope_ref._interop`,
and torch is never imported here. The precision policy defaults to the output's dtype (angles in
float32 unless the output is float64); pass ``precision=`` or ``io_dtype`` / ``angle_dtype`` /
``compute_dtype`` to declare another.

In pytest, the ``rope_assert`` fixture (:mod:`rope_ref.testing_plugin`) is the same functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import tolerance
from ._arrays import as_float64, as_positions, to_numpy
from .axes import ambiguous_hf_ids, positions_for_axes, shape_mismatch_message
from .case import Case
from .config import RopeConfig
from .diagnoses import (
    base_label,
    bases_from_freqs,
    common_bug_candidates,
    cut_at,
    cut_text,
    exact_line,
    explain,
    nice_bases,
    table_bug_candidates,
)
from .frequencies import attention_factor as _attention_factor
from .frequencies import cos_sin, inv_freq, resolve_seq_len
from .precision import DTYPES as _DTYPES
from .precision import PrecisionPolicy
from .rotation import apply

__all__ = [
    "assert_rope_close",
    "assert_rope_vjp_close",
    "assert_cos_sin_close",
    "assert_inv_freq_close",
    "precision_policy",
]


def _dtype_name(obj: Any) -> str | None:
    """Canonical float dtype name of an array-like (``torch.bfloat16`` -> ``bfloat16``), or None."""
    dtype = getattr(obj, "dtype", None)
    if dtype is None:
        return None
    name = str(dtype).rsplit(".", 1)[-1]
    return name if name in _DTYPES else None


def precision_policy(
    precision: Any = None,
    *,
    io_dtype: str | None = None,
    angle_dtype: str | None = None,
    compute_dtype: str | None = None,
    like: tuple[Any, ...] = (),
):
    """The :class:`PrecisionPolicy` to judge by.

    ``precision``: a ``PrecisionPolicy``, a dtype name (``"float32"``, ``"bf16"``, ...: the I/O and
    compute dtype, angles in float32, or float64 for ``"float64"``), or ``None``: the narrowest float
    dtype among ``like`` (the output and input arrays). Explicit ``*_dtype`` arguments override.
    """
    if isinstance(precision, PrecisionPolicy):
        base = (precision.io_dtype, precision.angle_dtype, precision.compute_dtype)
    else:
        if precision is None:
            names = [n for n in (_dtype_name(a) for a in like) if n is not None]
            io = max(names, key=_DTYPES.index) if names else "float64"
        elif isinstance(precision, str):
            io = PrecisionPolicy(io_dtype=precision).io_dtype
        else:
            raise TypeError(
                f"precision must be None, a dtype name or a PrecisionPolicy, got {type(precision).__name__}"
            )
        base = (io, "float64" if io == "float64" else "float32", io)
    io, angle, compute = base
    return PrecisionPolicy(io_dtype or io, angle_dtype or angle, compute_dtype or compute)


def _policy_text(policy) -> str:
    return f"io={policy.io_dtype}, angles={policy.angle_dtype}, compute={policy.compute_dtype}"


def _check_cfg(cfg: Any) -> RopeConfig:
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return cfg


def _case(op: str, cfg: RopeConfig, inputs: dict, expected: dict, rule: str, seq_len: int | None):
    """A one-off conformance case whose ``rope_config()`` is ``cfg`` itself (no dict round trip)."""
    case = Case(
        id=f"rope_ref.testing.{op}",
        op=op,
        config={"head_dim": cfg.head_dim, "layout": cfg.layout},
        inputs=inputs,
        expected=expected,
        bug_class="",
        tolerance=rule,
        params={"seq_len": seq_len},
    )
    case.rope_config = lambda: cfg  # the instance attribute shadows the method
    return case


def _judge(case, name: str, got: np.ndarray, policy) -> list:
    return tolerance.compare_output(case, name, got, policy)


def _fail(
    title: str, comparisons: list, policy, context: list[str], diagnosis: str | None, judged: tuple = ()
) -> None:
    """Raise the failure message; ``judged`` = ``(case, name, got)`` of the element comparison, which
    lets a worst element that is an exact one be told apart (:func:`_exact_line`)."""
    __tracebackhide__ = True
    lines = [f"{title} (tolerance model of docs/tolerance.md, {_policy_text(policy)})"]
    for c in comparisons:
        if not c.passed:
            exact = judged and c.output == judged[1] and c.note.startswith("exact element")
            lines.append("  " + (exact_line(c, *judged, policy) if exact else c.describe()))
    if diagnosis:
        lines.append(f"  most resembles: {diagnosis}")
    lines += ["  " + c for c in context]
    raise AssertionError("\n".join(lines))


# -- positions ---------------------------------------------------------------------------------------


def _positions(positions: Any, axes: str | None, x_shape: tuple[int, ...]) -> np.ndarray:
    if axes is not None:
        return positions_for_axes(positions, axes, x_shape)
    pos = as_positions(positions)
    try:
        shape = np.broadcast_shapes(pos.shape, x_shape[:-1])
    except ValueError:
        shape = None
    if shape != tuple(x_shape[:-1]):
        raise ValueError(shape_mismatch_message(pos.shape, x_shape))
    return pos


def _quantised_positions(pos: np.ndarray) -> list[tuple[str, np.ndarray]]:
    out = []
    for dtype in ("bfloat16", "float16"):
        rounded = tolerance.round_to(pos, dtype)  # no overflow warning: float16 tops out at 65504
        if pos.size and not np.array_equal(rounded, pos) and np.all(np.isfinite(rounded)):
            out.append((f"positions quantised to {dtype} before the angle was computed", rounded))
    return out


# -- apply ---------------------------------------------------------------------------------------------


def _builder(v: np.ndarray, op: str, extra_inputs: dict, seq_len: int | None):
    """``build(cfg, pos, scale_rot=1, mut_seq_len=seq_len, values=None)``: a lazy mutated ``apply`` of
    ``v`` (x, or grad_out for the VJP, whose angle is -pos). ``cfg`` may be a callable (a mutation that
    may not validate); ``values``, a callable giving the mutated output where the oracle cannot."""
    sign = -1.0 if op == "apply_vjp" else 1.0
    key = "grad_out" if op == "apply_vjp" else "x"

    def build(
        mut_cfg: Any, mut_pos: np.ndarray, scale_rot: float = 1.0, mut_seq_len: Any = seq_len, values=None
    ):
        def make():
            cfg = mut_cfg() if callable(mut_cfg) else mut_cfg
            expected = apply(v, sign * mut_pos, cfg, seq_len=mut_seq_len) if values is None else values()
            if scale_rot != 1.0:
                expected[..., : cfg.rotary_dim] *= scale_rot
            inputs = dict(extra_inputs, positions=mut_pos)
            inputs[key] = v
            return _case(op, cfg, inputs, {"out": expected}, "rotation", mut_seq_len), "out"

        return make

    return build


def _rotation_candidates(
    v: np.ndarray,
    got: np.ndarray,
    pos: np.ndarray,
    cfg: RopeConfig,
    seq_len: int | None,
    op: str,
    extra_inputs: dict,
    cut: float | None = None,
) -> list[tuple[str, Callable[[], tuple[Any, str]]]]:
    """Mutated computations of ``apply`` of ``v`` (x, or grad_out for the VJP, whose angle is -pos)."""
    build = _builder(v, op, extra_inputs, seq_len)

    other = "interleaved" if cfg.layout == "half" else "half"
    out = [
        (
            f"layout swapped ({other} pairs where the config says {cfg.layout})",
            build(cfg.replace(layout=other), pos),
        ),
        ("rotation direction reversed (angle sign flipped: sin negated)", build(cfg, -pos)),
    ]
    if op == "apply_vjp":
        out[1] = (
            "forward rotation used in the backward pass (the VJP must rotate by -angle)",
            build(cfg, -pos),
        )
    out += [(label, build(cfg, q)) for label, q in _quantised_positions(pos)]
    if cfg.rotary_dim < cfg.head_dim:
        try:
            full = cfg.replace(rotary_dim=cfg.head_dim)
        except ValueError:
            full = None
        if full is not None:
            out.append(
                (
                    f"partial rotary ignored (all {cfg.head_dim} channels rotated, not {cfg.rotary_dim})",
                    build(full, pos),
                )
            )
    factor = _attention_factor(cfg, seq_len)
    if factor != 1.0:
        out.append(
            (
                f"attention factor missing (cos and sin not multiplied by {factor:.9g})",
                build(cfg, pos, 1 / factor),
            )
        )
    return out + common_bug_candidates(
        v, got, pos, cfg, seq_len, build, -1.0 if op == "apply_vjp" else 1.0, cut
    )


def _diagnose(comparisons, case, name, v, got, pos, seq_len, op: str, extra: dict, policy) -> str | None:
    """What a failing rotation most resembles (None when only the pair norm failed: no mutated rotation
    is told apart by a magnitude alone, and each would pass element by element)."""
    if comparisons[0].passed:
        return None
    cfg = case.rope_config()
    cut = cut_at(case, name, got, policy, pos)
    candidates = _rotation_candidates(v, got, pos, cfg, seq_len, op, extra, cut)
    return explain(got, policy, candidates, cut_text(cut))


def _context(
    cfg: RopeConfig, pos: np.ndarray, x_shape: tuple, axes: str | None, seq_len: int | None
) -> list[str]:
    where = f"x {tuple(x_shape)}" + (f" with axes={axes!r}" if axes else "")
    pos_text = (
        f"positions {pos.shape} in [{pos.min():g}, {pos.max():g}]" if pos.size else f"positions {pos.shape}"
    )
    line = f"{cfg!r}; {where}; {pos_text}"
    return [line + (f"; seq_len={seq_len}" if seq_len is not None else "")]


def _shape_check(got: np.ndarray, want: tuple, what: str) -> None:
    __tracebackhide__ = True
    if got.shape != tuple(want):
        raise AssertionError(f"{what} has shape {got.shape}, expected {tuple(want)}")


def assert_rope_close(
    actual: Any,
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    *,
    precision: Any = None,
    io_dtype: str | None = None,
    angle_dtype: str | None = None,
    compute_dtype: str | None = None,
    axes: str | None = None,
    seq_len: int | None = None,
) -> None:
    """Assert ``actual`` is RoPE of ``x`` at ``positions`` under ``cfg``, within the tolerance model.

    ``axes`` (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``, ...) names x's axes so HF-style ``(B, S)``
    ids or per-token ids can be passed as they are (:func:`rope_ref.axes.positions_for_axes`); without
    it, positions must broadcast against ``x.shape[:-1]``. ``seq_len`` is the length a
    length-dependent scaling sees (default ``max(positions) + 1``, HF's rule).
    """
    __tracebackhide__ = True
    cfg = _check_cfg(cfg)
    policy = precision_policy(
        precision, io_dtype=io_dtype, angle_dtype=angle_dtype, compute_dtype=compute_dtype, like=(actual, x)
    )
    xv = as_float64(x, "x")
    got = as_float64(actual, "actual")
    _shape_check(got, xv.shape, "actual")
    pos = _positions(positions, axes, xv.shape)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    expected = apply(xv, pos, cfg, seq_len=seq_len)
    case = _case("apply", cfg, {"x": xv, "positions": pos}, {"y": expected}, "rotation", seq_len)
    comparisons = _judge(case, "y", got, policy)
    if all(c.passed for c in comparisons):
        return
    context = _context(cfg, pos, xv.shape, axes, seq_len)
    if axes is None:
        warning = ambiguous_hf_ids(pos.shape, xv.shape)
        if warning:
            context.append("note: " + warning)
    diagnosis = _diagnose(comparisons, case, "y", xv, got, pos, seq_len, "apply", {}, policy)
    _fail(
        "RoPE output differs from rope_ref.apply", comparisons, policy, context, diagnosis, (case, "y", got)
    )


def assert_rope_vjp_close(
    actual_grad_x: Any,
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    grad_out: Any,
    *,
    precision: Any = None,
    io_dtype: str | None = None,
    angle_dtype: str | None = None,
    compute_dtype: str | None = None,
    axes: str | None = None,
    seq_len: int | None = None,
) -> None:
    """Assert ``actual_grad_x`` is the gradient of ``sum(apply(x) * grad_out)`` with respect to x.

    The Jacobian of the rotation is the (scaled) rotation matrix, so the VJP rotates ``grad_out`` by
    minus the angle (flash-attention's ``conjugate=True`` backward). Judged with the conformance
    ``apply_vjp`` tolerance; arguments as :func:`assert_rope_close`.
    """
    __tracebackhide__ = True
    cfg = _check_cfg(cfg)
    policy = precision_policy(
        precision,
        io_dtype=io_dtype,
        angle_dtype=angle_dtype,
        compute_dtype=compute_dtype,
        like=(actual_grad_x, grad_out),
    )
    xv = as_float64(x, "x")
    gv = as_float64(grad_out, "grad_out")
    got = as_float64(actual_grad_x, "actual_grad_x")
    _shape_check(gv, xv.shape, "grad_out")
    _shape_check(got, xv.shape, "actual_grad_x")
    pos = _positions(positions, axes, xv.shape)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    expected = apply(gv, -pos, cfg, seq_len=seq_len)
    inputs = {"x": xv, "grad_out": gv, "positions": pos}
    case = _case("apply_vjp", cfg, inputs, {"grad_x": expected}, "rotation", seq_len)
    comparisons = _judge(case, "grad_x", got, policy)
    if all(c.passed for c in comparisons):
        return
    diagnosis = _diagnose(comparisons, case, "grad_x", gv, got, pos, seq_len, "apply_vjp", {"x": xv}, policy)
    _fail(
        "RoPE gradient differs from the oracle's VJP (grad_out rotated by -angle)",
        comparisons,
        policy,
        _context(cfg, pos, xv.shape, axes, seq_len),
        diagnosis,
        (case, "grad_x", got),
    )


# -- tables --------------------------------------------------------------------------------------------


def _table_halves(
    table: np.ndarray, n: int, layout: str, name: str, want_lead: tuple
) -> list[tuple[str, np.ndarray]]:
    """Split a user's cos or sin table into the half-width tables it holds.

    Half width ``(..., n)`` is one table; full width ``(..., 2n)`` holds it twice, as ``[t, t]``
    (HF ``cat(freqs, freqs)``, half layout) or ``[t0, t0, t1, t1, ...]`` (interleaved,
    ``repeat_interleave``). Size-1 axes the user added for broadcasting (HF ``unsqueeze``) are dropped.
    """
    if table.shape[:-1] != want_lead:
        squeezed = [d for d in table.shape[:-1] if d != 1]
        if squeezed == [d for d in want_lead if d != 1]:
            table = table.reshape(want_lead + table.shape[-1:])
    if table.shape[:-1] != want_lead or table.shape[-1] not in (n, 2 * n):
        raise AssertionError(
            f"{name} has shape {table.shape}; expected {want_lead + (n,)} (half width) or "
            f"{want_lead + (2 * n,)} (duplicated, as HF's cat(freqs, freqs))"
        )
    if table.shape[-1] == n:
        return [(name, table)]
    if layout == "half":
        return [(f"{name}[..., :{n}]", table[..., :n]), (f"{name}[..., {n}:]", table[..., n:])]
    return [(f"{name}[..., 0::2]", table[..., 0::2]), (f"{name}[..., 1::2]", table[..., 1::2])]


def assert_cos_sin_close(
    cos: Any,
    sin: Any,
    positions: Any,
    cfg: RopeConfig,
    *,
    precision: Any = None,
    io_dtype: str | None = None,
    angle_dtype: str | None = None,
    compute_dtype: str | None = None,
    seq_len: int | None = None,
) -> None:
    """Assert a cos/sin table (attention factor included, HF semantics) matches the oracle's.

    Tables are ``positions.shape + (rotary_dim // 2,)``, or ``+ (rotary_dim,)`` duplicated in the
    layout's order (``[t, t]`` for half, ``[t0, t0, t1, t1, ...]`` for interleaved); size-1 axes from
    ``unsqueeze`` are accepted. Judged with the conformance ``trig`` rule.
    """
    __tracebackhide__ = True
    cfg = _check_cfg(cfg)
    policy = precision_policy(
        precision, io_dtype=io_dtype, angle_dtype=angle_dtype, compute_dtype=compute_dtype, like=(cos, sin)
    )
    pos = as_positions(positions)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    want_cos, want_sin = cos_sin(pos, cfg, seq_len=seq_len)
    comparisons = []
    for name, table, want in (("cos", cos, want_cos), ("sin", sin, want_sin)):
        got = as_float64(table, name)
        for label, part in _table_halves(got, cfg.n_pairs, cfg.layout, name, pos.shape):
            case = _case("cos_sin", cfg, {"positions": pos}, {label: want}, "trig", seq_len)
            comparisons += _judge(case, label, part, policy)
    if all(c.passed for c in comparisons):
        return
    got_sin = as_float64(sin, "sin")
    parts = _table_halves(got_sin, cfg.n_pairs, cfg.layout, "sin", pos.shape)
    cos_half = _table_halves(as_float64(cos, "cos"), cfg.n_pairs, cfg.layout, "cos", pos.shape)[0][1]
    build = _sin_builder(parts[0][0], seq_len)
    candidates = [(label, build(cfg, q)) for label, q in _quantised_positions(pos)]
    candidates.append(("rotation direction reversed (sin negated)", build(cfg, -pos)))
    factor = _attention_factor(cfg, seq_len)
    if factor != 1.0:
        label = f"attention factor missing (not multiplied by {factor:.9g})"
        candidates.append((label, build(cfg, pos, 1 / factor)))
    candidates += table_bug_candidates(cos_half, parts[0][1], pos, cfg, seq_len, build)
    diagnosis = explain(parts[0][1], policy, candidates)
    _fail(
        "cos/sin table differs from rope_ref.cos_sin",
        comparisons,
        policy,
        _context_table(cfg, pos, seq_len),
        diagnosis,
    )


def _sin_builder(label: str, seq_len: int | None):
    """``build(cfg or a callable giving it, pos, scale=1, mut_seq_len=seq_len, values=None)``: a lazy
    mutated ``cos_sin`` case judged on its sin (``values``: a callable giving that sin table instead)."""

    def build(mut_cfg: Any, pos: np.ndarray, scale: float = 1.0, mut_seq_len: Any = seq_len, values=None):
        def make():
            cfg = mut_cfg() if callable(mut_cfg) else mut_cfg
            s = cos_sin(pos, cfg, seq_len=mut_seq_len)[1] if values is None else values()
            return _case("cos_sin", cfg, {"positions": pos}, {label: s * scale}, "trig", mut_seq_len), label

        return make

    return build


def _context_table(cfg: RopeConfig, pos: np.ndarray, seq_len: int | None) -> list[str]:
    text = f"{cfg!r}; positions {pos.shape}"
    if pos.size:
        text += f" in [{pos.min():g}, {pos.max():g}]"
    return [text + (f"; seq_len={seq_len}" if seq_len is not None else "")]


def assert_inv_freq_close(
    actual: Any,
    cfg: RopeConfig,
    *,
    attention_factor: float | None = None,
    precision: Any = None,
    angle_dtype: str | None = None,
    seq_len: int | None = None,
) -> None:
    """Assert inverse frequencies (and, if given, the attention factor) match the oracle's.

    Judged with the conformance ``table`` rule in the angle dtype (by default the array's own dtype,
    at most float32-precise: half-precision inverse frequencies never pass).
    """
    __tracebackhide__ = True
    cfg = _check_cfg(cfg)
    if precision is None:
        # Frequencies are angle-side values: no activation I/O, so no half-precision output floor.
        angle_dtype = angle_dtype or _dtype_name(actual) or "float64"
        wide = "float64" if angle_dtype == "float64" else "float32"
        precision = PrecisionPolicy(io_dtype=wide, angle_dtype=angle_dtype, compute_dtype=wide)
        angle_dtype = None
    policy = precision_policy(precision, angle_dtype=angle_dtype, like=(actual,))
    got = as_float64(actual, "inv_freq")
    want = inv_freq(cfg, seq_len)
    if got.shape != want.shape:
        raise AssertionError(
            f"inv_freq has shape {got.shape}, expected {want.shape} (rotary_dim // 2 = {cfg.n_pairs})"
        )
    case = _case("inv_freq", cfg, {}, {"inv_freq": want}, "table", seq_len)
    comparisons = _judge(case, "inv_freq", got, policy)
    if attention_factor is not None:
        a_got = np.asarray(to_numpy(attention_factor, "attention_factor"), dtype=np.float64).reshape(())
        a_want = np.array(_attention_factor(cfg, seq_len))
        a_case = _case("attention_factor", cfg, {}, {"attention_factor": a_want}, "table", seq_len)
        comparisons += _judge(a_case, "attention_factor", a_got, policy)
    if all(c.passed for c in comparisons):
        return
    diagnosis = None
    if got.size > 1:
        candidates = [
            (
                "frequencies in reverse order",
                lambda: (_case("inv_freq", cfg, {}, {"r": want[::-1]}, "table", seq_len), "r"),
            ),
            (
                "frequencies of the full head where the config rotates part of it",
                lambda: (_full_width_case(cfg, seq_len), "f"),
            ),
        ]
        candidates += _inv_freq_candidates(got, want, cfg, seq_len)
        diagnosis = explain(got, policy, candidates)
    _fail("inverse frequencies differ from rope_ref.inv_freq", comparisons, policy, [repr(cfg)], diagnosis)


def _inv_freq_candidates(got: np.ndarray, want: np.ndarray, cfg: RopeConfig, seq_len: int | None) -> list:
    """A wrong base (fitted to ``got``) and frequencies rounded to float16/bfloat16."""

    def table(values=None, base=None):
        def make():
            v = values if base is None else inv_freq(cfg.replace(base=base), seq_len)
            return _case("inv_freq", cfg, {}, {"m": v}, "table", seq_len), "m"

        return make

    with np.errstate(all="ignore"):
        try:
            found = bases_from_freqs(got, cfg, seq_len)
        except (ValueError, ArithmeticError):
            found = []
    out = [(base_label(b, cfg), table(base=b)) for b in nice_bases(found, cfg)]
    for dtype in ("float16", "bfloat16"):
        rounded = tolerance.round_to(want, dtype)
        out.append((f"inv_freq computed in {dtype} (rounded to {dtype})", table(values=rounded)))
    return out


def _full_width_case(cfg: RopeConfig, seq_len: int | None):
    if cfg.rotary_dim == cfg.head_dim:
        raise ValueError("not partial")
    full = inv_freq(cfg.replace(rotary_dim=cfg.head_dim), seq_len)[: cfg.n_pairs]
    return _case("inv_freq", cfg, {}, {"f": full}, "table", seq_len)
