"""Events: what conduits send to the core (ingress) and what the core emits (output).

These pydantic models are the NATS wire schema, byte-compatible with the Go framework's
JSON (docs/go-compatibility.md, "Events"): every event is one JSON object with a `"kind"`.
An `ArtifactEvent` is the artifact's own JSON with `context` merged in, so a plugin that
registers a new artifact kind needs no schema change here. `context` is written only
when it names a provenance (the Go rule); inside it, `user` and `traceparent` only when
set. Unknown JSON fields are ignored so that an older peer can read a newer one's events.

Events are frozen: one event object is shared by every subscriber of a stream. The codec
(`encode_event`, `decode_ingress`, `decode_output`) is the one place bytes are made and
read; the validators behind it are built once at import.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ore_core import jsonutil
from ore_core.artifacts import (
    Artifact,
    Attachment,
    Delta,
    Image,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    decode_artifact,
)
from ore_core.errors import ArtifactError, OreError
from ore_core.ids import validate_thread_id
from ore_core.turn import Turn, turn_from_dict, turn_json, turn_to_dict

__all__ = [
    "ActivityEvent",
    "ArtifactEvent",
    "DeleteEvent",
    "DeliveryEvent",
    "FailureReason",
    "EditEvent",
    "DeliveryStatus",
    "ReportStatus",
    "ErrorEvent",
    "EventContext",
    "EventDecodeError",
    "IngressEvent",
    "InterruptEvent",
    "LifecycleEvent",
    "LifecyclePhase",
    "MAX_EVENT_ID_LENGTH",
    "MAX_IMAGES",
    "Notice",
    "NoticeEvent",
    "OutputEvent",
    "PropertiesEvent",
    "PropertyOperation",
    "MAX_EMOJI_LENGTH",
    "ReactEvent",
    "ReactionEvent",
    "RegenerateEvent",
    "SessionSwitchEvent",
    "Severity",
    "TurnCompleteEvent",
    "TurnDeletedEvent",
    "BATCH_KIND",
    "UserMessageEvent",
    "decode_batch",
    "decode_ingress",
    "decode_output",
    "decode_output_value",
    "encode_batch",
    "encode_event",
    "event_json_schema",
    "new_event_id",
]

MAX_EVENT_ID_LENGTH = 256  # ids come from platforms (Slack ts, Telegram ids); bound them
MAX_USER_NAME_LENGTH = 200
"""Longest `context.user_name` (a display name)."""
MAX_TURN_REF_LENGTH = 64
"""Longest turn id a user message's `metadata` may name."""
USER_TURN_METADATA = ("edit_of", "reply_to")
"""The keys a user message's `metadata` may carry onto its user turn."""


class EventDecodeError(OreError):
    """Bytes from the bus are not a valid event; the message names the kind and field."""


def new_event_id() -> str:
    """A fresh ingress event id (32 hex chars); conduits use the platform message id instead."""
    return uuid.uuid4().hex


def _is_empty(value: str) -> bool:
    return not value


class _Frozen(BaseModel):
    """Shared config: immutable, strict types (no "true" -> True), unknown keys ignored."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")


class EventContext(_Frozen):
    """Where an event came from, carried with it across tasks and processes.

    `provenance` names the conduit ("slack", "http", "app"); conduits use it to skip
    echoes of their own messages. `user` is the platform user; `traceparent` is the W3C
    trace context that links the logs of one message end to end.
    """

    # Not a field: the encoded tail of the events carrying this context, kept on it by
    # `_context_tail` (contexts are frozen, so it stays right). Pydantic leaves a slot
    # out of equality, hashing, copies, pickles and JSON; unset until first encoded.
    __slots__ = ("_tail",)
    if TYPE_CHECKING:
        _tail: bytes

    provenance: str = ""
    user: str = Field(default="", exclude_if=_is_empty)
    user_name: str = Field(default="", max_length=MAX_USER_NAME_LENGTH, exclude_if=_is_empty)
    """The sender's display name (a relayed message is labelled with it; issue 29)."""
    traceparent: str = Field(default="", exclude_if=_is_empty)


_NO_CONTEXT = EventContext()
# The slot's own accessors: an unset slot raises AttributeError at once, where
# `context._tail` would first run pydantic's `__getattr__` (once per context).
_get_tail = EventContext.__dict__["_tail"].__get__
_set_tail = EventContext.__dict__["_tail"].__set__


def _lacks_provenance(context: EventContext) -> bool:
    return not context.provenance


# Declared last in every event so that it is the last JSON key, as Go writes it.
_Context = Annotated[EventContext, Field(exclude_if=_lacks_provenance)]


def _event_id_field() -> Any:
    # A call (not an Annotated alias) so that type checkers see the default.
    return Field(default_factory=new_event_id, min_length=1, max_length=MAX_EVENT_ID_LENGTH)


