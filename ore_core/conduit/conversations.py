"""Conversations: a platform's conversation <-> its ore thread, looked up once and kept.

A conversation is the value of the conduit's `conversation_key` in its thread's
metadata (`nats.channel`, `discord.channel`). Inbound, the engine needs the thread of
a conversation (created on first use); outbound, the conversation of a thread, which
for a linked thread the core shows under the conduit's own key (known before the
conversation ever spoke). Both are asked of the core once and cached both ways; a
linked thread's settings (labels, who answers) are loaded with it.
"""

from __future__ import annotations

import asyncio

from ore_core.conduit.client import ConduitClient
from ore_core.conduit.relay import SettingsCache
from ore_core.conduit.waiting import until_answered
from ore_core.errors import ApiError

__all__ = ["Conversations"]

CACHED = 10_000
"""Thread <-> conversation entries kept; the oldest is dropped first."""


class Conversations:
    """The conduit's conversations and their threads (see the module docstring).

    `key` is the conduit's `conversation_key`; `settings` the linked threads' settings,
    loaded here the first time a thread is met.
    """

    def __init__(self, client: ConduitClient, key: str) -> None:
        self.client = client
        self.key = key
        self.settings = SettingsCache()
        self._of_thread: dict[str, str | None] = {}  # None: a thread not of a conversation
        self._of_conversation: dict[str, str] = {}

    def known(self, conversation: str) -> str | None:
        """The thread of `conversation` if it was met, without asking the core."""
        return self._of_conversation.get(conversation)

    async def thread_of(self, conversation: str, *, patience: float | None = None) -> str:
        """The conversation's thread (created on first use), asked again while the core
        is away for up to `patience` seconds (None: until it answers)."""
        known = self._of_conversation.get(conversation)
        if known is not None:
            return known
        loop = asyncio.get_running_loop()
        deadline = None if patience is None else loop.time() + patience
        thread_id, created = await until_answered(
            lambda: self.client.lookup_or_create(self.key, conversation),
            "conversation lookup failed",
            deadline=deadline,
            conversation=conversation,
        )
        if not created and self._of_thread.get(thread_id) != conversation:
            info = await self.client.get_thread(thread_id)
            self.settings.load(thread_id, info.metadata)
        self._remember(thread_id, conversation)
        return thread_id

    async def conversation_of(self, thread_id: str) -> str | None:
        """The conversation of a thread, from its metadata (None: not one of this
        conduit's, or deleted since); asked again while the core is away."""
        if thread_id in self._of_thread:
            return self._of_thread[thread_id]
        try:
            info = await until_answered(
                lambda: self.client.get_thread(thread_id),
                "the core did not answer",
                thread_id=thread_id,
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            conversation = None  # deleted since: nobody to tell
        else:
            conversation = info.metadata.get(self.key)
            self.settings.load(thread_id, info.metadata)
        if conversation is None:
            self._of_thread[thread_id] = None
        else:
            self._remember(thread_id, conversation)
        return conversation

    def _remember(self, thread_id: str, conversation: str) -> None:
        if self._of_thread.get(thread_id) == conversation:
            return
        if len(self._of_thread) >= CACHED:
            oldest = next(iter(self._of_thread))
            if (gone := self._of_thread.pop(oldest)) is not None:
                self._of_conversation.pop(gone, None)
        self._of_thread[thread_id] = conversation
        self._of_conversation[conversation] = thread_id
