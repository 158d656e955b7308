"""Artifacts: the typed content blocks a turn is made of.

Every artifact has a string `kind` and an own JSON object that includes that kind.
Persisted artifacts travel in the envelope `{"kind": k, "data": <own JSON>}` so that
readers can pick the class before decoding. The kind registry is open: plugins add
kinds with `registry.register(cls)`. Deltas are streaming fragments and are never
persisted. A kind this process does not know is kept as an `UnknownArtifact` that
re-encodes to the same JSON, so one unknown kind never makes a thread unreadable.

Artifacts are immutable values: equality is by field, and `merge_into` returns new
objects rather than mutating the accumulator. Decoding is tolerant like the Go
framework: a missing or null field takes its zero value; a field of the wrong JSON
type is an `ArtifactError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import (
    Any,
    ClassVar,
    Literal,
    Protocol,
    Self,
    TypeVar,
    cast,
    get_args,
    runtime_checkable,
)

import orjson

from ore_core.errors import ArtifactError

__all__ = [
    "PERSISTABLE_KINDS",
    "STOP_REASONS",
    "Accumulable",
    "Artifact",
    "ArtifactRegistry",
    "Delta",
    "Image",
    "LLMRenderer",
    "MarkdownRenderer",
    "Reasoning",
    "ReasoningDelta",
    "ReasoningSignature",
    "StatusContributor",
    "StopReason",
    "StopReasonValue",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolResult",
    "Truncation",
    "UnknownArtifact",
    "Usage",
    "decode_artifact",
    "decode_envelope",
    "encode_envelope",
    "registry",
]


class Artifact:
    """Base of every artifact kind.

    Subclasses set the class variable `KIND` and implement `to_dict` (their own JSON,
    including `"kind"`) and `from_dict` (the inverse, tolerant of a missing `kind`).
    """

    __slots__ = ()
    KIND: ClassVar[str] = ""

    @property
    def kind(self) -> str:
        """The kind string this artifact is registered and serialised under."""
        return self.KIND

    def to_dict(self) -> dict[str, Any]:
        """The artifact's own JSON object, `kind` included."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build the artifact from its own JSON object; raise on missing or bad fields."""
        raise NotImplementedError


class Delta(Artifact):
    """Marker for ephemeral streaming fragments: never persisted, never registered."""

    __slots__ = ()


class Accumulable(Delta):
    """A delta that merges into a complete artifact, keyed by `accumulator_key()`."""

    __slots__ = ()

    def accumulator_key(self) -> str:
        """Deltas with the same key merge into one artifact (e.g. `tool_call:0`)."""
        raise NotImplementedError

    def merge_into(self, acc: Artifact | None) -> Artifact:
        """Return the accumulated artifact after this delta (`acc` is None at first)."""
        raise NotImplementedError


@runtime_checkable
class LLMRenderer(Protocol):
    """A tool result value that knows how to present itself to the model."""

    def marshal_llm(self) -> str:
        """The text the model sees for this value."""
        ...


@runtime_checkable
class MarkdownRenderer(Protocol):
    """A tool call display or result value that knows how to present itself to humans."""

    def marshal_markdown(self) -> str:
        """The Markdown a person sees for this value."""
        ...


@runtime_checkable
class StatusContributor(Protocol):
    """A tool result value that also updates the conversation's status properties."""

    def status(self) -> dict[str, str]:
        """Status keys to set, e.g. `{"cwd": "/tmp"}`."""
        ...


_T = TypeVar("_T", str, int, bool, dict)  # type: ignore[type-arg]
_JSON_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object"}


def _optional(data: Mapping[str, Any], key: str, expected: type[_T]) -> _T | None:
    """The field's value, None when missing or null; bools never pass as integers."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, expected) and (expected is bool or not isinstance(value, bool)):
        return value
    raise ArtifactError(f'field "{key}" must be {_JSON_TYPE_NAMES[expected]}, got {value!r}')


def _field(data: Mapping[str, Any], key: str, expected: type[_T], default: _T) -> _T:
    """The field's value, `default` (the Go zero value) when missing or null."""
    value = _optional(data, key, expected)
    return default if value is None else value