class _Event(_Frozen):
    """Base of every event: frozen, with a `context` and a `kind`."""

    def with_context(self, context: EventContext) -> Self:
        """A copy of this event carrying `context` (how a stream stamps its provenance)."""
        return self.model_copy(update={"context": context})


# --- ingress --------------------------------------------------------------------------


_STRICT_INGRESS = ConfigDict(frozen=True, strict=True, extra="forbid")
"""Events only conduits send: an unknown field is a sender's mistake (a misspelt `content`
or `context`), refused like the control API refuses one, never dropped unseen."""


MAX_IMAGES = 8  # images of one user message; their bytes are bounded by the ingress limit
_IMAGE_URL = re.compile(r"data:image/[a-z0-9.+-]+;base64,[A-Za-z0-9+/]*={0,2}|https?://[^\s/]+\S*")


def _check_image_url(url: str) -> str:
    if not _IMAGE_URL.fullmatch(url):
        raise ValueError("must be a data:image/...;base64, URL or an http(s):// URL")
    return url


def _list_as_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value  # a list from Python callers


_Images = Annotated[
    tuple[Annotated[str, AfterValidator(_check_image_url)], ...],
    BeforeValidator(_list_as_tuple),
    Field(max_length=MAX_IMAGES, exclude_if=_is_empty),
]


MAX_ATTACHMENTS = 16  # files of one user message: references, their bytes are elsewhere


def _attachment(value: object) -> Attachment:
    """An `Attachment` from its artifact JSON (`kind` optional), or the object itself."""
    if isinstance(value, Attachment):
        return value
    if not isinstance(value, dict):
        raise ValueError("an attachment is an object: name, media_type, size, sha256, bucket")
    try:
        return Attachment.from_dict(value)
    except ArtifactError as exc:
        raise ValueError(str(exc)) from None


_ATTACHMENT_SCHEMA: JsonSchemaValue = {
    "type": "object",
    "description": "A file's reference (docs/protocol.md, Files): its bytes are in the bucket",
    "properties": {
        "kind": {"const": "attachment"},
        "name": {"type": "string"},
        "media_type": {"type": "string"},
        "size": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "bucket": {"type": "string"},
    },
    "required": ["name", "media_type", "size", "sha256", "bucket"],
}

_Attachments = Annotated[
    tuple[
        Annotated[
            Attachment,
            PlainValidator(_attachment),
            PlainSerializer(Attachment.to_dict),
            WithJsonSchema(_ATTACHMENT_SCHEMA),
        ],
        ...,
    ],
    BeforeValidator(_list_as_tuple),
    Field(max_length=MAX_ATTACHMENTS, exclude_if=_is_empty),
]


def _check_message_metadata(value: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(value) - set(USER_TURN_METADATA))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown}: a user message's metadata may name "
            f"{' and '.join(USER_TURN_METADATA)} (a turn id)"
        )
    for key, turn_id in value.items():
        if not 1 <= len(turn_id) <= MAX_TURN_REF_LENGTH:
            raise ValueError(f"{key}: a turn id of 1-{MAX_TURN_REF_LENGTH} characters")
    return value


def _lacks_metadata(value: dict[str, str]) -> bool:
    return not value


def _answered(value: bool) -> bool:
    return value  # the default: left off the wire


class UserMessageEvent(_Event):
    """A user wrote something. `id` de-duplicates redelivery (set it from the platform id).

    `metadata` may name the turn this message edits (`edit_of`) or replies to
    (`reply_to`); both are recorded on the user turn (issue 29). `answer` false records
    the message without asking the processor (an edit saved without a new answer).
    `images` (at most MAX_IMAGES, each a `data:image/...;base64,` or http(s) URL)
    become `Image` artifacts of the user turn, after its text; absent from the JSON
    when empty. `attachments` (at most MAX_ATTACHMENTS) are files uploaded to the
    object store (docs/protocol.md, "Files"): they become `Attachment` artifacts of
    the user turn after the images; absent from the JSON when empty.
    """

    model_config = _STRICT_INGRESS

    kind: Literal["user_message"] = "user_message"
    id: str = _event_id_field()
    content: str
    metadata: Annotated[
        dict[str, str], AfterValidator(_check_message_metadata), Field(exclude_if=_lacks_metadata)
    ] = Field(default_factory=dict)
    answer: Annotated[bool, Field(exclude_if=_answered)] = True
    images: _Images = ()
    attachments: _Attachments = ()
    context: _Context = _NO_CONTEXT

    def artifacts(self) -> tuple[Artifact, ...]:
        """What the user turn of this message holds: the text, images, then files."""
        images = tuple(Image(url) for url in self.images)
        return (Text(self.content), *images, *self.attachments)


