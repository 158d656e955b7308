"""Files: attachments stored once in a JetStream object store bucket.

`FileStore` is the core's access to the bucket, `ConduitFiles` a conduit's (through
`ConduitClient.upload` / `fetch`: it writes, and reads through the core's `files.*`
methods), `FilePolicy` says which files are taken. The `Attachment` artifact is the reference
events carry (`ore_core.artifacts.attachment`); docs/protocol.md, "Files", is the
contract for raw clients.
"""

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.artifacts.attachment import Attachment
    from ore_core.files.policy import FilePolicy, FileRefused
    from ore_core.files.reading import FileReader, current_reader, use_reader
    from ore_core.files.remote import ConduitFiles
    from ore_core.files.store import FileCorrupt, FileMissing, FileStore, guess_media_type

_EXPORTS: dict[str, str] = {
    "Attachment": "ore_core.artifacts.attachment",
    "ConduitFiles": "ore_core.files.remote",
    "FileCorrupt": "ore_core.files.store",
    "FileMissing": "ore_core.files.store",
    "FilePolicy": "ore_core.files.policy",
    "FileReader": "ore_core.files.reading",
    "FileRefused": "ore_core.files.policy",
    "FileStore": "ore_core.files.store",
    "current_reader": "ore_core.files.reading",
    "guess_media_type": "ore_core.files.store",
    "use_reader": "ore_core.files.reading",
}
"""Public name -> the module that defines it, imported on first access (the settings
read the policy's defaults without loading the bucket's NATS code)."""

__all__ = [
    "Attachment",
    "ConduitFiles",
    "FileCorrupt",
    "FileMissing",
    "FilePolicy",
    "FileReader",
    "FileRefused",
    "FileStore",
    "current_reader",
    "guess_media_type",
    "use_reader",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