def _json_text(value: Any, *, indent: bool = False) -> str | None:
    """JSON text of a tool value, or None when it cannot be serialised.

    orjson directly (not `jsonutil`) because rendering needs options the ledger codec
    does not: indentation, and non-string dict keys (Go marshals `map[int]...`).
    """
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(value, option=option).decode()
    except TypeError:  # orjson.JSONEncodeError: unsupported type, circular, huge int
        return None


@dataclass(frozen=True, slots=True)
class Text(Artifact):
    """Plain (Markdown) text from any role."""

    KIND: ClassVar[str] = "text"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "text", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_field(data, "content", str, ""))


@dataclass(frozen=True, slots=True)
class Reasoning(Artifact):
    """Model reasoning ("thinking") text, shown to humans, optional for models."""

    KIND: ClassVar[str] = "reasoning"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "reasoning", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_field(data, "content", str, ""))


@dataclass(frozen=True, slots=True)
class Image(Artifact):
    """An image by URL (http(s) or data: URL)."""

    KIND: ClassVar[str] = "image"
    url: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", "url": self.url}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_field(data, "url", str, ""))


@dataclass(frozen=True, slots=True)
class ToolCall(Artifact):
    """A model's request to run a tool.

    `arguments` is the raw JSON text the model produced (it may be invalid JSON; the
    tool handler reports that). `display` is for humans only: any value, rendered by
    `markdown_string()`. Only its rendering is persisted, so after a round trip
    `display` is that string, or None when it said nothing beyond the arguments.
    """

    KIND: ClassVar[str] = "tool_call"
    id: str
    name: str
    arguments: str
    display: Any = None

    def llm_string(self) -> str:
        """What the model sees: always the raw arguments, never the display."""
        return self.arguments

    def markdown_string(self) -> str:
        """What people see: the display (rendered, string as-is, else JSON) or the arguments."""
        display = self.display
        if display is None:
            return self.arguments
        if isinstance(display, MarkdownRenderer):
            return display.marshal_markdown()
        if isinstance(display, str):
            return display
        rendered = _json_text(display)
        return self.arguments if rendered is None else rendered

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "tool_call",
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }
        if self.display is not None:
            shown = self.markdown_string()
            if shown and shown != self.arguments:
                out["display"] = shown
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            _field(data, "id", str, ""),
            _field(data, "name", str, ""),
            _field(data, "arguments", str, ""),
            _optional(data, "display", str),
        )


@dataclass(frozen=True, slots=True)
class Truncation:
    """How much of a tool's output was cut before the model saw it.

    `style` is "head" or "tail" when something was cut; `recovery_hint` tells the model
    how to fetch the rest. Not an artifact itself: it rides on `ToolResult`.
    """

    original_bytes: int = 0
    original_lines: int = 0
    shown_bytes: int = 0
    shown_lines: int = 0
    style: str = ""
    recovery_hint: str = ""

    def truncated(self) -> bool:
        """True when fewer bytes were shown than the tool produced."""
        return self.original_bytes > self.shown_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON object: `shown_*` always, the other fields only when set."""
        out: dict[str, Any] = {}
        if self.original_bytes:
            out["original_bytes"] = self.original_bytes
        if self.original_lines:
            out["original_lines"] = self.original_lines
        out["shown_bytes"] = self.shown_bytes
        out["shown_lines"] = self.shown_lines
        if self.style:
            out["style"] = self.style
        if self.recovery_hint:
            out["recovery_hint"] = self.recovery_hint
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of `to_dict`; missing fields are zero."""
        return cls(
            _field(data, "original_bytes", int, 0),
            _field(data, "original_lines", int, 0),
            _field(data, "shown_bytes", int, 0),
            _field(data, "shown_lines", int, 0),
            _field(data, "style", str, ""),
            _field(data, "recovery_hint", str, ""),
        )