class InterruptEvent(_Event):
    """Stop the turn in flight and drop queued messages of this thread."""

    model_config = _STRICT_INGRESS

    kind: Literal["interrupt"] = "interrupt"
    id: str = _event_id_field()
    context: _Context = _NO_CONTEXT


class SessionSwitchEvent(_Event):
    """Move the sender to another thread; ingress, and also emitted to tell conduits."""

    kind: Literal["session_switch"] = "session_switch"
    id: str = _event_id_field()
    session_id: Annotated[str, AfterValidator(validate_thread_id)]
    context: _Context = _NO_CONTEXT


_TurnRef = Annotated[str, Field(min_length=1, max_length=MAX_EVENT_ID_LENGTH)]
"""A user message named by its turn id or by the event id it was sent with (what a
conduit knows: the platform's message id); an edited message is found at its latest
revision."""


class DeleteEvent(_Event):
    """A user deleted a message (issue 29): its turn becomes a tombstone (`skip`: the
    model no longer sees it, the ledger keeps it) and a `turn_deleted` event tells the
    other endpoints."""

    model_config = _STRICT_INGRESS

    kind: Literal["delete"] = "delete"
    id: str = _event_id_field()
    turn_id: _TurnRef
    context: _Context = _NO_CONTEXT


class EditEvent(_Event):
    """A user edited a message (issue 36): the core interrupts what runs, records the new
    text and tells every endpoint (the user turn's `edit_of` names the replaced turn, so
    copies are edited in place). An edit of the thread's latest user message branches
    at its parent and is answered again (unless `answer` is false or the thread is a
    relay); on a linked thread an edit of an older one is recorded in place (the
    conversation stays where it is, no new answer). See docs/bridging.md."""

    model_config = _STRICT_INGRESS

    kind: Literal["edit"] = "edit"
    id: str = _event_id_field()
    turn_id: _TurnRef
    content: str
    answer: Annotated[bool, Field(exclude_if=_answered)] = True
    images: _Images = ()
    context: _Context = _NO_CONTEXT


class RegenerateEvent(_Event):
    """Answer a user message again (issue 44): the core moves to that user turn (named by
    it or by one of its answers) and runs the processor, which adds a sibling answer;
    the model sees the same messages and no user message is relayed again."""

    model_config = _STRICT_INGRESS

    kind: Literal["regenerate"] = "regenerate"
    id: str = _event_id_field()
    turn_id: _TurnRef
    context: _Context = _NO_CONTEXT


MAX_EMOJI_LENGTH = 64
"""Longest reaction: a Unicode emoji (with its modifiers) or a platform's custom one
(Discord's `name:id`, a Matrix annotation key)."""


def _check_emoji(value: str) -> str:
    if not value.strip():
        raise ValueError("an emoji is needed (a reaction of nothing is no reaction)")
    return value


_Emoji = Annotated[
    str, Field(min_length=1, max_length=MAX_EMOJI_LENGTH), AfterValidator(_check_emoji)
]


def _added(value: bool) -> bool:
    return not value  # the default: left off the wire


class ReactEvent(_Event):
    """A user reacted to a message with `emoji`, or took it back (`remove`; issue 39).

    The reaction is the turn's own state (its `reactions` metadata), told to every
    endpoint as a `reaction` event; it never starts a model turn. One person's one
    emoji counts once: the same reaction again, or the removal of one never made,
    changes nothing and tells nobody."""

    model_config = _STRICT_INGRESS

    kind: Literal["react"] = "react"
    id: str = _event_id_field()
    turn_id: _TurnRef
    emoji: _Emoji
    remove: Annotated[bool, Field(exclude_if=_added)] = False
    context: _Context = _NO_CONTEXT


IngressEvent = Annotated[
    UserMessageEvent
    | InterruptEvent
    | SessionSwitchEvent
    | DeleteEvent
    | EditEvent
    | RegenerateEvent
    | ReactEvent,
    Field(discriminator="kind"),
]
"""What a conduit may send to the core, told apart by `kind`."""


# --- output ---------------------------------------------------------------------------


class Severity(IntEnum):
    """How a notice is shown; ordered so that filters can say `>= Severity.WARN`.

    On the wire it is the label ("Success", "Info", "Warn", "Error"). Like Go, any other
    number is a valid severity labelled `Severity(n)`.
    """

    SUCCESS = 0
    INFO = 1
    WARN = 2
    ERROR = 3

    @classmethod
    def _missing_(cls, value: object) -> Severity | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        member = int.__new__(cls, value)
        member._name_ = f"Severity({value})"
        member._value_ = value
        return member

    @property
    def label(self) -> str:
        """The wire string of this severity."""
        return _SEVERITY_LABELS.get(self, self.name)

    def __str__(self) -> str:
        return self.label


_SEVERITY_LABELS = {
    Severity.SUCCESS: "Success",
    Severity.INFO: "Info",
    Severity.WARN: "Warn",
    Severity.ERROR: "Error",
}
_SEVERITY_BY_LABEL = {label.lower(): severity for severity, label in _SEVERITY_LABELS.items()}


