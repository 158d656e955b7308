"""Media: the file of a Telegram message -> an image or text for the core, or a notice.

- A photo: the largest of its sizes whose `file_size` fits `max_image_bytes`, sent as a
  `data:image/jpeg;base64,` URL (the core makes it an `Image` artifact for the model).
- A document that is an image (JPEG, PNG, GIF, WebP) is sent the same way; a text
  document (UTF-8, a text type or a known suffix) up to `max_text_bytes` is sent as
  text after the caption. Anything else, anything too large and any download that
  fails is not read: the chat gets one notice saying what and why, and the caption
  still goes to the core.
- The file URL holds the bot token: it stays inside `BotApi.download`, whose errors
  are redacted; nothing here logs a URL or sends one to the core.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from ore_conduit_telegram.api import BotApi, FileError, FileTooLarge

__all__ = ["Media", "MediaReader", "file_kinds"]

log = structlog.get_logger("ore.conduit.telegram")

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
TEXT_SUFFIXES = (
    ".txt", ".md", ".markdown", ".json", ".csv", ".tsv", ".log", ".yaml", ".yml",
    ".toml", ".ini", ".xml", ".html", ".py", ".js", ".ts", ".go", ".rs", ".sh", ".sql",
)  # fmt: skip
_UNREAD = {
    "sticker": "a sticker",
    "voice": "a voice message",
    "audio": "an audio file",
    "video": "a video",
    "video_note": "a video message",
    "animation": "an animation",
}
FILE_KINDS = ("photo", "document", *_UNREAD)


def file_kinds(message: Mapping[str, Any]) -> dict[str, Any]:
    """The file parts of a Telegram message (`photo`, `document`, `sticker`, ...)."""
    return {kind: message[kind] for kind in FILE_KINDS if kind in message}


@dataclass(frozen=True, slots=True)
class Media:
    """What the conduit read from a message's file: images and text for the core, and
    the notice for the chat when something was not read."""

    images: tuple[str, ...] = ()
    text: str = ""
    notice: str = ""


def _size(size: int) -> str:
    """Bytes for people: `500 bytes`, `700 KB`, `1.5 MB`."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size // 1024} KB"
    return f"{size} bytes"


def _int(data: Mapping[str, Any], key: str) -> int:
    """`data[key]` as an int (0 when missing or not a number)."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _too_large(what: str, limit: int) -> str:
    return f"I did not read {what}: it is larger than {_size(limit)}."


class MediaReader:
    """Reads the file of one message (see the module docstring)."""

    def __init__(self, api: BotApi, *, max_image_bytes: int, max_text_bytes: int) -> None:
        self.api = api
        self.max_image_bytes = max_image_bytes
        self.max_text_bytes = max_text_bytes

    async def read(self, files: Mapping[str, Any]) -> Media:
        """Read `files` (from `file_kinds`); an empty Media when there are none."""
        if "photo" in files:
            return await self._photo(files["photo"])
        if "document" in files and isinstance(files["document"], Mapping):
            return await self._document(files["document"])
        kind = next(iter(files), None)
        if kind is None:
            return Media()
        return Media(notice=f"I cannot read {_UNREAD.get(kind, 'this file')}.")

    async def _photo(self, sizes: object) -> Media:
        options = [s for s in sizes if isinstance(s, Mapping)] if isinstance(sizes, list) else []
        options.sort(key=lambda s: (_int(s, "file_size"), _int(s, "width") * _int(s, "height")))
        fitting = [s for s in options if _int(s, "file_size") <= self.max_image_bytes]
        if not fitting:
            return Media(notice=_too_large("the photo", self.max_image_bytes))
        largest = fitting[-1]
        return await self._image(str(largest.get("file_id") or ""), "image/jpeg", "the photo")

    async def _document(self, document: Mapping[str, Any]) -> Media:
        name = str(document.get("file_name") or "the file")
        mime = str(document.get("mime_type") or "").lower()
        file_id = str(document.get("file_id") or "")
        size = _int(document, "file_size")
        if mime in IMAGE_TYPES:
            if size > self.max_image_bytes:
                return Media(notice=_too_large(name, self.max_image_bytes))
            return await self._image(file_id, mime, name)
        if mime.startswith("text/") or name.lower().endswith(TEXT_SUFFIXES):
            if size > self.max_text_bytes:
                return Media(notice=_too_large(name, self.max_text_bytes))
            return await self._text(file_id, name)
        kind = f" ({mime})" if mime else ""
        return Media(notice=f"I cannot read {name}{kind}: I read images and text files.")

    async def _image(self, file_id: str, mime: str, what: str) -> Media:
        data = await self._download(file_id, self.max_image_bytes, what)
        if isinstance(data, Media):
            return data
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return Media(images=(url,))

    async def _text(self, file_id: str, name: str) -> Media:
        data = await self._download(file_id, self.max_text_bytes, name)
        if isinstance(data, Media):
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return Media(notice=f"I did not read {name}: it is not UTF-8 text.")
        return Media(text=f"{name}:\n{text}")

    async def _download(self, file_id: str, limit: int, what: str) -> bytes | Media:
        try:
            return await self.api.download(file_id, limit)
        except FileTooLarge:
            return Media(notice=_too_large(what, limit))
        except FileError as exc:  # redacted by BotApi
            log.warning("a telegram file was not downloaded", error=str(exc))
            return Media(notice=f"I could not download {what} from Telegram; send it again.")