@dataclass(frozen=True, slots=True)
class ToolResult(Artifact):
    """The outcome of one tool call, answering `tool_call_id`.

    `content` is the formatted text; `value` is the tool's native result, kept in
    memory for renderers and never persisted. The JSON writes `markdown_string()` as
    `content`, so a decoded result has `value=None` and the rendered Markdown.
    """

    KIND: ClassVar[str] = "tool_result"
    tool_call_id: str
    content: str = ""
    value: Any = None
    is_error: bool = False
    truncation: Truncation | None = None

    def truncated(self) -> bool:
        """True when the tool's output was cut before the model saw it."""
        return self.truncation is not None and self.truncation.truncated()

    def _error_text(self) -> str | None:
        """An error's content wins over the value, so its `**Error:**` footer survives."""
        return self.content if self.is_error and self.content else None

    def llm_string(self) -> str:
        """What the model sees: error content, the value's own rendering or JSON, or content."""
        error = self._error_text()
        if error is not None:
            return error
        if self.value is None:
            return self.content
        if isinstance(self.value, LLMRenderer):
            return self.value.marshal_llm()
        rendered = _json_text(self.value)
        return self.content if rendered is None else rendered

    def markdown_string(self) -> str:
        """What people see: error content, the value's Markdown or a JSON block, or content."""
        error = self._error_text()
        if error is not None:
            return error
        if self.value is None:
            return self.content
        if isinstance(self.value, MarkdownRenderer):
            return self.value.marshal_markdown()
        rendered = _json_text(self.value, indent=True)
        return self.content if rendered is None else f"```json\n{rendered}\n```"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "tool_result",
            "tool_call_id": self.tool_call_id,
            "content": self.markdown_string(),
            "is_error": self.is_error,
        }
        if self.truncation is not None:
            out["truncation"] = self.truncation.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        truncation = _optional(data, "truncation", dict)
        return cls(
            _field(data, "tool_call_id", str, ""),
            _field(data, "content", str, ""),
            None,
            _field(data, "is_error", bool, False),
            None if truncation is None else Truncation.from_dict(truncation),
        )


@dataclass(frozen=True, slots=True)
class Usage(Artifact):
    """Token counts for one model call.

    `thinking_tokens` is None when the provider does not report it, which is not the
    same as reporting 0: the JSON omits None but keeps 0.
    """

    KIND: ClassVar[str] = "usage"
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "usage",
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cache_read_tokens:
            out["cache_read_tokens"] = self.cache_read_tokens
        if self.cache_write_tokens:
            out["cache_write_tokens"] = self.cache_write_tokens
        if self.thinking_tokens is not None:
            out["thinking_tokens"] = self.thinking_tokens
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            _field(data, "prompt_tokens", int, 0),
            _field(data, "completion_tokens", int, 0),
            _field(data, "total_tokens", int, 0),
            _field(data, "cache_read_tokens", int, 0),
            _field(data, "cache_write_tokens", int, 0),
            _optional(data, "thinking_tokens", int),
        )


StopReasonValue = Literal["stop", "length", "tool_use", "refusal", "other"]
"""Why a model stopped: finished, hit the token limit, wants tools, refused, or else."""

STOP_REASONS: frozenset[str] = frozenset(get_args(StopReasonValue))


@dataclass(frozen=True, slots=True)
class StopReason(Artifact):
    """Why the model ended its turn; any other reason raises `ArtifactError`."""

    KIND: ClassVar[str] = "stop_reason"
    reason: StopReasonValue

    def __post_init__(self) -> None:
        if self.reason not in STOP_REASONS:
            raise ArtifactError(
                f'invalid stop reason "{self.reason}": must be one of '
                + ", ".join(get_args(StopReasonValue))
            )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "stop_reason", "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        # The constructor rejects anything outside StopReasonValue.
        return cls(cast(StopReasonValue, _field(data, "reason", str, "")))