def _parse_severity(value: object) -> Severity:
    if isinstance(value, Severity):
        return value
    if isinstance(value, str):
        # A label from a newer peer is still shown, as the neutral Info.
        return _SEVERITY_BY_LABEL.get(value.lower(), Severity.INFO)
    raise ValueError(f"severity must be a Severity or one of its labels, got {value!r}")


_SeverityField = Annotated[
    Severity,
    PlainValidator(_parse_severity),
    PlainSerializer(lambda severity: severity.label, return_type=str),
    WithJsonSchema({"type": "string", "enum": list(_SEVERITY_LABELS.values())}),
]


@dataclass(frozen=True, slots=True)
class Notice:
    """A message for the sender only (never stored, never sent to the model).

    Interceptors and slash commands return these; the stream emits each as a
    `NoticeEvent` carrying the context of the event that caused it.
    """

    content: str
    severity: Severity = Severity.INFO


def _validate_artifact(value: object) -> Artifact:
    if not isinstance(value, Artifact):
        raise ValueError(f"expected an Artifact, got {type(value).__name__}")
    if value.kind in _OUTPUT_EVENT_KINDS:
        raise ValueError(f'artifact kind "{value.kind}" is an event kind; rename the kind')
    return value


_ArtifactField = Annotated[
    Artifact,
    PlainValidator(_validate_artifact),
    PlainSerializer(lambda artifact: artifact.to_dict(), return_type=dict[str, Any]),
    WithJsonSchema({"type": "object"}),
]


class ArtifactEvent(_Event):
    """One artifact as it streams (deltas) or completes; `kind` is the artifact's kind.

    JSON: the artifact's own object plus `context`, e.g. `{"kind":"text","content":"hi"}`.
    Artifact kinds must therefore not use the key `context` nor an event kind as name.
    """

    artifact: _ArtifactField
    context: _Context = _NO_CONTEXT

    @property
    def kind(self) -> str:
        """The artifact's kind (`text_delta`, `text`, `tool_call`, a plugin's kind...)."""
        return self.artifact.kind

    @classmethod
    def of(cls, artifact: Artifact, context: EventContext) -> ArtifactEvent:
        """`ArtifactEvent(artifact=artifact, context=context)` from the model's validator
        without `BaseModel.__init__` (see `TurnCompleteEvent.of`): every delta and
        artifact of a turn is made this way."""
        if cls is ArtifactEvent:
            return _validate_artifact_event({"artifact": artifact, "context": context})
        return cls(artifact=artifact, context=context)

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, data: Any) -> Any:
        # Wire form has the artifact's "kind" at top level; keyword form has "artifact".
        if not isinstance(data, Mapping) or "kind" not in data:
            return data
        fields = dict(data)
        context = fields.pop("context", _NO_CONTEXT)
        try:
            artifact = decode_artifact(fields)
        except (ArtifactError, TypeError, KeyError, AttributeError) as exc:
            # Plugin from_dict code may fail in any of these ways on untrusted input.
            raise ValueError(str(exc)) from exc
        return {"artifact": artifact, "context": context}

    @model_serializer(mode="wrap")
    def _to_wire(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields: dict[str, Any] = handler(self)
        wire: dict[str, Any] = fields.pop("artifact")
        wire.update(fields)
        return wire

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler.resolve_ref_schema(handler(core_schema))
        properties = schema["properties"]
        schema["properties"] = {"kind": {"type": "string"}, "context": properties["context"]}
        schema["required"] = ["kind"]
        schema["additionalProperties"] = True
        schema["description"] = "An artifact's own JSON object (any kind not listed) + context."
        return schema


def _validate_turn(value: object) -> Turn:
    if isinstance(value, Turn):
        turn = value
    elif isinstance(value, Mapping):
        try:
            turn = turn_from_dict(value)
        except OreError as exc:
            raise ValueError(str(exc)) from exc
    else:
        raise ValueError(f"expected a Turn or a turn JSON object, got {type(value).__name__}")
    for artifact in turn.artifacts:
        if isinstance(artifact, Delta):
            raise ValueError(f'turn {turn.id!r} holds delta artifact "{artifact.kind}"')
    return turn


_TURN_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A turn; artifacts in {kind, data} envelopes (docs/go-compatibility.md).",
    "properties": {
        "id": {"type": "string"},
        "parent_id": {"type": "string"},
        "role": {"type": "string"},
        "artifacts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"kind": {"type": "string"}, "data": {"type": "object"}},
                "required": ["kind", "data"],
            },
        },
        "timestamp": {"type": "string", "format": "date-time"},
        "metadata": {"type": "object"},
    },
}

