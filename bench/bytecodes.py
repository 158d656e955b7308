"""Runs `ore` (its CLI, e.g. `serve --nats URL`) counting the Python bytecodes every
function executes, on every thread, and writes the counts to OUT (JSON) at exit.

Usage: `python bench/bytecodes.py OUT ore-arguments...`; `bench/hotpath.py --bytecodes`
runs it twice and prints where a turn's bytecodes go. Tracing slows the process about
tenfold (the hot path's own share is what the counts are for, not the time).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

counts: Counter[str] = Counter()


_ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def _where(frame: FrameType) -> str:
    """`file:first line:function`, the file relative to the repository or site-packages."""
    code = frame.f_code
    name = code.co_filename.removeprefix(_ROOT).rpartition("site-packages/")[2]
    return f"{name}:{code.co_firstlineno}:{code.co_name}"


def _trace(frame: FrameType, event: str, arg: Any) -> Any:
    if event == "call":
        frame.f_trace_opcodes = True
    elif event == "opcode":
        counts[_where(frame)] += 1
    return _trace


def main() -> None:
    out, sys.argv = sys.argv[1], ["ore", *sys.argv[2:]]
    from ore_core.cli import main as ore_main

    threading.settrace(_trace)
    sys.settrace(_trace)
    try:
        ore_main()  # click: exits with the command's code
    finally:
        sys.settrace(None)
        Path(out).write_text(json.dumps(counts))


if __name__ == "__main__":
    main()
