"""The built-in artifact kinds: text, reasoning, images, tool calls and results, usage,
stop reasons, reasoning signatures, the streaming deltas, and `UnknownArtifact`.

Plain-field kinds take their JSON from the field codec (`ore_core.artifacts.base`);
`ToolCall` and `ToolResult` write their rendered Markdown, so they encode themselves.
The package face `ore_core.artifacts` lists and exports the public names defined here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, get_args

from ore_core.artifacts.base import (
    OMIT_EMPTY,
    Accumulable,
    Artifact,
    LLMRenderer,
    MarkdownRenderer,
    decode_fields,
    encode_fields,
    json_text,
    optional_field,
    required_field,
)
from ore_core.errors import ArtifactError


@dataclass(frozen=True, slots=True)
class Text(Artifact):
    """Plain (Markdown) text from any role."""

    KIND: ClassVar[str] = "text"
    content: str = ""


@dataclass(frozen=True, slots=True)
class Reasoning(Artifact):
    """Model reasoning ("thinking") text, shown to humans, optional for models."""

    KIND: ClassVar[str] = "reasoning"
    content: str = ""


@dataclass(frozen=True, slots=True)
class Image(Artifact):
    """An image by URL (http(s) or data: URL)."""

    KIND: ClassVar[str] = "image"
    url: str = ""


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
        rendered = json_text(display)
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
            required_field(data, "id", str),
            required_field(data, "name", str),
            required_field(data, "arguments", str),
            optional_field(data, "display", str),
        )


@dataclass(frozen=True, slots=True)
class Truncation:
    """How much of a tool's output was cut before the model saw it.

    `style` is "head" or "tail" when something was cut; `recovery_hint` tells the model
    how to fetch the rest. Not an artifact itself: it rides on `ToolResult`.
    """

    original_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    original_lines: int = field(default=0, metadata=OMIT_EMPTY)
    shown_bytes: int = 0
    shown_lines: int = 0
    style: str = field(default="", metadata=OMIT_EMPTY)
    recovery_hint: str = field(default="", metadata=OMIT_EMPTY)

    def truncated(self) -> bool:
        """True when fewer bytes were shown than the tool produced."""
        return self.original_bytes > self.shown_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON object: `shown_*` always, the other fields only when set."""
        return encode_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of `to_dict`; missing fields are zero."""
        return decode_fields(cls, data)


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
        rendered = json_text(self.value)
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
        rendered = json_text(self.value, indent=True)
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
        truncation = optional_field(data, "truncation", dict)
        return cls(
            required_field(data, "tool_call_id", str),
            required_field(data, "content", str),
            None,
            required_field(data, "is_error", bool),
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
    cache_read_tokens: int = field(default=0, metadata=OMIT_EMPTY)
    cache_write_tokens: int = field(default=0, metadata=OMIT_EMPTY)
    thinking_tokens: int | None = None


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


@dataclass(frozen=True, slots=True)
class _ContentDelta(Accumulable):
    """A fragment of streamed `content`; accumulates into one `INTO` artifact, keyed by
    its kind."""

    INTO: ClassVar[type[Text] | type[Reasoning]]
    content: str = ""

    def accumulator_key(self) -> str:
        return self.INTO.KIND

    def merge_into(self, acc: Artifact | None) -> Artifact:
        if isinstance(acc, self.INTO):
            return self.INTO(acc.content + self.content)
        return self.INTO(self.content)


@dataclass(frozen=True, slots=True)
class TextDelta(_ContentDelta):
    """A fragment of streamed text; accumulates into `Text` under the key `text`."""

    KIND: ClassVar[str] = "text_delta"
    INTO: ClassVar[type[Text]] = Text


@dataclass(frozen=True, slots=True)
class ReasoningDelta(_ContentDelta):
    """A fragment of streamed reasoning; accumulates into `Reasoning`."""

    KIND: ClassVar[str] = "reasoning_delta"
    INTO: ClassVar[type[Reasoning]] = Reasoning


@dataclass(frozen=True, slots=True)
class ToolCallDelta(Accumulable):
    """A fragment of a streamed tool call; parallel calls are told apart by `index`.

    Merging concatenates `name` and `arguments`; a non-empty `id` replaces the one
    seen so far (providers send it once, some send it again in full).
    """

    KIND: ClassVar[str] = "tool_call_delta"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("id", "name", "arguments", "index")
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""

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