_TurnField = Annotated[
    Turn,
    PlainValidator(_validate_turn),
    PlainSerializer(turn_to_dict, return_type=dict[str, Any]),
    WithJsonSchema(_TURN_JSON_SCHEMA),
]


class TurnCompleteEvent(_Event):
    """A finished turn (user, assistant or tool), with its complete artifacts."""

    kind: Literal["turn_complete"] = "turn_complete"
    turn: _TurnField
    context: _Context = _NO_CONTEXT

    @classmethod
    def of(cls, turn: Turn, context: EventContext) -> TurnCompleteEvent:
        """`TurnCompleteEvent(turn=turn, context=context)` from the model's validator
        without `BaseModel.__init__`: the same checks and errors, and fewer instructions
        than skipping validation as `ArtifactEvent.of` does (measured: a turn's check
        for deltas costs more in Python than in the validator)."""
        if cls is TurnCompleteEvent:
            return _validate_turn_complete({"turn": turn, "context": context})
        return cls(turn=turn, context=context)


LifecyclePhase = Literal["submitted", "streaming", "cancelled", "done"]
"""submitted: model called; streaming: first artifact; cancelled; done: event handled."""


class LifecycleEvent(_Event):
    """Progress of one ingress event; every handled event ends with `done`."""

    kind: Literal["lifecycle"] = "lifecycle"
    phase: LifecyclePhase
    context: _Context = _NO_CONTEXT

    @classmethod
    def of(cls, phase: LifecyclePhase, context: EventContext) -> LifecycleEvent:
        """`LifecycleEvent(phase=phase, context=context)` from the model's validator
        without `BaseModel.__init__` (see `TurnCompleteEvent.of`; cheaper here too)."""
        if cls is LifecycleEvent:
            return _validate_lifecycle({"phase": phase, "context": context})
        return cls(phase=phase, context=context)


# The validators `of` calls (a model's validator is what its constructor runs).
_validate_turn_complete: Callable[[dict[str, Any]], TurnCompleteEvent] = (
    TurnCompleteEvent.__pydantic_validator__.validate_python
)
_validate_lifecycle: Callable[[dict[str, Any]], LifecycleEvent] = (
    LifecycleEvent.__pydantic_validator__.validate_python
)
_validate_artifact_event: Callable[[dict[str, Any]], ArtifactEvent] = (
    ArtifactEvent.__pydantic_validator__.validate_python
)


class PropertyOperation(_Frozen):
    """One change to a thread's metadata; `value` is left out of the JSON when empty."""

    op: Literal["set", "delete"]
    key: str
    value: str = Field(default="", exclude_if=_is_empty)


def _as_tuple(
    operations: Sequence[PropertyOperation] | None,
) -> Sequence[PropertyOperation] | None:
    # Callers may pass a list; the frozen event keeps a tuple nobody can append to.
    return None if operations is None else tuple(operations)


class PropertiesEvent(_Event):
    """Metadata of the thread changed (status bars show these). `None` is `null` on the wire."""

    kind: Literal["properties"] = "properties"
    operations: Annotated[Sequence[PropertyOperation] | None, AfterValidator(_as_tuple)] = None
    context: _Context = _NO_CONTEXT


class NoticeEvent(_Event):
    """A `Notice` on the wire: shown to the sender, never stored."""

    kind: Literal["notice"] = "notice"
    content: str
    severity: _SeverityField = Severity.INFO
    context: _Context = _NO_CONTEXT

    @classmethod
    def from_notice(cls, notice: Notice, context: EventContext = _NO_CONTEXT) -> NoticeEvent:
        """The event for `notice`, answering an event that carried `context`."""
        return cls(content=notice.content, severity=notice.severity, context=context)


class ErrorEvent(_Event):
    """Handling an event failed; `message` is for humans, `code` (optional) for programs."""

    kind: Literal["error"] = "error"
    message: str
    code: str = Field(default="", exclude_if=_is_empty)
    context: _Context = _NO_CONTEXT


class ActivityEvent(_Event):
    """Something is (or stopped) happening in the background, e.g. "compacting"."""

    kind: Literal["activity"] = "activity"
    active: bool
    description: str = ""
    context: _Context = _NO_CONTEXT


DeliveryStatus = Literal["delivered", "retrying", "failed"]
FailureReason = Literal[
    "rate_limited",
    "platform_unavailable",
    "refused_permission",
    "refused_too_large",
    "refused_unsupported",
]
"""Why a copy is retrying or failed: one list for every platform (mautrix's message
statuses, mapped), carried in delivery reports so an operator can count them."""
ReportStatus = Literal["sending", "delivered", "retrying", "failed"]
"""What a conduit reports of a copy (`deliveries.report`): `sending` claims the copy
before it is published, on a platform whose messages cannot be read back."""


