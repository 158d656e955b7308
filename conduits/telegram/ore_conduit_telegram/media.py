"""Media: the file of a Telegram message, stored in ore's files bucket for the core.

- A photo (the largest of its sizes that may be taken), a document, a voice message, an
  audio file, a video, a video message or an animation is fetched from Telegram
  (`getFile`, then the file URL) and uploaded to ore (`ConduitClient.upload`, stored
  once by content): the message carries the reference (`Message.attachments`) and its
  caption is the text.
- Before any byte is fetched, the size Telegram states is checked against the
  operator's `[files]` policy (`files.max_size`, `files.allowed_types`) and the 20 MB
  Telegram lets a bot download; the bytes are checked again as they come. A file that
  is refused, too large, or fails to download or upload is one notice in the chat
  saying what and why; the caption still goes. A sticker is not taken (a notice).
- The file URL holds the bot token: it stays inside `BotApi.download`, whose errors
  are redacted; nothing here logs a URL or sends one to the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ore_conduit_telegram.api import BotApi, FileError, FileTooLarge
from ore_core.artifacts.attachment import human_size
from ore_core.files import FileCorrupt, FileRefused, guess_media_type

if TYPE_CHECKING:
    from ore_core.artifacts import Attachment
    from ore_core.conduit import ConduitClient

__all__ = ["DOWNLOAD_LIMIT", "Media", "MediaReader", "file_kinds"]

log = structlog.get_logger("ore.conduit.telegram")

DOWNLOAD_LIMIT = 20 * 1024 * 1024
"""The largest file the Bot API lets a bot download (`getFile`)."""

_DEFAULTS: dict[str, tuple[str, str]] = {
    "document": ("file", ""),
    "voice": ("voice.ogg", "audio/ogg"),
    "audio": ("audio.mp3", "audio/mpeg"),
    "video": ("video.mp4", "video/mp4"),
    "video_note": ("video-message.mp4", "video/mp4"),
    "animation": ("animation.mp4", "video/mp4"),
}
"""kind -> (the name and media type of a file Telegram gives none)."""
FILE_KINDS = ("photo", *_DEFAULTS, "sticker")


def file_kinds(message: Mapping[str, Any]) -> dict[str, Any]:
    """The file parts of a Telegram message (`photo`, `document`, `sticker`, ...)."""
    return {kind: message[kind] for kind in FILE_KINDS if kind in message}


@dataclass(frozen=True, slots=True)
class Media:
    """What the conduit took of a message's file: the attachments for the core, and the
    notice for the chat when a file was not taken."""

    attachments: tuple[Attachment, ...] = ()
    notice: str = ""


@dataclass(frozen=True, slots=True)
class _File:
    """One file of a message as Telegram describes it."""

    file_id: str
    name: str
    media_type: str
    size: int


def _int(data: Mapping[str, Any], key: str) -> int:
    """`data[key]` as an int (0 when missing or not a number)."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _without(reason: str) -> Media:
    return Media(notice=f"{reason}; the message went without it.")


class MediaReader:
    """Takes the file of one message (see the module docstring)."""

    def __init__(self, api: BotApi, client: ConduitClient) -> None:
        self.api = api
        self.client = client

    @property
    def limit(self) -> int:
        """The most bytes fetched for one file: the policy's and Telegram's limit."""
        return min(self.client.files.policy.max_size, DOWNLOAD_LIMIT)

    async def read(self, files: Mapping[str, Any]) -> Media:
        """Take `files` (from `file_kinds`); an empty Media when there are none."""
        kind = next(iter(files), None)
        if kind is None:
            return Media()
        if kind == "sticker":
            return Media(notice="I cannot read a sticker.")
        described = self._photo(files["photo"]) if kind == "photo" else None
        if kind != "photo" and isinstance(files[kind], Mapping):
            described = _described(kind, files[kind])
        if described is None:
            return Media(notice="I cannot read this file.")
        return await self._take(described)

    def _photo(self, sizes: object) -> _File | None:
        """The largest size of a photo within the limit, else the largest (refused)."""
        options = [s for s in sizes if isinstance(s, Mapping)] if isinstance(sizes, list) else []
        options.sort(key=lambda s: (_int(s, "file_size"), _int(s, "width") * _int(s, "height")))
        if not options:
            return None
        fitting = [s for s in options if _int(s, "file_size") <= self.limit] or options
        chosen = fitting[-1]
        file_id, size = str(chosen.get("file_id") or ""), _int(chosen, "file_size")
        return _File(file_id, "photo.jpg", "image/jpeg", size)

    async def _take(self, file: _File) -> Media:
        refusal = self.client.files.policy.refusal(file.name, file.media_type, file.size)
        if refusal is not None:
            return _without(refusal)
        if file.size > DOWNLOAD_LIMIT:
            return _too_large(file.name, file.size)
        try:
            data = await self.api.download(file.file_id, self.limit)
        except FileTooLarge:
            return _too_large(file.name, file.size)
        except FileError as exc:  # redacted by BotApi
            log.warning("a telegram file was not downloaded", error=str(exc))
            return _without(f"I could not download {file.name} from Telegram (send it again)")
        try:
            attachment = await self.client.upload(data, file.name, file.media_type)
        except (FileRefused, FileCorrupt) as exc:
            return _without(str(exc))
        return Media(attachments=(attachment,))


def _described(kind: str, part: Mapping[str, Any]) -> _File:
    default_name, default_type = _DEFAULTS[kind]
    name = str(part.get("file_name") or default_name)
    media_type = str(part.get("mime_type") or default_type or guess_media_type(name)).lower()
    return _File(str(part.get("file_id") or ""), name, media_type, _int(part, "file_size"))


def _too_large(name: str, size: int) -> Media:
    shown = f"{name} is {human_size(size)}, over" if size else f"{name} is over"
    return _without(f"{shown} the 20 MB Telegram lets a bot download")
