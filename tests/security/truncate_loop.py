"""The tenant of review findings #3 (2026-12) and #2 (2026-12-04): truncates a claim's ledger and
writes it back, as fast as it can, for as long as the reader under test runs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def truncate_until_exit(path: Path, good: bytes, reader: subprocess.Popen[str]) -> int:
    """Flip `path` between a header page, nothing and `good` until `reader` exits; the flips done."""
    flips = 0
    with path.open("r+b") as f:
        while reader.poll() is None:
            f.truncate(4096)
            f.truncate(0)
            f.seek(0)
            f.write(good)
            f.flush()
            flips += 1
    return flips
