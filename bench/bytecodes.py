"""Runs `ore` (its CLI, e.g. `serve --nats URL`) counting the Python bytecodes every
function executes, on every thread, and writes the counts to OUT (JSON) at exit.

Usage: `python bench/bytecodes.py OUT ore-arguments...`, or `python bench/bytecodes.py OUT
--script [PYTHON] SCRIPT arguments...` for a Python script instead (the raw and floor
workers of bench/hotpath.py); `bench/hotpath.py --bytecodes` runs it twice and prints
where a turn's bytecodes go. Tracing slows the process about tenfold (the hot path's own
share is what the counts are for, not the time).
"""

from __future__ import annotations

import json
import runpy
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
    out, arguments = sys.argv[1], sys.argv[2:]
    if arguments[:1] == ["--script"]:
        arguments = arguments[1:]
        if Path(arguments[0]).name.startswith("python"):
            arguments = arguments[1:]  # a command line made to run the script itself
        sys.argv = arguments
        sys.path.insert(0, str(Path(arguments[0]).resolve().parent))

        def run() -> None:
            runpy.run_path(arguments[0], run_name="__main__")
    else:
        sys.argv = ["ore", *arguments]
        from ore_core.cli import main as run  # click: exits with the command's code

    threading.settrace(_trace)
    sys.settrace(_trace)
    try:
        run()
    finally:
        sys.settrace(None)
        Path(out).write_text(json.dumps(counts))


if __name__ == "__main__":
    main()
