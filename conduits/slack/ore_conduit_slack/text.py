"""Slack-ready text: neutralised broadcasts, and long answers split into messages.

Slack refuses a streamed or `markdown_text` message past about 12k characters, so a long
answer becomes several messages. `split_parts` cuts at a paragraph boundary, else a
line boundary, else a space, and never leaves a code fence open: a part that ends inside
a fence closes it and the next part re-opens it with the same info string. Each `Part`
keeps the slice of the source it shows (`body`), so the bodies joined are the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Part", "fence_at", "neutralise", "split_parts"]

_BROADCAST = re.compile(r"<!(here|channel|everyone|subteam\^[^>]*)(\|[^>]*)?>")
_FENCE = re.compile(r"^ {0,3}```(.*)$")
_CLOSE = "\n```"


def neutralise(text: str) -> str:
    """`text` with `<!here>`, `<!channel>`, `<!everyone>` and group pings escaped.

    Slack shows `&lt;!here&gt;` as the literal `<!here>` and notifies nobody.
    """
    return _BROADCAST.sub(lambda m: "&lt;" + m.group(0)[1:-1] + "&gt;", text)


@dataclass(frozen=True, slots=True)
class Part:
    """One message of a split answer: `text` to send, `body` the source slice it shows."""

    text: str
    body: str


def fence_at(text: str) -> str | None:
    """The info string of the code fence still open at the end of `text` (None: none)."""
    info: str | None = None
    for line in text.split("\n"):
        found = _FENCE.match(line)
        if found is not None:
            info = found.group(1).strip() if info is None else None
    return info


def split_parts(text: str, limit: int, *, open_fence: str | None = None) -> list[Part]:
    """`text` as parts of at most `limit` characters each (fences balanced in every part).

    `open_fence` is the info string of a fence already open where `text` starts (it is
    re-opened at the start of the first part).
    """
    parts: list[Part] = []
    rest = text
    fence = open_fence
    while True:
        prefix = "" if fence is None else f"```{fence}\n"
        if len(prefix) + len(rest) <= limit and fence_at(prefix + rest) is None:
            parts.append(Part(prefix + rest, rest))
            return parts
        room = limit - len(prefix)
        cut = _cut(rest, room)
        ends_in = fence_at(prefix + rest[:cut])
        if ends_in is not None:  # the part must close its fence: leave room for it
            cut = _cut(rest, room - len(_CLOSE))
            ends_in = fence_at(prefix + rest[:cut])
        body = rest[:cut]
        shown = prefix + body
        if ends_in is not None:
            shown = shown.rstrip("\n") + _CLOSE
        parts.append(Part(shown, body))
        rest = rest[cut:]
        fence = ends_in
        if not rest:
            return parts


def _cut(text: str, room: int) -> int:
    """Where to end a part of at most `room` characters: after the best boundary."""
    if len(text) <= room:
        return len(text)
    window = text[: room + 1]
    floor = room // 2  # a boundary in the first half wastes too much of the message
    for boundary in ("\n\n", "\n", " "):
        at = window.rfind(boundary, 0, room)
        if at >= floor:
            return at + len(boundary)
    return max(room, 1)
