"""The attachment artifact: a file a turn refers to, its bytes stored once elsewhere.

An event never carries a file's bytes (a 50 MB PDF would not fit the 1 MiB payload
limit, and every endpoint showing it would store it again): it carries this reference.
The bytes live in the JetStream object store bucket `bucket` (`ORE_FILES` for the
default prefix) under the object name `sha256`, so the same file sent twice is stored
once and a reader can check what it fetched. `ore_core.files` uploads and fetches them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ore_core.artifacts.base import Artifact
from ore_core.errors import ArtifactError

__all__ = ["MAX_FILE_NAME", "Attachment", "human_size"]

MAX_FILE_NAME = 255
"""Characters of a file name, like most file systems allow."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")
_BUCKET = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Attachment(Artifact):
    """A file: its `name`, `media_type` (lower case, no parameters), `size` in bytes,
    `sha256` (hex, the object's name) and the object store `bucket` holding its bytes."""

    KIND: ClassVar[str] = "attachment"
    name: str
    media_type: str
    size: int
    sha256: str
    bucket: str

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise ArtifactError(f"attachment: {problem}")

    def describe(self) -> str:
        """One line for people and models: `report.pdf (application/pdf, 1.2 MB)`."""
        return f"{self.name} ({self.media_type}, {human_size(self.size)})"


def _problem(value: Attachment) -> str:
    if not 1 <= len(value.name) <= MAX_FILE_NAME or any(ord(c) < 32 for c in value.name):
        return f"name must be 1-{MAX_FILE_NAME} characters without control characters"
    if not _MEDIA_TYPE.fullmatch(value.media_type):
        return f"media_type must look like type/subtype, got {value.media_type!r}"
    if value.size < 0:
        return f"size must not be negative, got {value.size}"
    if not _SHA256.fullmatch(value.sha256):
        return "sha256 must be 64 lower-case hex digits"
    if not _BUCKET.fullmatch(value.bucket):
        return f"bucket must be a bucket name, got {value.bucket!r}"
    return ""


def human_size(size: int) -> str:
    """`size` bytes as people read it: 512 B, 1.2 kB, 5.0 MB (powers of 1000)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
