"""An adapter's files: what users post is taken into ore, what ore relays is fetched.

Inbound, a platform's file (`Remote`: its name, type, announced size and a way to
download it) is checked against the operator's `[files]` policy before a byte is
downloaded, downloaded, checked for its whole size and uploaded (`ConduitClient.upload`,
stored once); each file that cannot be taken (over the limit, a type not allowed, a
download that fails or stops midway) is one line of notice for the sender, and the
message goes on with its text and every other file (`take_files`). Outbound, the
adapter fetches the bytes of a part's files from the core (`fetch_files`), checked
against their sha256; one that cannot be fetched is a line in the text instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

from ore_core.artifacts.attachment import Attachment, human_size
from ore_core.conduit.client import ConduitClient
from ore_core.conduit.conversations import Conversations
from ore_core.errors import ApiError, BusError, OreError

__all__ = ["DownloadFailed", "Remote", "fetch_files", "take_files"]

log = structlog.get_logger("ore.conduit.media")


class DownloadFailed(OreError):
    """A platform's file could not be downloaded whole; the message says why."""


@dataclass(frozen=True, slots=True)
class Remote:
    """A file on the platform: `name`, `media_type`, the `size` it announces (None:
    unknown) and `download`, which returns its bytes or raises `DownloadFailed`."""

    name: str
    media_type: str
    size: int | None
    download: Callable[[], Awaitable[bytes]]


async def take_files(
    client: ConduitClient, remotes: Sequence[Remote]
) -> tuple[tuple[Attachment, ...], list[str]]:
    """The attachments of the `remotes` taken into ore, and a notice line for each one
    that could not be (see the module docstring)."""
    taken: list[Attachment] = []
    notices: list[str] = []
    for remote in remotes:
        try:
            taken.append(await _take(client, remote))
        except (OreError, ApiError, BusError) as exc:
            log.info("file not taken", file=remote.name, error=str(exc))
            notices.append(f"{exc}; the message went without it")
    return tuple(taken), notices


async def _take(client: ConduitClient, remote: Remote) -> Attachment:
    if remote.size is not None:  # refused before a byte is downloaded
        client.files.policy.check(remote.name, remote.media_type, remote.size)
    try:
        data = await remote.download()
    except DownloadFailed as exc:
        raise DownloadFailed(f"{remote.name}: {exc}") from None
    if remote.size is not None and len(data) != remote.size:
        raise DownloadFailed(
            f"{remote.name}: the download stopped at {human_size(len(data))} of "
            f"{human_size(remote.size)}"
        )
    return await client.upload(data, remote.name, remote.media_type)


async def fetch_files(
    client: ConduitClient,
    conversations: Conversations,
    conversation: str,
    attachments: Sequence[Attachment],
) -> tuple[list[tuple[Attachment, bytes]], list[str]]:
    """The bytes of each of a part's `attachments` (of the thread of `conversation`),
    and a line for each that could not be fetched."""
    if not attachments:
        return [], []
    thread_id = conversations.known(conversation) or await conversations.thread_of(conversation)
    fetched: list[tuple[Attachment, bytes]] = []
    lines: list[str] = []
    for attachment in attachments:
        try:
            fetched.append((attachment, await client.fetch(thread_id, attachment)))
        except (OreError, ApiError, BusError) as exc:
            log.warning("file not fetched", file=attachment.name, error=str(exc))
            lines.append(f"📎 {attachment.describe()} (could not be fetched: {exc})")
    return fetched, lines
