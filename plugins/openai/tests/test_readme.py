"""The README's example settings say the defaults the plugin really has (issue 41)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from ore_openai.config import OpenAIConfig

README = Path(__file__).parents[1] / "README.md"


def test_every_value_the_readme_calls_default_is_the_real_default() -> None:
    block = README.read_text(encoding="utf-8").split("```toml\n", 1)[1].split("```", 1)[0]
    claimed = {
        key: tomllib.loads(f"v = {value}")["v"]
        for key, value in re.findall(r"^#? ?(\w+) = (\S+) +# default\b", block, re.MULTILINE)
    }
    assert claimed  # the README marks some
    defaults = OpenAIConfig()
    assert {key: getattr(defaults, key) for key in claimed} == claimed
