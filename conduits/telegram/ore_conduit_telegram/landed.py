"""Whether a send under way when the conduit stopped reached the chat.

Telegram has no idempotency key and cannot be asked what a chat shows, but it answers an
edit that changes nothing with "message is not modified". Before each `sendMessage` of
an answer's part the conduit records the intent: the part, its text, and the last
message of the chat it knows to precede it (the user's question, or the answer's
previous part). A restarted conduit that finds an intent looks at the messages after
that one, oldest first, with `editMessageText` of the same text:

- "message is not modified": the part is there; it is kept, not sent again;
- "message to edit not found": the chat ends there, the part did not land: send it;
- "message can't be edited": someone else's message (the user wrote more); the next.

Messages the conduit knows (the chat's chains: every message it saw or sent) are
skipped without a call: none of them is the part. An edit that succeeds found a bot
message the conduit does not know with another text: another send under way at the
same stop in the same chat (two topics answering at once), which now shows this part;
it is kept as the part, and that other answer, not finding its text, sends its part
again. After `PROBES` messages, or with no known message to start from, the outcome is
unknown and the part is sent again (Telegram may then show it twice, as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import structlog

from ore_conduit_telegram.api import TelegramError
from ore_conduit_telegram.text import to_html
from ore_core.conduit import PlatformError

if TYPE_CHECKING:
    from ore_conduit_telegram.outbound import ThreadRenderer

__all__ = ["PROBES", "Intent", "Landed", "find_landed"]

log = structlog.get_logger("ore.conduit.telegram")

PROBES = 10
"""Messages after the last known one looked at before a send is called unknown."""


@dataclass(frozen=True, slots=True)
class Intent:
    """A part about to be sent: what a restart needs to look for it."""

    part: int
    text: str
    html: bool
    after: int
    """The last message of the chat known to come before it (0: none known)."""

    def to_record(self) -> dict[str, Any]:
        """The intent as the answer record keeps it."""
        return {
            "sending": self.part,
            "sending_text": self.text,
            "sending_html": self.html,
            "sending_after": self.after,
        }

    @classmethod
    def of_record(cls, extra: dict[str, Any]) -> Intent | None:
        """The intent an answer record holds (None: no send was under way)."""
        part = extra.get("sending")
        if not isinstance(part, int):
            return None
        text, html = extra.get("sending_text"), extra.get("sending_html")
        after = extra.get("sending_after")
        return cls(
            part,
            text if isinstance(text, str) else "",
            html is True,
            after if isinstance(after, int) else 0,
        )


_Probed = Literal["here", "absent", "other"]


@dataclass(frozen=True, slots=True)
class Landed:
    """What became of a send under way at a stop: `landed` as `message`, `absent` (send
    it), or `unknown` (send it; Telegram may then show it twice)."""

    outcome: Literal["landed", "absent", "unknown"]
    message: int = 0


async def find_landed(renderer: ThreadRenderer, intent: Intent) -> Landed:
    """Whether the part of `intent` is in the chat, and as which message."""
    place = renderer.place
    assert place is not None
    if not intent.after or not intent.text:
        return Landed("unknown")
    for message in range(intent.after + 1, intent.after + 1 + PROBES):
        if await renderer.out.state.chain(place.chat, message) is not None:
            continue
        try:
            probed = await _probe(renderer, message, intent)
        except PlatformError as exc:  # refused for another reason: cannot be told
            log.info("a send under way at the stop not looked for", error=exc.detail)
            return Landed("unknown")
        if probed == "here":
            return Landed("landed", message)
        if probed == "absent":
            return Landed("absent")
    return Landed("unknown")


async def _probe(renderer: ThreadRenderer, message: int, intent: Intent) -> _Probed:
    """What `message` is: the part (here), past the chat's end (absent), or another."""
    assert renderer.place is not None
    html = intent.html
    while True:
        params: dict[str, Any] = {"chat_id": renderer.place.chat, "message_id": message}
        if html:
            params.update(text=to_html(intent.text), parse_mode="HTML")
        else:
            params.update(text=intent.text)
        try:
            await renderer.paced(partial(renderer.api.call, "editMessageText", **params))
        except TelegramError as exc:
            if exc.says("message is not modified"):
                return "here"
            if html and exc.says("can't parse entities"):
                html = False  # it was sent as plain text then
                continue
            if exc.says("message to edit not found"):
                return "absent"
            if exc.says("can't be edited"):
                return "other"
            raise
        log.warning(
            "a message of another send under way at the stop now shows this part",
            thread_id=renderer.thread_id,
            message=message,
        )
        return "here"
