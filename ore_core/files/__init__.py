"""Files: attachments stored once in a JetStream object store bucket.

`FileStore` is the core's access to the bucket, `ConduitFiles` a conduit's (through
`ConduitClient.upload` / `fetch`: it writes, and reads through the core's `files.*`
methods), `FilePolicy` says which files are taken. The `Attachment` artifact is the reference
events carry (`ore_core.artifacts.attachment`); docs/protocol.md, "Files", is the
contract for raw clients.
"""

from ore_core.artifacts.attachment import Attachment
from ore_core.files.policy import FilePolicy, FileRefused
from ore_core.files.reading import FileReader, current_reader, use_reader
from ore_core.files.remote import ConduitFiles
from ore_core.files.store import FileCorrupt, FileMissing, FileStore, guess_media_type

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
