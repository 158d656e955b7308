"""The README's quick start, run as a user would: a fresh venv, its install line, `ore chat`.

The command is read from README.md, so the README cannot drift from what works. It
runs in a copy of the checkout (the line creates `.venv` where it runs). pip uses the
machine's package index as configured; `ore chat` gets its own home and state dirs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

CHECKOUT = Path(__file__).resolve().parents[3]
CHAT = " && ore chat"
INSTALL_TIMEOUT = 600.0
CHAT_TIMEOUT = 60.0
_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".tox", ".venv", "__pycache__", "*.egg-info", ".*_cache", "build", "dist"
)


def quick_start_commands() -> list[str]:
    """The commands of the README's "Quick start" section, one per fenced block."""
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in _FENCED.findall(section)]


def test_the_quick_start_has_exactly_two_commands_install_and_chat_then_tox() -> None:
    install, tests = quick_start_commands()
    assert install.endswith(CHAT)
    assert "\n" not in install
    assert tests == "python3 -m pip install tox && tox"


@pytest.mark.timeout(INSTALL_TIMEOUT + CHAT_TIMEOUT + 60)  # a pip install, not a unit test
def test_the_quick_start_install_line_gives_a_working_ore_chat(tmp_path: Path) -> None:
    install = quick_start_commands()[0].removesuffix(CHAT)
    checkout = tmp_path / "ore"
    shutil.copytree(CHECKOUT, checkout, ignore=_NOT_SOURCE)
    machine = {k: v for k, v in os.environ.items() if not k.startswith(("ORE_", "OPENAI_"))}
    machine.pop("VIRTUAL_ENV", None)  # a user's shell has no venv active yet
    installed = subprocess.run(
        ["bash", "-c", install],
        cwd=checkout,
        env=machine,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    home = tmp_path / "home"
    user = {
        **machine,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    chat = subprocess.run(
        ["bash", "-c", ". .venv/bin/activate" + CHAT],
        cwd=checkout,
        env=user,
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=CHAT_TIMEOUT,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "hello\n"
