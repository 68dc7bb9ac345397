"""What importing loads: code run in a fresh Python interpreter, where nothing is imported yet."""

from __future__ import annotations

import subprocess
import sys


def modules_loaded_by(code: str, names, timeout: float = 120) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after ``code`` ran in a fresh interpreter (``code`` must
    run without error)."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {tuple(names)!r} if m in sys.modules))"
    cmd = [sys.executable, "-c", probe]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout)
    return [m for m in out.stdout.strip().split(",") if m]