class DeliveryEvent(_Event):
    """How the copy of `turn` fared on `endpoint` (a linked namespace), as its conduit
    reported it (`retrying`, `failed`; issue 29): the origin endpoint shows it.
    `origin` names the namespace the turn came from, when the reporter said it;
    `reason` why it is retrying or failed (`FailureReason`; empty in older reports)."""

    kind: Literal["delivery"] = "delivery"
    turn: str
    endpoint: str
    status: DeliveryStatus
    detail: str = Field(default="", exclude_if=_is_empty)
    reason: FailureReason | Literal[""] = Field(default="", exclude_if=_is_empty)
    origin: str = Field(default="", exclude_if=_is_empty)
    context: _Context = _NO_CONTEXT


class TurnDeletedEvent(_Event):
    """`turn` was deleted (a `delete` ingress event): endpoints delete their copy."""

    kind: Literal["turn_deleted"] = "turn_deleted"
    turn: str
    context: _Context = _NO_CONTEXT


class ReactionEvent(_Event):
    """A `react` changed the reactions of `turn`: `emoji` added (or, `remove`, taken
    back) by the event's sender. `reactors` are everyone who reacts with `emoji` now
    (`namespace:user`), so an endpoint shows it while someone elsewhere does;
    `excerpt` is the start of the turn's text (what a platform without reactions
    quotes in its short line); `message` the id a user turn was sent with (its
    platform id where it was written: what that endpoint reacts on)."""

    kind: Literal["reaction"] = "reaction"
    turn: str
    message: str = Field(default="", exclude_if=_is_empty)
    emoji: str
    remove: Annotated[bool, Field(exclude_if=_added)] = False
    reactors: Annotated[tuple[str, ...], BeforeValidator(_list_as_tuple)] = ()
    excerpt: str = Field(default="", exclude_if=_is_empty)
    context: _Context = _NO_CONTEXT


_FIXED_OUTPUT_EVENTS: dict[str, type[_Event]] = {
    "turn_complete": TurnCompleteEvent,
    "lifecycle": LifecycleEvent,
    "properties": PropertiesEvent,
    "notice": NoticeEvent,
    "error": ErrorEvent,
    "activity": ActivityEvent,
    "session_switch": SessionSwitchEvent,
    "delivery": DeliveryEvent,
    "turn_deleted": TurnDeletedEvent,
    "reaction": ReactionEvent,
}
_OUTPUT_EVENT_KINDS = frozenset(_FIXED_OUTPUT_EVENTS)
_ARTIFACT_TAG = "artifact"


def _output_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    if not isinstance(kind, str) or not kind:
        return None
    return kind if kind in _OUTPUT_EVENT_KINDS else _ARTIFACT_TAG


OutputEvent = Annotated[
    Annotated[TurnCompleteEvent, Tag("turn_complete")]
    | Annotated[LifecycleEvent, Tag("lifecycle")]
    | Annotated[PropertiesEvent, Tag("properties")]
    | Annotated[NoticeEvent, Tag("notice")]
    | Annotated[ErrorEvent, Tag("error")]
    | Annotated[ActivityEvent, Tag("activity")]
    | Annotated[SessionSwitchEvent, Tag("session_switch")]
    | Annotated[DeliveryEvent, Tag("delivery")]
    | Annotated[TurnDeletedEvent, Tag("turn_deleted")]
    | Annotated[ReactionEvent, Tag("reaction")]
    | Annotated[ArtifactEvent, Tag(_ARTIFACT_TAG)],
    Discriminator(
        _output_tag,
        custom_error_type="missing_kind",
        custom_error_message="an event needs a non-empty string 'kind'",
    ),
]
"""What the core emits: the fixed kinds above, and any other kind as an `ArtifactEvent`."""


# --- codec ----------------------------------------------------------------------------

_INGRESS: TypeAdapter[IngressEvent] = TypeAdapter(IngressEvent)
_OUTPUT: TypeAdapter[OutputEvent] = TypeAdapter(OutputEvent)
_OUTPUT_VALIDATORS = {
    kind: cls.__pydantic_validator__ for kind, cls in _FIXED_OUTPUT_EVENTS.items()
}
_ARTIFACT_VALIDATOR = ArtifactEvent.__pydantic_validator__


_LIFECYCLE_HEADS = {
    phase: b'{"kind":"lifecycle","phase":"' + phase.encode() + b'"'
    for phase in ("submitted", "streaming", "cancelled", "done")
}
_TURN_COMPLETE_HEAD = b'{"kind":"turn_complete","turn":'
_USER_MESSAGE_HEAD = b'{"kind":"user_message","id":'
_CONTENT_KEY = b',"content":'
_METADATA_KEY = b',"metadata":'
_NO_ANSWER = b',"answer":false'
# Artifacts whose JSON is `{"kind": KIND, "content": <str>}`: their events skip pydantic
# and `to_dict` (exact classes only: a subclass may write more).
_CONTENT_HEADS: dict[type[Artifact], bytes] = {
    cls: b'{"kind":"' + cls.KIND.encode() + b'","content":'
    for cls in (Text, TextDelta, Reasoning, ReasoningDelta)
}
_NO_CONTEXT_TAIL = b"}"
# `jsonutil.dumps` without its wrapper's call, for the strings of every turn's events.
_dumps = orjson.dumps


