"""What the model sees of a message's files: images as image parts, text files as text,
anything else as one line naming it.

The bytes come from the core's file reader (`ore_core.files.current_reader`): an image
becomes a `data:` URL image part, a text-like file up to `max_text_file_bytes` its text
(with its name, in a fenced block), and every other file (or one too large, or one
that cannot be read) a short description, so the model knows it was sent. Parts are
made before the request is built (reading is async, building is not) and kept for the
next model calls of the thread (a tool loop rebuilds the request every call).
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ore_core import Turn
from ore_core.artifacts import Attachment
from ore_core.files import FileReader, current_reader

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionContentPartParam

__all__ = ["FileParts", "describe", "is_text_like"]

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
    }
)
_KEPT = 64  # parts kept between model calls


def is_text_like(media_type: str) -> bool:
    """Text a model reads as it is: `text/*`, JSON, XML, YAML, `+json`/`+xml` types."""
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def describe(attachment: Attachment, why: str = "") -> ChatCompletionContentPartParam:
    """The one-line part of a file the model is not shown."""
    note = f"; {why}" if why else ""
    return {"type": "text", "text": f"[file: {attachment.describe()}{note}]"}


class FileParts:
    """The content part of each attachment, read once and kept (bounded)."""

    def __init__(self, max_text_bytes: int, max_image_bytes: int) -> None:
        self.max_text_bytes = max_text_bytes
        self.max_image_bytes = max_image_bytes
        self._parts: OrderedDict[str, ChatCompletionContentPartParam] = OrderedDict()

    async def of(
        self, turns: Iterable[Turn], reader: FileReader | None = None
    ) -> dict[str, ChatCompletionContentPartParam]:
        """The parts of every attachment of `turns`, by sha256."""
        reader = reader or current_reader()
        wanted = {
            a.sha256: a for turn in turns for a in turn.artifacts if isinstance(a, Attachment)
        }
        for sha256, attachment in wanted.items():
            if sha256 not in self._parts:
                self._parts[sha256] = await self._part(attachment, reader)
                while len(self._parts) > _KEPT:
                    self._parts.popitem(last=False)
        return {sha256: self._parts[sha256] for sha256 in wanted if sha256 in self._parts}

    async def _part(
        self, attachment: Attachment, reader: FileReader | None
    ) -> ChatCompletionContentPartParam:
        image = attachment.media_type.startswith("image/")
        limit = self.max_image_bytes if image else self.max_text_bytes
        if not image and not is_text_like(attachment.media_type):
            return describe(attachment)
        if attachment.size > limit:
            return describe(attachment, f"over the {limit} bytes shown to the model")
        if reader is None:
            return describe(attachment, "not readable here")
        try:
            data = await reader.fetch(attachment)
        except Exception as exc:  # missing, corrupt, the bus away: the message still goes
            return describe(attachment, f"could not be read: {exc}")
        if image:
            url = f"data:{attachment.media_type};base64,{base64.b64encode(data).decode()}"
            return {"type": "image_url", "image_url": {"url": url}}
        text = data.decode("utf-8", errors="replace")
        return {"type": "text", "text": f"File {attachment.name}:\n```\n{text}\n```"}
