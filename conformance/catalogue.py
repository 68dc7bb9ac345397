"""The golden case catalogue under its original name: a re-export of :mod:`conformance.cases`, where every
case family has its own module (``docs/catalogue.md``)."""

from __future__ import annotations

from .cases import build_catalogue
from .cases.bug_classes import BUG_CLASSES
from .cases.common import (
    AUX_OPS,
    DTYPE_SHORT,
    IO_DTYPES,
    activation_cases,
    case_axes,
    config_dict,
    make_config,
    quantize,
    table_cases,
)
from .cases.covering import (
    COVER_LAYOUTS,
    COVER_OPS,
    COVER_PARTIAL,
    COVER_POSITIONS,
    COVER_REGIMES,
    COVER_SCALINGS,
    covering_rows,
    pairwise_gaps,
)
from .cases.custom import CUSTOM_OPS, custom_cases, revealing_positions
from .cases.operations import auxiliary, evaluate
from .cases.scaling import _longrope_dict

__all__ = [
    "BUG_CLASSES",
    "IO_DTYPES",
    "DTYPE_SHORT",
    "build_catalogue",
    "evaluate",
    "auxiliary",
    "AUX_OPS",
    "quantize",
    "make_config",
    "activation_cases",
    "table_cases",
    "config_dict",
    "custom_cases",
    "CUSTOM_OPS",
    "revealing_positions",
    "covering_rows",
    "pairwise_gaps",
    # also re-exported (tests and older callers read them here)
    "case_axes",
    "COVER_LAYOUTS",
    "COVER_OPS",
    "COVER_PARTIAL",
    "COVER_POSITIONS",
    "COVER_REGIMES",
    "COVER_SCALINGS",
    "_longrope_dict",
]