def _context_value(context: EventContext) -> dict[str, str]:
    value = {"provenance": context.provenance}
    if context.user:
        value["user"] = context.user
    if context.user_name:
        value["user_name"] = context.user_name
    if context.traceparent:
        value["traceparent"] = context.traceparent
    return value


def _context_tail(context: EventContext) -> bytes:
    """What ends an event's JSON: `,"context":{...}}`, or `}` without a provenance.

    Encoded once per context and kept on it: a turn's events all carry its ingress
    event's context object.
    """
    try:
        tail: bytes = _get_tail(context)
        return tail
    except AttributeError:  # not encoded yet
        pass
    except TypeError:  # not an EventContext (an event made by `model_construct`)
        return _encode_tail(context)
    tail = _encode_tail(context)
    _set_tail(context, tail)
    return tail


def _encode_tail(context: EventContext) -> bytes:
    if not context.provenance:
        return _NO_CONTEXT_TAIL
    return b',"context":' + _dumps(_context_value(context)) + b"}"


def encode_event(event: IngressEvent | OutputEvent) -> bytes:
    """The event's compact JSON bytes (one serialisation; what goes on the bus).

    The events of every turn (user_message, lifecycle, turn_complete, text and
    reasoning artifacts and their deltas) are written directly, byte for byte what
    the pydantic serializer writes at a fraction of the cost (worth 2.7 % of the core's
    bytecodes per turn; `tests/test_hand_encoders.py` sets every field of every model
    written here, so a field added to one fails it until this writes the field): a
    turn_complete embeds the turn's cached JSON (`turn_json`, also what the store
    writes), and an event's context is encoded once per context. The rest go through
    pydantic.
    """
    cls = type(event)
    if cls is ArtifactEvent:
        artifact = event.artifact  # type: ignore[union-attr]
        head = _CONTENT_HEADS.get(type(artifact))
        if head is not None:
            content = artifact.content  # type: ignore[union-attr]
            if type(content) is str:  # a dataclass field: not checked when made
                return head + _dumps(content) + _context_tail(event.context)
        return event.__pydantic_serializer__.to_json(event)
    if cls is LifecycleEvent:
        return _LIFECYCLE_HEADS[event.phase] + _context_tail(event.context)  # type: ignore[union-attr]
    if cls is TurnCompleteEvent:
        try:
            turn = turn_json(event.turn)  # type: ignore[union-attr,arg-type]
        except TypeError:  # a plugin artifact's value orjson cannot write
            return event.__pydantic_serializer__.to_json(event)
        return _TURN_COMPLETE_HEAD + turn + _context_tail(event.context)
    if cls is UserMessageEvent and not event.images and not event.attachments:  # type: ignore[union-attr]
        return (
            _USER_MESSAGE_HEAD
            + _dumps(event.id)  # type: ignore[union-attr]
            + _CONTENT_KEY
            + _dumps(event.content)  # type: ignore[union-attr]
            + (_METADATA_KEY + _dumps(event.metadata) if event.metadata else b"")  # type: ignore[union-attr]
            + (b"" if event.answer else _NO_ANSWER)  # type: ignore[union-attr]
            + _context_tail(event.context)
        )
    return event.__pydantic_serializer__.to_json(event)


def _encode_with_pydantic(event: IngressEvent | OutputEvent) -> bytes:
    """`encode_event` without the fast paths (the reference its tests compare with)."""
    return event.__pydantic_serializer__.to_json(event)


def _decode_error(direction: str, exc: ValidationError) -> EventDecodeError:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}: {error['msg']}" if where else error["msg"])
    return EventDecodeError(
        f"cannot decode {direction} event: {'; '.join(problems)} "
        "(see ore_core.events.event_json_schema() for the schema)"
    )


# What `_INGRESS.validate_json` does with its defaults, without its Python frame (once
# per ingress message).
_validate_ingress_json = _INGRESS.validator.validate_json


def decode_ingress(data: bytes | str) -> IngressEvent:
    """Parse and validate an ingress event; raises EventDecodeError on any problem."""
    try:
        event: IngressEvent = _validate_ingress_json(data)
        return event
    except ValidationError as exc:
        raise _decode_error("ingress", exc) from exc


def decode_output(data: bytes | str) -> OutputEvent:
    """Parse and validate an output event (unknown kinds become ArtifactEvents)."""
    try:
        return _OUTPUT.validate_json(data)
    except ValidationError as exc:
        raise _decode_error("output", exc) from exc


