"""What travels on the bridge's plain subjects: inbound bodies and outbound replies.

Inbound (`<prefix>.<channel>.in`): a plain UTF-8 text body, or a JSON object
`{"text": str, "user"?: str, "id"?: str, "attachments"?: [ref, ...]}` (any body
starting with `{` is read as JSON; a ref is a file already in ore's files bucket, the
`attachment` artifact of docs/protocol.md "Files"). Outbound (`.out`, and the answer to
a request): the reply text itself, or JSON `{"text", "thread_id", "in_reply_to"}`;
errors and notices have `error` / `notice` instead of `text`, and a relayed message
with files has `attachments` (refs; in text output, a `[file: ...]` line each). Every
outbound message carries the headers `Ore-Kind` (`text`, `error`, `notice`, `relayed`)
and, when known, `Ore-Thread-Id` and
`Ore-In-Reply-To`, so plain-text consumers can tell them apart too. A relayed copy also
carries `Nats-Msg-Id` (one per copy) and, when it is published again after a kill,
`Ore-Resent: true`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ore_conduit_nats.config import OutputFormat
from ore_core import OreError, describe_validation_error, jsonutil
from ore_core.artifacts import Attachment
from ore_core.conduit.inbound import derived_traceparent
from ore_core.errors import ArtifactError
from ore_core.events import MAX_ATTACHMENTS, MAX_USER_NAME_LENGTH
from ore_core.subjects import HEADER_KIND, HEADER_MSG_ID, HEADER_TRACEPARENT

__all__ = [
    "HEADER_IN_REPLY_TO",
    "HEADER_RESENT",
    "HEADER_THREAD_ID",
    "MAX_ID_LENGTH",
    "Inbound",
    "MalformedMessage",
    "Reply",
    "ReplyKind",
    "child_traceparent",
    "encode_reply",
    "parse_inbound",
]

HEADER_THREAD_ID = "Ore-Thread-Id"
"""The ore thread a reply belongs to."""
HEADER_IN_REPLY_TO = "Ore-In-Reply-To"
"""The sender's message id the reply answers (the JSON `id` or `Nats-Msg-Id`)."""
HEADER_RESENT = "Ore-Resent"
"""`true` on a relayed copy published again after a kill (same `Nats-Msg-Id`)."""
MAX_ID_LENGTH = 128
"""Longest message id accepted; the event id adds the bridge and channel names to it."""

ReplyKind = Literal["text", "error", "notice", "relayed"]
"""`relayed`: a message of another endpoint of a linked thread, with its label."""


class MalformedMessage(OreError):
    """An inbound body the bridge cannot turn into a message; the text says what to send."""


@dataclass(frozen=True, slots=True)
class Inbound:
    """One user message read from a channel; `id` is None when the sender gave none."""

    text: str
    user: str = ""
    id: str | None = None
    name: str = ""
    """The sender's display name (linked endpoints label the message with it)."""
    attachments: tuple[Attachment, ...] = ()
    """Files the sender put in ore's files bucket, by reference."""


class _JsonBody(BaseModel):
    """The JSON form of an inbound message. Unknown keys are refused: they are typos."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    text: str = Field(min_length=1)
    user: str = ""
    name: str = Field(default="", max_length=MAX_USER_NAME_LENGTH)
    id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_LENGTH)
    attachments: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)


def parse_inbound(
    data: bytes, headers: Mapping[str, str] | None = None, *, max_bytes: int
) -> Inbound:
    """The message in `data`; raises `MalformedMessage` naming what is wrong.

    The id is the JSON `id` when given, else the `Nats-Msg-Id` header, else None.
    """
    if len(data) > max_bytes:
        raise MalformedMessage(
            f"message of {len(data)} bytes is over the limit of {max_bytes} bytes (max_bytes)"
        )
    header_id = (headers or {}).get(HEADER_MSG_ID) or None
    if header_id is not None and len(header_id) > MAX_ID_LENGTH:
        raise MalformedMessage(f"{HEADER_MSG_ID} is longer than {MAX_ID_LENGTH} characters")
    if data.lstrip()[:1] == b"{":
        body = _parse_json(data)
        files = _attachments(body.attachments)
        return Inbound(body.text, body.user, body.id or header_id, body.name, files)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"message is not UTF-8 text: {exc.reason}") from None
    if not text.strip():
        raise MalformedMessage('empty message: send text, or JSON {"text": "..."}')
    return Inbound(text, "", header_id)


def _parse_json(data: bytes) -> _JsonBody:
    try:
        value = jsonutil.loads(data)
    except ValueError as exc:
        raise MalformedMessage(f"invalid JSON: {exc}") from None
    try:
        return _JsonBody.model_validate(value)
    except ValidationError as exc:
        problems = describe_validation_error(exc, whole="(body)")
        raise MalformedMessage(
            f"invalid JSON message ({problems}); send "
            '{"text": str, "user"?: str, "name"?: str, "id"?: str, "attachments"?: [ref]}'
        ) from None


def _attachments(refs: list[dict[str, Any]]) -> tuple[Attachment, ...]:
    try:
        return tuple(Attachment.from_dict(ref) for ref in refs)
    except ArtifactError as exc:
        raise MalformedMessage(f"invalid JSON message: {exc}") from None


@dataclass(frozen=True, slots=True)
class Reply:
    """One outbound message: a reply text, an error or a notice (with its severity)."""

    kind: ReplyKind
    content: str
    thread_id: str | None = None
    in_reply_to: str | None = None
    severity: str = ""
    message_id: str | None = None
    """`Nats-Msg-Id` of a relayed copy: one per copy, the same when it is sent again."""
    resent: bool = False
    """A copy sent again after a kill: it may have been published before."""
    attachments: tuple[Attachment, ...] = ()
    """The files of a relayed message, by reference."""


def encode_reply(reply: Reply, output: OutputFormat) -> tuple[bytes, dict[str, str]]:
    """The body and headers of `reply` in the configured output format."""
    headers: dict[str, str] = {HEADER_KIND: reply.kind}
    if reply.thread_id is not None:
        headers[HEADER_THREAD_ID] = reply.thread_id
    if reply.in_reply_to is not None:
        headers[HEADER_IN_REPLY_TO] = reply.in_reply_to
    if reply.message_id is not None:
        headers[HEADER_MSG_ID] = reply.message_id
    if reply.resent:
        headers[HEADER_RESENT] = "true"
    if output == "json":
        body: dict[str, Any] = {reply.kind: reply.content}
        if reply.kind == "notice":
            body["severity"] = reply.severity
        body |= {"thread_id": reply.thread_id, "in_reply_to": reply.in_reply_to}
        if reply.attachments:
            body["attachments"] = [a.to_dict() for a in reply.attachments]
        return jsonutil.dumps(body), headers
    if reply.kind == "error":
        return f"error: {reply.content}".encode(), headers
    if reply.kind == "notice":
        return f"{reply.severity}: {reply.content}".encode(), headers
    files = "".join(f"\n[file: {a.describe()} sha256 {a.sha256}]" for a in reply.attachments)
    return (reply.content + files).encode(), headers


def child_traceparent(headers: Mapping[str, str] | None) -> str:
    """The bridge's span of one message: the sender's `traceparent` header continued
    (`derived_traceparent`), else a new trace that is not sampled."""
    return derived_traceparent((headers or {}).get(HEADER_TRACEPARENT, ""))