@dataclass(frozen=True, slots=True)
class ReasoningSignature(Artifact):
    """Opaque provider data that must go back with the reasoning it signs.

    `provider` is e.g. "anthropic" or "openai"; `sub_kind` is "signature",
    "redacted" or "encrypted"; `data` is passed back verbatim, never interpreted.
    """

    KIND: ClassVar[str] = "reasoning_signature"
    provider: str
    sub_kind: str
    data: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "reasoning_signature",
            "provider": self.provider,
            "sub_kind": self.sub_kind,
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            _field(data, "provider", str, ""),
            _field(data, "sub_kind", str, ""),
            _field(data, "data", str, ""),
        )


@dataclass(frozen=True, slots=True)
class TextDelta(Accumulable):
    """A fragment of streamed text; accumulates into `Text` under the key `text`."""

    KIND: ClassVar[str] = "text_delta"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "text_delta", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_field(data, "content", str, ""))

    def accumulator_key(self) -> str:
        return "text"

    def merge_into(self, acc: Artifact | None) -> Artifact:
        if isinstance(acc, Text):
            return Text(acc.content + self.content)
        return Text(self.content)


@dataclass(frozen=True, slots=True)
class ReasoningDelta(Accumulable):
    """A fragment of streamed reasoning; accumulates into `Reasoning`."""

    KIND: ClassVar[str] = "reasoning_delta"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "reasoning_delta", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_field(data, "content", str, ""))

    def accumulator_key(self) -> str:
        return "reasoning"

    def merge_into(self, acc: Artifact | None) -> Artifact:
        if isinstance(acc, Reasoning):
            return Reasoning(acc.content + self.content)
        return Reasoning(self.content)


@dataclass(frozen=True, slots=True)
class ToolCallDelta(Accumulable):
    """A fragment of a streamed tool call; parallel calls are told apart by `index`.

    Merging concatenates `name` and `arguments`; a non-empty `id` replaces the one
    seen so far (providers send it once, some send it again in full).
    """

    KIND: ClassVar[str] = "tool_call_delta"
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "tool_call_delta",
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "index": self.index,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            _field(data, "index", int, 0),
            _field(data, "id", str, ""),
            _field(data, "name", str, ""),
            _field(data, "arguments", str, ""),
        )

    def accumulator_key(self) -> str:
        return f"tool_call:{self.index}"

    def merge_into(self, acc: Artifact | None) -> Artifact:
        if isinstance(acc, ToolCall):
            return ToolCall(
                self.id or acc.id,
                acc.name + self.name,
                acc.arguments + self.arguments,
                acc.display,
            )
        return ToolCall(self.id, self.name, self.arguments)


@dataclass(frozen=True, slots=True)
class UnknownArtifact(Artifact):
    """An artifact of a kind this process has no class for, kept verbatim.

    It re-encodes to exactly the JSON it was decoded from, so threads written by a
    newer version or by a plugin that is not installed here stay readable and
    survive a rewrite unchanged.
    """

    unknown_kind: str
    data: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return self.unknown_kind

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        kind = data.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ArtifactError(f"unknown artifact without a kind: {dict(data)!r}")
        return cls(kind, dict(data))


