"""What importing loads: the helper of the import-budget tests (surface and layers)."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(statement: str) -> list[str]:
    """The `ore_core` modules a fresh interpreter has loaded after running `statement`."""
    script = (
        f"import sys, json\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ore_core')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(done.stdout))
