"""Loading the stdin conduit's plugin does not import the terminal's libraries (issue
28, item 13: every `ore` command, `ore --help` too, imports the plugins)."""

from __future__ import annotations

import subprocess
import sys

LIST_TERMINAL_MODULES = """
import sys
import ore_conduit_stdin.plugin
print(sorted(name for name in sys.modules if name.split(".")[0] == "prompt_toolkit"))
"""


def test_loading_the_plugin_does_not_import_prompt_toolkit() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LIST_TERMINAL_MODULES],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"
