"""The bytes of the files a relayed copy carries, for an adapter that posts files itself.

A copy's `Part.attachments` are references; an adapter that uploads files to its
platform (Slack, Telegram) fetches their bytes through the core (`ConduitClient.fetch`,
checked against the sha256) from the thread of the conversation it posts in, which
the engine has met before it posts there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ore_core.artifacts import Attachment
    from ore_core.conduit.engine import PlatformContext

__all__ = ["attachment_bytes"]


async def attachment_bytes(
    context: PlatformContext, conversation: str, attachment: Attachment
) -> bytes:
    """The bytes of `attachment`, shown in `conversation`; `FileMissing` or `FileCorrupt`
    when the core cannot hand them over whole."""
    conversations = context.conversations
    thread_id = conversations.known(conversation) or await conversations.thread_of(conversation)
    return await context.client.fetch(thread_id, attachment)
