"""The core's check of the files a message carries: the same `FilePolicy` conduits apply.

A raw client need not ask the policy before it uploads, so the core asks again: a file
over the size limit or of a type the operator does not allow is taken off the message,
the sender gets one notice naming it and the rule, and the text (and every other file)
goes on. Registered by the built-in plugin `ore_core.plugins.builtin.files`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core.events import Notice, Severity, UserMessageEvent
from ore_core.files.policy import FilePolicy
from ore_core.session.protocols import InterceptResult

if TYPE_CHECKING:
    from ore_core.events import IngressEvent
    from ore_core.session.stream import Stream

__all__ = ["FilePolicyInterceptor"]


class FilePolicyInterceptor:
    """Takes the files `policy` refuses off each user message, with a notice each."""

    name = "files"
    order = -20  # before the slash commands: a command's message is checked too

    def __init__(self, policy: FilePolicy) -> None:
        self.policy = policy

    async def intercept(self, event: IngressEvent, stream: Stream) -> InterceptResult:
        if not isinstance(event, UserMessageEvent) or not event.attachments:
            return InterceptResult(event)
        kept, notices = [], []
        for attachment in event.attachments:
            reason = self.policy.refusal(attachment.name, attachment.media_type, attachment.size)
            if reason is None:
                kept.append(attachment)
            else:
                notices.append(Notice(f"{reason}; the message went without it", Severity.WARN))
        if not notices:
            return InterceptResult(event)
        return InterceptResult(event.model_copy(update={"attachments": tuple(kept)}), notices)
