"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys

import numpy as np

from ..config import LAYOUTS, RopeConfig

__all__ = [
    "parse_positions",
    "add_config_arguments",
    "config_from_args",
    "read_json_config",
    "MAX_POSITIONS",
    "MAX_CONFIG_BYTES",
]

#: Most positions one spec may expand to (a typo like '0:100000000' should fail fast, not hang).
MAX_POSITIONS = 1_000_000


def parse_positions(spec: str) -> np.ndarray:
    """Parse ``"0,1,2"``, ``"0:8"`` (range, end excluded), ``"0:100:10"`` or mixes like ``"0:4,255,256"``.

    Values may be negative or fractional (``"0.5,1.5"``). Raises ``ValueError`` naming the bad token.
    """
    values: list[float] = []
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"positions must be a non-empty spec like '0,1,2' or '0:8', got {spec!r}")
    for token in spec.split(","):
        token = token.strip()
        try:
            if ":" in token:
                parts = [float(p) for p in token.split(":")]
                if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] == 0):
                    raise ValueError
                step = parts[2] if len(parts) == 3 else 1.0
                count = max(0, int(np.ceil((parts[1] - parts[0]) / step)))
                if len(values) + count > MAX_POSITIONS:
                    raise OverflowError
                values.extend(np.arange(*parts).tolist())
            else:
                values.append(float(token))
        except OverflowError:
            raise ValueError(f"positions: {spec!r} expands to more than {MAX_POSITIONS} values") from None
        except ValueError:
            raise ValueError(
                f"positions: cannot parse {token!r} (use '0,1,2', 'a:b' or 'a:b:step')"
            ) from None
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"positions must be finite, got {spec!r}")
    return arr.astype(np.int64) if np.all(arr == np.round(arr)) else arr


#: Largest ``--hf-config`` file read (a real config.json is a few kB).
MAX_CONFIG_BYTES = 16 * 2**20
_MAX_DEPTH = 64


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of the float64 range (max {sys.float_info.max:.4g})")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number (NaN and Infinity are not allowed)")


def _check_json(obj: object, where: str) -> None:
    """Refuse deep nesting and integers no float can hold, naming the key (iteratively)."""
    stack: list[tuple[object, str, int]] = [(obj, "", 0)]
    while stack:
        item, key, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise ValueError(f"{where}: JSON nested deeper than {_MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, str(k), depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, key, depth + 1) for v in item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > sys.float_info.max:
            raise ValueError(
                f"{where}: {key or 'a value'} is a {len(str(abs(item)))}-digit integer, beyond the float64 "
                f"range (max {sys.float_info.max:.4g})"
            )


def read_json_config(path: str, argument: str = "--hf-config") -> dict:
    """Read a config.json for ``argument``: a regular file of at most 16 MiB holding a JSON object.

    Bad UTF-8/JSON, NaN/Infinity, numbers beyond float64 and nesting deeper than 64 levels raise
    ``ValueError`` naming the argument and the file.
    """
    where = f"{argument} {path}"
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where}: not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"{where}: {st.st_size} bytes, more than the limit of {MAX_CONFIG_BYTES}")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        config = json.loads(raw.decode("utf-8"), parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested deeper than {_MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    _check_json(config, where)
    if not isinstance(config, dict):
        raise ValueError(f"{where}: must hold a JSON object, got {type(config).__name__}")
    return config


def add_config_arguments(parser: argparse.ArgumentParser, *, layout_required: bool = True) -> None:
    parser.add_argument("--head-dim", type=int, required=True, help="head dimension (even)")
    parser.add_argument("--layout", choices=LAYOUTS, required=layout_required, help="channel pairing")
    parser.add_argument("--rotary-dim", type=int, default=None, help="rotated channels (default: head dim)")
    parser.add_argument("--base", type=float, default=10000.0, help="RoPE base theta (default 10000)")


def config_from_args(args: argparse.Namespace, scaling=None) -> RopeConfig:
    return RopeConfig(
        args.head_dim,
        layout=args.layout or "half",
        rotary_dim=args.rotary_dim,
        base=args.base,
        scaling=scaling,
    )
