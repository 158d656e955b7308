"""A disk that fails: what the store tests under disk faults share."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fill_disk(path: Path) -> Path:
    """Write zeros into a file below `path` until its file system is full; the file."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler
