"""Where turn processors read attachments from in this process.

A processor (the openai one sends images and text files to the model) runs in the core,
which has the bucket; it should not need a NATS connection of its own. The core's
control API installs its `FileStore` here when it starts (`use_reader`), and a
processor asks `current_reader()`: None where there is no bus (a `Manager` alone, a
test), and the processor then describes a file instead of showing it.
"""

from __future__ import annotations

from typing import Protocol

from ore_core.artifacts.attachment import Attachment

__all__ = ["FileReader", "current_reader", "use_reader"]


class FileReader(Protocol):
    """Reads an attachment's bytes, checked (`FileStore.fetch`)."""

    async def fetch(self, attachment: Attachment) -> bytes: ...


_reader: FileReader | None = None


def use_reader(reader: FileReader | None) -> None:
    """Make `reader` the one processors of this process read files through."""
    global _reader
    _reader = reader


def current_reader() -> FileReader | None:
    """The installed reader, or None."""
    return _reader
