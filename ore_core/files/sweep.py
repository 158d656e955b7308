"""Removing the files no thread refers to any more, once they are old enough.

A file is stored once however many threads carry it (the object name is its sha256),
so deleting a thread cannot delete its files: another thread may show the same bytes.
The sweep is mark and sweep instead: every stored thread's attachments (every branch)
are the marks, and a stored file without a mark that was stored more than `older_than`
ago is removed. The age is what keeps a file that is uploaded but not yet in a stored
turn (a conduit uploads first, then sends the message that refers to it): give
`files.retention` comfortably more than a message takes to be answered and stored.

A thread the store cannot read might refer to any file, so one such thread stops the
sweep before it removes anything (`SweepRefused`): nothing is lost to a damaged row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ore_core.artifacts.attachment import Attachment
from ore_core.errors import OreError, ThreadCorrupt, ThreadNotFound
from ore_core.files.store import FileStore

if TYPE_CHECKING:  # the store's protocol only: files stay on the SDK's floor
    from ore_core.session.protocols import Store

__all__ = ["Swept", "SweepRefused", "referenced_files", "sweep"]

_PAGE = 200


class SweepRefused(OreError):
    """The sweep could not know every file that is referred to; nothing was removed."""


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep found and did: `referenced` files are kept, `young` unreferenced
    ones are kept for now (stored within `older_than`), `removed` ones freed `freed`
    bytes."""

    referenced: int
    young: int
    removed: int
    freed: int

    def as_dict(self) -> dict[str, int]:
        """The reply of `files.sweep` (docs/protocol.md)."""
        return {
            "referenced": self.referenced,
            "young": self.young,
            "removed": self.removed,
            "freed": self.freed,
        }


async def referenced_files(store: Store) -> set[str]:
    """The sha256 of every file any stored thread carries, on any branch."""
    marks: set[str] = set()
    after = ""
    while page := await store.list_ids(after=after, limit=_PAGE):
        for thread_id in page:
            try:
                thread = await store.get(thread_id)
            except ThreadNotFound:
                continue  # deleted since it was listed: its marks are gone with it
            except ThreadCorrupt as exc:
                raise SweepRefused(
                    f"thread {thread_id} cannot be read, so the files it refers to are "
                    f"unknown; repair or delete it first ({exc})"
                ) from None
            marks.update(
                artifact.sha256
                for turn in thread.all_turns()
                for artifact in turn.artifacts
                if isinstance(artifact, Attachment)
            )
        after = page[-1]
    return marks


async def sweep(store: Store, files: FileStore, older_than: timedelta, now: datetime) -> Swept:
    """Remove each stored file no thread of `store` refers to, stored before
    `now - older_than`; what was kept and removed."""
    stored = await files.stored_files()  # listed first: a file stored after it is young
    marks = await referenced_files(store)
    cutoff = now - older_than
    unreferenced = [file for file in stored if file.sha256 not in marks]
    # A description without its time (a raw client's) is never old: kept, not guessed.
    old = [file for file in unreferenced if file.stored_at and file.stored_at < cutoff]
    for file in old:
        await files.delete(file.sha256)
    return Swept(
        referenced=len(stored) - len(unreferenced),
        young=len(unreferenced) - len(old),
        removed=len(old),
        freed=sum(file.size for file in old),
    )
