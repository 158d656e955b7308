"""Telegram-ready text: long answers split into messages, Markdown shown as Telegram HTML.

`split_text` cuts an answer into parts of at most `limit` characters at a paragraph
boundary, else a line boundary, else a space, and never leaves a code fence open: a part
that ends inside a fence closes it, and the next re-opens it with the same info string.
Telegram counts the limit after entity parsing, and the HTML of a part never shows more
characters than its Markdown source, so a part within `limit` is within Telegram's.

`to_html` renders the Markdown a model writes (fences, inline code, bold, italics,
strike-through, links, headings) as the HTML subset Telegram accepts; everything else
is escaped. It never raises: Markdown it cannot pair up stays literal text, and if
Telegram still refuses the entities, the caller sends the part as plain text.
"""

from __future__ import annotations

import html
import re

__all__ = ["fence_at", "split_text", "to_html"]

_FENCE = re.compile(r"^ {0,3}```\s*([^`\s]*)[^`]*$")
_CLOSE = "\n```"
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*|__([^_\n]+?)__")
_ITALIC = re.compile(r"(?<![*\w])\*([^*\n<>]+?)\*(?![*\w])|(?<![_\w])_([^_\n<>]+?)_(?![_\w])")
_STRIKE = re.compile(r"~~([^~\n]+?)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+)$")


def fence_at(text: str) -> str | None:
    """The info string of the code fence still open at the end of `text` (None: none)."""
    info: str | None = None
    for line in text.split("\n"):
        found = _FENCE.match(line)
        if found is not None:
            info = found.group(1) if info is None else None
    return info


def split_text(text: str, limit: int) -> list[str]:
    """`text` as parts of at most `limit` characters, fences balanced in every part;
    whitespace between parts is dropped, and an empty text has no parts."""
    parts: list[str] = []
    rest = text.strip()
    fence: str | None = None
    while rest:
        head = "" if fence is None else f"```{fence}\n"
        if len(head) + len(rest) <= limit and fence_at(head + rest) is None:
            parts.append(head + rest)
            break
        cut = _cut(rest, limit - len(head) - len(_CLOSE))
        piece = head + rest[:cut]
        fence = fence_at(piece)
        if fence is not None:
            piece = piece.rstrip("\n") + _CLOSE
        if piece.strip():
            parts.append(piece.rstrip())
        rest = rest[cut:].lstrip("\n") if fence is None else rest[cut:]
    return parts


def _cut(text: str, room: int) -> int:
    """Where to end a part of at most `room` characters: after the best boundary."""
    room = max(room, 1)
    if len(text) <= room:
        return len(text)
    floor = room // 2  # a boundary early in the part wastes too much of the message
    for boundary in ("\n\n", "\n", " "):
        at = text.rfind(boundary, 0, room)
        if at >= floor:
            return at + len(boundary)
    return room


def to_html(markdown: str) -> str:
    """`markdown` as Telegram HTML (see the module docstring)."""
    out: list[str] = []
    code: list[str] | None = None
    language = ""
    for line in markdown.split("\n"):
        fence = _FENCE.match(line)
        if fence is not None and code is None:
            code, language = [], fence.group(1)
            continue
        if fence is not None and code is not None:
            out.append(_pre(code, language))
            code = None
            continue
        if code is not None:
            code.append(line)
        else:
            out.append(_inline(line))
    if code is not None:
        out.append(_pre(code, language))
    return "\n".join(out)


def _pre(lines: list[str], language: str) -> str:
    body = html.escape("\n".join(lines), quote=False)
    if language:
        return f'<pre><code class="language-{html.escape(language)}">{body}</code></pre>'
    return f"<pre>{body}</pre>"


def _inline(line: str) -> str:
    """One line outside code blocks: inline code kept apart from the other markup."""
    heading = _HEADING.match(line)
    if heading is not None:
        return f"<b>{_inline(heading.group(1))}</b>"
    pieces = _INLINE_CODE.split(line)  # odd indexes are code spans
    shown = []
    for index, piece in enumerate(pieces):
        if index % 2:
            shown.append(f"<code>{html.escape(piece, quote=False)}</code>")
        else:
            shown.append(_markup(html.escape(piece, quote=False)))
    return "".join(shown)


def _markup(text: str) -> str:
    text = _LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', text)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    return _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
