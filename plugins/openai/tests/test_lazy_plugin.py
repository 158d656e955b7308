"""Loading the plugin does not import the OpenAI SDK (issue 28, item 13: `ore --help`
took a second more because every plugin's dependencies were imported)."""

from __future__ import annotations

import os
import subprocess
import sys

HELP_THEN_LIST_SDK_MODULES = """
import sys
from click.testing import CliRunner
from ore_core.cli.main import main
result = CliRunner().invoke(main, ["--help"])
assert result.exit_code == 0, result.output
print(sorted(name for name in sys.modules if name == "openai" or name.startswith("openai.")))
"""


def test_ore_help_with_the_openai_plugin_loaded_does_not_import_the_sdk() -> None:
    result = subprocess.run(
        [sys.executable, "-c", HELP_THEN_LIST_SDK_MODULES],
        env={**os.environ, "ORE_LOAD_PLUGINS": "ore-openai"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_the_package_still_offers_its_names() -> None:
    import ore_openai

    assert ore_openai.OpenAIProcessor.__name__ == "OpenAIProcessor"
    assert set(ore_openai.__all__) <= set(dir(ore_openai))
