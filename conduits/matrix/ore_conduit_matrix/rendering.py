"""Rendering: a `Part` as the content of an `m.room.message`.

The engine hands text in Markdown (the capabilities say so). A Matrix message carries it
twice, as Element writes its own: `body` the Markdown as typed (what a client without
HTML shows) and `formatted_body` the HTML rendered from it (raw HTML in the text is
escaped, never passed on). The bot's own answers are notices (`m.notice`: other bots
must never answer them); a relayed copy of someone's message is `m.text`, with the
sender's name as a per-message profile (MSC4144) for clients that show one.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

from ore_conduit_matrix.ids import Conversation
from ore_core.artifacts import Attachment
from ore_core.conduit import Part

__all__ = ["edit_content", "message_content", "to_html"]

HTML_FORMAT = "org.matrix.custom.html"
_PROFILE = "com.beeper.per_message_profile"  # MSC4144's unstable name
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("strikethrough")


def to_html(markdown: str) -> str:
    """`markdown` as the HTML of a `formatted_body`."""
    html: str = _MARKDOWN.render(markdown)
    return html.strip()


def _text(part: Part) -> dict[str, Any]:
    content: dict[str, Any] = {
        "msgtype": "m.notice" if part.sender is None else "m.text",
        "body": part.text,
        "format": HTML_FORMAT,
        "formatted_body": to_html(part.text),
    }
    if part.sender is not None:
        content[_PROFILE] = {
            "id": part.sender.id or part.sender.name,
            "displayname": part.sender.name,
        }
        if part.sender.avatar:
            content[_PROFILE]["avatar_url"] = part.sender.avatar
    return content


def message_content(part: Part, where: Conversation) -> dict[str, Any]:
    """A new message in `where`: in its thread (`m.thread`), replying to `reply_to`."""
    content = _text(part)
    reply = {"m.in_reply_to": {"event_id": part.reply_to}} if part.reply_to else {}
    if where.thread:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": where.thread,
            "is_falling_back": not part.reply_to,
            "m.in_reply_to": {"event_id": part.reply_to or where.thread},
        }
    elif reply:
        content["m.relates_to"] = reply
    return content


def edit_content(part: Part, target: str) -> dict[str, Any]:
    """An edit (`m.replace`) of `target` to `part`: the new content, and a fallback
    marked `* ` for clients that do not apply edits."""
    new = _text(part)
    return {
        **new,
        "body": f"* {new['body']}",
        "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": target},
    }


def file_content(attachment: Attachment, url: str, where: Conversation) -> dict[str, Any]:
    """A file's event: `m.image` for an image, else `m.file`, with its `info` (type,
    size), in `where`'s thread."""
    msgtype = "m.image" if attachment.media_type.startswith("image/") else "m.file"
    content: dict[str, Any] = {
        "msgtype": msgtype,
        "body": attachment.name,
        "filename": attachment.name,
        "url": url,
        "info": {"mimetype": attachment.media_type, "size": attachment.size},
    }
    if where.thread:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": where.thread,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": where.thread},
        }
    return content
