"""What a conduit's platform can do, so the SDK and the core can degrade by it.

A conduit declares one `Capabilities` as a class attribute. The relay (bridging) and
the SDK's rendering helpers read it: a platform that cannot edit gets a repost marked
edited, one without threads gets a quote, one without streaming gets only the final
text, and text longer than `max_message_length` is split without breaking code fences.
The defaults describe the most limited platform, so a conduit that declares nothing
is never sent what it cannot show.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ore_core.artifacts import Attachment

__all__ = ["Capabilities", "Markup"]

Markup = Literal[
    "plain", "markdown", "slack_mrkdwn", "telegram_html", "telegram_markdown_v2", "html"
]
"""The markup dialect a platform renders; relayed text is converted to it."""


class Capabilities(BaseModel):
    """A platform's abilities: edit, delete, threads, streaming, length and markup.

    `edit` and `delete`: the conduit can change or remove a message it posted.
    `threads`: the platform threads replies (else replies are quoted).
    `streaming`: live deltas are worth sending (else only final text).
    `max_message_length`: the longest message in characters (longer text is split).
    `markup`: the dialect text is rendered in.
    `edits_arrive` / `deletes_arrive`: the platform tells the conduit when a user edits
    or deletes a message (Telegram reports edits but never deletes to a bot).
    `reactions`: the platform shows and reports reactions on messages.
    `idempotency`: how a repeated post is recognised after a crash: "key" (the platform
    takes an idempotency key: Discord's nonce, Matrix's txnId), "read_back" (the adapter
    can find what it posted, `ReadsBack`), "none" (the engine records the intent before
    the call and the outcome after it).
    `delta_interval`: the pacing of live deltas the platform wants, in seconds (a
    terminal or a web page shows text as it comes: ~0.03); None keeps the core's
    `session.delta_interval` (0.1 s, right for chat APIs with rate limits). `ore serve`
    records it for the conduit's namespace (its name) when the conduit is installed
    beside it; `session.delta_intervals` overrides it per namespace.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit: bool = False
    delete: bool = False
    threads: bool = False
    streaming: bool = False
    max_message_length: int = Field(default=4000, ge=64)
    markup: Markup = "plain"
    edits_arrive: bool = False
    deletes_arrive: bool = False
    reactions: bool = False
    idempotency: Literal["key", "read_back", "none"] = "none"
    delta_interval: float | None = Field(default=None, ge=0)
    file_max_bytes: int | None = Field(default=0, ge=0)
    file_types: tuple[str, ...] = ("*/*",)

    def takes_file(self, attachment: Attachment) -> bool:
        """Whether the platform can be handed `attachment` as a file of its own."""
        limit = self.file_max_bytes
        if limit == 0 or (limit is not None and attachment.size > limit):
            return False
        return any(fnmatchcase(attachment.media_type, t) for t in self.file_types)
