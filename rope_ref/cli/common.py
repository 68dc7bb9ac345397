"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import numpy as np

from ..hf_config import MAX_CONFIG_BYTES, read_config_file

__all__ = [
    "parse_positions",
    "read_json_config",
    "MAX_POSITIONS",
    "MAX_CONFIG_BYTES",
]

#: Most positions one spec may expand to (a typo like '0:100000000' should fail fast, not hang).
MAX_POSITIONS = 1_000_000


def parse_positions(spec: str) -> np.ndarray:
    """Parse ``"0,1,2"``, ``"0:8"`` (range, end excluded), ``"0:100:10"`` or mixes like ``"0:4,255,256"``.

    Values may be negative or fractional (``"0.5,1.5"``). Raises ``ValueError`` naming the bad token,
    or the spec when it expands to no values or to more than :data:`MAX_POSITIONS` in all.
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
                if len(values) + 1 > MAX_POSITIONS:
                    raise OverflowError
                values.append(float(token))
        except OverflowError:
            raise ValueError(f"positions: {spec!r} expands to more than {MAX_POSITIONS} values") from None
        except ValueError:
            raise ValueError(
                f"positions: cannot parse {token!r} (use '0,1,2', 'a:b' or 'a:b:step')"
            ) from None
    if not values:
        raise ValueError(f"positions: {spec!r} expands to no values (an empty range such as '5:0')")
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"positions must be finite, got {spec!r}")
    return arr.astype(np.int64) if np.all(arr == np.round(arr)) else arr


def read_json_config(path: str, argument: str = "--hf-config") -> dict:
    """Read a config.json for ``argument``: a regular file of at most 16 MiB holding a JSON object.

    Bad UTF-8/JSON, NaN/Infinity, numbers beyond float64 and nesting deeper than 64 levels raise
    ``ValueError`` naming the argument and the file (:func:`rope_ref.hf_config.read_config_file`).
    """
    return read_config_file(path, argument)
