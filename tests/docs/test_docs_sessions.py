"""The Python example in docs/sessions.md runs as written (docs must not drift)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import DOCS

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

DOC = DOCS / "sessions.md"


def test_the_sessions_quick_example_runs_and_prints_both_roles(tmp_path: Path) -> None:
    example = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(example)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "TextDelta(content='hello ')" in done.stdout
    assert "[<Role.USER: 'user'>, <Role.ASSISTANT: 'assistant'>]" in done.stdout
    assert (tmp_path / "chat.db").exists()
