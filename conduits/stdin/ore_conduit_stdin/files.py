"""`/attach PATH [TEXT]` at the chat prompt: upload a file and send it with the text.

The file is stored once in ore's files bucket (`ConduitClient.upload`) and the message
carries its reference (docs/protocol.md, "Files"). A file that cannot be sent (missing,
unreadable, over `files.max_size`, a type `files.allowed_types` does not allow) is one
line on the terminal; the text typed with it still goes.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ore_core.errors import OreError
from ore_core.events import NoticeEvent, Severity
from ore_core.files.store import save_file

if TYPE_CHECKING:
    from ore_core.artifacts import Attachment
    from ore_core.conduit import ConduitClient

__all__ = ["ATTACH", "attach", "received_file"]

ATTACH = "/attach"


async def attach(
    client: ConduitClient, line: str, err: Console
) -> tuple[str, tuple[Attachment, ...]]:
    """The text to send and the uploaded file of an `/attach PATH [TEXT]` line."""
    parsed = _parse(line)
    if isinstance(parsed, str):
        err.print(Text(parsed, style="red"))
        return "", ()
    path, text = parsed
    try:
        attachment = await client.upload(path)
    except (OSError, OreError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        suffix = "; the text was sent without it" if text else ""
        err.print(Text(f"{ATTACH}: {path}: {reason}{suffix}", style="red"))
        return text, ()
    err.print(Text(f"attached {attachment.describe()}", style="dim"))
    return text, (attachment,)


def _parse(line: str) -> tuple[Path, str] | str:
    """(path, text) of the line, or what is wrong with it."""
    try:
        words = shlex.split(line[len(ATTACH) :])
    except ValueError as exc:
        return f"{ATTACH}: {exc}; use {ATTACH} PATH [TEXT]"
    if not words:
        return f"usage: {ATTACH} PATH [TEXT]"
    return Path(words[0]).expanduser(), " ".join(words[1:])


async def received_file(
    client: ConduitClient, thread_id: str, attachment: Attachment, directory: Path | None
) -> NoticeEvent:
    """Save a file another endpoint sent into `directory`; the line that says where (or
    why not: it is gone, or the transfer failed)."""
    named = f"file {attachment.describe()}"
    if directory is None:
        return NoticeEvent(content=named, severity=Severity.INFO)
    try:
        data = await client.fetch(thread_id, attachment)
        path = await save_file(directory, attachment.name, data)
    except (OSError, OreError) as exc:
        return NoticeEvent(content=f"{named} could not be saved: {exc}", severity=Severity.WARN)
    return NoticeEvent(content=f"{named} saved to {path}", severity=Severity.INFO)