def decode_output_value(value: Any) -> OutputEvent:
    """Validate an output event already parsed from JSON (e.g. one event of a batch).

    The event's own model validates it (what the union does after telling the kind
    apart, without the union's dispatch: about a third cheaper per event); an event it
    refuses is validated again through the union, so the error names `kind.field`
    exactly as `decode_output` does.
    """
    kind = value.get("kind") if type(value) is dict else None
    if type(kind) is str and kind:
        if kind == "lifecycle":
            key = _lifecycle_key(value)
            if key is not None:
                return _plain_lifecycle(key, value)
        validator = _OUTPUT_VALIDATORS.get(kind, _ARTIFACT_VALIDATOR)
        try:
            event: OutputEvent = validator.validate_python(value)
            return event
        except ValidationError:
            pass
    try:
        return _OUTPUT.validate_python(value)
    except ValidationError as exc:
        raise _decode_error("output", exc) from exc


_PLAIN_LIFECYCLES: dict[tuple[str, str], OutputEvent] = {}
_PLAIN_LIFECYCLES_MAX = 256


def _lifecycle_key(value: dict[str, Any]) -> tuple[str, str] | None:
    """(phase, provenance) of `{"kind":"lifecycle","phase":P,"context":{"provenance":N}}`.

    None for any other shape: those are validated each time.
    """
    if len(value) != 3:
        return None
    phase = value.get("phase")
    context = value.get("context")
    if type(phase) is not str or type(context) is not dict or len(context) != 1:
        return None
    provenance = context.get("provenance")
    return None if type(provenance) is not str else (phase, provenance)


def _plain_lifecycle(key: tuple[str, str], value: dict[str, Any]) -> OutputEvent:
    """The lifecycle event of a plain value, validated once per (phase, provenance).

    A conduit decodes three of these per turn (submitted, streaming, done) and they are
    all alike: the value is fully determined by its key, and the event is frozen, so
    one validated instance serves every equal value. A value that fails validation is
    not kept and fails again (through `decode_output_value`'s union) each time.
    """
    global _PLAIN_LIFECYCLES
    event = _PLAIN_LIFECYCLES.get(key)
    if event is None:
        try:
            event = _OUTPUT_VALIDATORS["lifecycle"].validate_python(value)
        except ValidationError:
            try:
                return _OUTPUT.validate_python(value)
            except ValidationError as exc:
                raise _decode_error("output", exc) from exc
        if len(_PLAIN_LIFECYCLES) >= _PLAIN_LIFECYCLES_MAX:
            _PLAIN_LIFECYCLES = {}
        _PLAIN_LIFECYCLES[key] = event
    return event


def event_json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the wire: `$defs` IngressEvent and OutputEvent, and either."""
    schemas, definitions = TypeAdapter.json_schemas(
        [("IngressEvent", "validation", _INGRESS), ("OutputEvent", "validation", _OUTPUT)],
        title="ore events",
    )
    defs: dict[str, Any] = definitions.get("$defs", {})
    for (name, _mode), schema in schemas.items():
        defs[name] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ore events",
        "description": "Ingress events (conduit -> core) and output events (core -> conduits).",
        "$defs": defs,
        "anyOf": [{"$ref": "#/$defs/IngressEvent"}, {"$ref": "#/$defs/OutputEvent"}],
    }


# --- batches --------------------------------------------------------------------------

BATCH_KIND = "batch"
"""`kind` of a message that carries several output events: `{"kind":"batch","events":[...]}`."""

_BATCH_HEAD = b'{"kind":"batch","events":['
_BATCH_TAIL = b"]}"


class _Batch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["batch"]
    events: list[OutputEvent]


_BATCH: TypeAdapter[_Batch] = TypeAdapter(_Batch)


def encode_batch(encoded: Sequence[bytes]) -> bytes:
    """One batch message from events already encoded by `encode_event`.

    The events are joined, never serialised again: one serialisation per event.
    """
    return _BATCH_HEAD + b",".join(encoded) + _BATCH_TAIL


def decode_batch(data: bytes | str) -> list[OutputEvent]:
    """The events of a batch message, in order (one parse and validation for all).

    An event that does not decode is skipped (the others still count); a payload that
    is not a batch at all raises EventDecodeError.
    """
    try:
        return _BATCH.validate_json(data).events
    except ValidationError as exc:
        first = exc
    try:
        value = jsonutil.loads(data)
    except ValueError:
        raise _decode_error("batch", first) from first
    items = value.get("events") if isinstance(value, dict) else None
    if not isinstance(items, list) or value.get("kind") != BATCH_KIND:
        raise _decode_error("batch", first) from first
    events = []
    for item in items:
        try:
            events.append(_OUTPUT.validate_python(item))
        except ValidationError:
            continue  # one bad event must not hide the rest of the turn
    return events
