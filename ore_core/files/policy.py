"""Which files are taken: a size limit and an allow list of media types.

Conduits check it before they upload (the sender hears at once), and the core checks
it again on every message, since a raw client need not ask: one rule, both places.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ore_core.artifacts.attachment import human_size
from ore_core.errors import OreError

if TYPE_CHECKING:
    from ore_core.config import FilesSettings

__all__ = ["DEFAULT_ALLOWED_TYPES", "DEFAULT_MAX_SIZE", "FilePolicy", "FileRefused"]

DEFAULT_MAX_SIZE = 25 * 1024**2
"""`files.max_size` unless set: large enough for photos, PDFs and logs."""
DEFAULT_ALLOWED_TYPES = ("image/*", "text/*", "application/pdf", "application/json")
"""`files.allowed_types` unless set: what people post and models read."""


class FileRefused(OreError):
    """A file the policy does not take; the message says which rule, in one line."""


@dataclass(frozen=True, slots=True)
class FilePolicy:
    """`max_size` bytes at most, and a media type matching one of `allowed_types`."""

    max_size: int = DEFAULT_MAX_SIZE
    allowed_types: Sequence[str] = DEFAULT_ALLOWED_TYPES

    @classmethod
    def from_settings(cls, settings: FilesSettings) -> FilePolicy:
        """The policy of the `[files]` settings."""
        return cls(int(settings.max_size), tuple(settings.allowed_types))

    def refusal(self, name: str, media_type: str, size: int) -> str | None:
        """Why the file is refused (one line naming it), or None when it is taken."""
        if size > self.max_size:
            return (
                f"{name} is {human_size(size)}, over the {human_size(self.max_size)} "
                "limit for files (files.max_size)"
            )
        if not any(fnmatch.fnmatchcase(media_type, pattern) for pattern in self.allowed_types):
            return (
                f"{name}: files of type {media_type} are not allowed here "
                f"(files.allowed_types: {', '.join(self.allowed_types)})"
            )
        return None

    def check(self, name: str, media_type: str, size: int) -> None:
        """Raise `FileRefused` when `refusal` has a reason."""
        reason = self.refusal(name, media_type, size)
        if reason is not None:
            raise FileRefused(reason)
