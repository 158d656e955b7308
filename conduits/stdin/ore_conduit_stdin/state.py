"""What the terminal chat remembers between runs: the thread it used last, its history."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ore_core import InvalidThreadId
from ore_core.ids import validate_thread_id

__all__ = ["LastThread", "history_file"]


def history_file(state_dir: Path) -> Path:
    """The prompt's history file in `state_dir` (the directory is created)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return state_dir / "history"


class LastThread:
    """The id of the thread an interactive chat used last, in one small file.

    A missing, unreadable or invalid file means "none": the chat then starts a new
    thread instead of failing.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "last-thread"

    def load(self) -> str | None:
        """The remembered thread id, or None."""
        try:
            return validate_thread_id(self.path.read_text(encoding="utf-8").strip())
        except (OSError, InvalidThreadId):
            return None

    def save(self, thread_id: str) -> None:
        """Remember `thread_id` (written atomically: two chats never leave half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".last-thread-")
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(thread_id + "\n")
        os.replace(temporary, self.path)