def _decode_as(cls: type[Artifact], kind: str, data: Mapping[str, Any]) -> Artifact:
    """`cls.from_dict(data)`, with any failure reported against `kind`."""
    try:
        return cls.from_dict(data)
    except (ArtifactError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ArtifactError(f'unmarshal artifact "{kind}": {exc}') from exc


_ArtifactClass = TypeVar("_ArtifactClass", bound=type[Artifact])


class ArtifactRegistry:
    """Maps kind strings to artifact classes for decoding.

    Process-wide by default (`registry`); tests may build their own. Registering a
    kind that exists replaces it. Delta classes are refused: they never persist.
    """

    def __init__(self, classes: Iterable[type[Artifact]] = ()) -> None:
        self._classes: dict[str, type[Artifact]] = {}
        for cls in classes:
            self.register(cls)

    def register(self, cls: _ArtifactClass) -> _ArtifactClass:
        """Register `cls` under `cls.KIND`; usable as a class decorator."""
        if not cls.KIND:
            raise ArtifactError(f"artifact class {cls.__name__} has no KIND")
        if issubclass(cls, Delta):
            raise ArtifactError(f'delta artifact "{cls.KIND}" cannot be registered')
        self._classes[cls.KIND] = cls
        return cls

    def get(self, kind: str) -> type[Artifact] | None:
        """The class registered for `kind`, or None."""
        return self._classes.get(kind)

    def registered(self) -> dict[str, type[Artifact]]:
        """A copy of the kind -> class mapping."""
        return dict(self._classes)

    def decode(self, kind: str, data: Mapping[str, Any]) -> Artifact:
        """Decode one artifact's own JSON; unknown kinds become `UnknownArtifact`."""
        cls = self._classes.get(kind)
        if cls is None:
            return UnknownArtifact(kind, dict(data))
        return _decode_as(cls, kind, data)


PERSISTABLE_KINDS: frozenset[str] = frozenset(
    {
        "text",
        "tool_call",
        "tool_result",
        "usage",
        "image",
        "reasoning",
        "stop_reason",
        "reasoning_signature",
    }
)
"""The built-in kinds that may be persisted: exactly what the default registry holds."""

registry = ArtifactRegistry(
    [Text, Reasoning, Image, ToolCall, ToolResult, Usage, StopReason, ReasoningSignature]
)

_DELTA_CLASSES: dict[str, type[Delta]] = {
    cls.KIND: cls for cls in (TextDelta, ReasoningDelta, ToolCallDelta)
}


def encode_envelope(artifacts: Sequence[Artifact] | None) -> list[dict[str, Any]]:
    """Encode artifacts for persistence as `[{"kind", "data"}]`; deltas are refused."""
    out: list[dict[str, Any]] = []
    for artifact in artifacts or ():
        if isinstance(artifact, Delta):
            raise ArtifactError(f'delta artifact "{artifact.kind}" cannot be persisted')
        try:
            data = artifact.to_dict()
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ArtifactError(f'marshal artifact "{artifact.kind}": {exc}') from exc
        out.append({"kind": artifact.kind, "data": data})
    return out


def decode_envelope(
    items: Sequence[Any] | None, reg: ArtifactRegistry | None = None
) -> list[Artifact]:
    """Decode an envelope list written by `encode_envelope` (or the Go framework)."""
    reg = registry if reg is None else reg
    out: list[Artifact] = []
    for index, item in enumerate(items or ()):
        # Concrete dict checks first: parsed JSON is dicts and the ABC check is slow.
        if not isinstance(item, dict) and not isinstance(item, Mapping):
            raise ArtifactError(f"unmarshal artifact {index}: expected an object, got {item!r}")
        kind = item.get("kind")
        data = item.get("data")
        if not isinstance(kind, str) or not kind:
            raise ArtifactError(f"unmarshal artifact {index}: missing kind")
        if not isinstance(data, dict) and not isinstance(data, Mapping):
            raise ArtifactError(f'unmarshal artifact "{kind}": data must be an object')
        out.append(reg.decode(kind, data))
    return out


def decode_artifact(data: Mapping[str, Any], reg: ArtifactRegistry | None = None) -> Artifact:
    """Decode an artifact's own JSON object (kind read from its `kind` field).

    Unlike the envelope this also accepts deltas, as they arrive in output events.
    """
    kind = data.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ArtifactError(f"artifact without a kind: {dict(data)!r}")
    delta_class = _DELTA_CLASSES.get(kind)
    if delta_class is not None:
        return _decode_as(delta_class, kind, data)
    return (registry if reg is None else reg).decode(kind, data)
