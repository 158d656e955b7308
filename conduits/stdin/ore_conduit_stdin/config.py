"""Settings of the stdin conduit: the `[plugins.stdin]` table, or `ore chat`'s options."""

from __future__ import annotations

import getpass
from pathlib import Path

import platformdirs
from pydantic import Field, field_validator

from ore_core import InvalidThreadId
from ore_core.conduit import ConduitConfig
from ore_core.ids import validate_thread_id

__all__ = ["StdinConfig", "default_state_dir", "default_user"]


def default_state_dir() -> Path:
    """Where the conduit keeps its prompt history and the last thread it used."""
    return Path(platformdirs.user_state_dir("ore")) / "stdin"


def default_user() -> str:
    """The login name, sent as the platform user of every message (empty if unknown)."""
    try:
        return getpass.getuser()
    except OSError:  # no login name in a bare container
        return ""


class StdinConfig(ConduitConfig):
    """How the terminal chat starts and renders.

    `thread` continues that thread (any unique prefix of its id); an unknown id is an
    error unless `new` is set too, which then starts a thread with that id. `new` alone
    starts a fresh thread. Without either, an interactive chat resumes the thread it
    used last and piped input gets a new thread; `resume` (`ore chat -c`) continues the
    thread used last in every mode (an error when there is none). `markdown` renders replies as
    Markdown on a terminal. `prompt` sends one message and exits (`ore chat "..."`);
    piped input is then added to it, so `cat notes.md | ore chat "summarise"` sends
    the prompt and the file as one message.
    """

    thread: str | None = None
    new: bool = False
    resume: bool = False
    prompt: str | None = None
    user: str = Field(default_factory=default_user)
    markdown: bool = True
    state_dir: Path = Field(default_factory=default_state_dir)

    @field_validator("thread")
    @classmethod
    def _check_thread(cls, thread: str | None) -> str | None:
        if thread is None:
            return None
        try:
            return validate_thread_id(thread)
        except InvalidThreadId as exc:
            raise ValueError(str(exc)) from None
