"""Regenerate the shipped golden set under restricted and full CPU features; both must equal it byte for byte.

Run by ``.ci/run`` (issue "same bits on every machine"): once with ``NPY_DISABLE_CPU_FEATURES`` naming every
feature this machine has above NumPy's baseline, once with all of them. Prints the sha256 of the manifest
and the number of files compared; exits 1 naming the first differing file.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "conformance" / "golden"
CLI = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"


def digests(directory: pathlib.Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def above_baseline() -> list[str]:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


def main() -> int:
    shipped = digests(SHIPPED)
    restricted = " ".join(above_baseline())
    for label, extra in (
        ("baseline CPU features", {"NPY_DISABLE_CPU_FEATURES": restricted}),
        ("all CPU features", {}),
    ):
        env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
        env.update(extra)
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "golden"
            subprocess.run(
                [sys.executable, "-c", CLI, "golden", "generate", "--out", str(out)],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            got = digests(out)
        if got != shipped:
            bad = sorted(n for n in set(got) | set(shipped) if got.get(n) != shipped.get(n))
            print(f"golden bits: {label} ({extra or 'unset'}): {len(bad)} files differ, first {bad[0]}")
            return 1
        print(
            f"golden bits: {label} ({restricted if extra else 'none disabled'}): {len(got)} files equal "
            f"the shipped set, manifest sha256 {got['manifest.json'][:16]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
