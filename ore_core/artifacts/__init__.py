"""Artifacts: the typed content blocks a turn is made of, and how they are stored.

`base` says what an artifact is (and holds the field codec every plain kind uses),
`kinds` defines the built-in kinds; this module keeps the registry and the envelope.

Persisted artifacts travel in the envelope `{"kind": k, "data": <own JSON>}` so that
readers can pick the class before decoding. The kind registry is open: plugins add
kinds with `registry.register(cls)`. Deltas are streaming fragments and are never
persisted. A kind this process does not know is kept as an `UnknownArtifact` that
re-encodes to the same JSON, so one unknown kind never makes a thread unreadable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ore_core.artifacts.attachment import Attachment
from ore_core.artifacts.base import (
    OMIT_EMPTY,
    Accumulable,
    Artifact,
    Delta,
    LLMRenderer,
    MarkdownRenderer,
    StatusContributor,
)
from ore_core.artifacts.kinds import (
    STOP_REASONS,
    Image,
    Reasoning,
    ReasoningDelta,
    ReasoningSignature,
    StopReason,
    StopReasonValue,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Truncation,
    UnknownArtifact,
    Usage,
)
from ore_core.errors import ArtifactError

__all__ = [
    "OMIT_EMPTY",
    "PERSISTABLE_KINDS",
    "STOP_REASONS",
    "Accumulable",
    "Artifact",
    "ArtifactRegistry",
    "Attachment",
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
        "attachment",
    }
)
"""The built-in kinds that may be persisted: exactly what the default registry holds."""

registry = ArtifactRegistry(
    [
        Text,
        Reasoning,
        Image,
        ToolCall,
        ToolResult,
        Usage,
        StopReason,
        ReasoningSignature,
        Attachment,
    ]
)

_DELTA_CLASSES: dict[str, type[Delta]] = {
    cls.KIND: cls for cls in (TextDelta, ReasoningDelta, ToolCallDelta)
}


# Kinds whose own JSON is `{"kind", "content"}` (exact classes: a subclass may write
# more): the envelope writes them without the field codec, the same dict.
_CONTENT_KINDS: dict[type[Artifact], str] = {Text: Text.KIND, Reasoning: Reasoning.KIND}


def encode_envelope(artifacts: Sequence[Artifact] | None) -> list[dict[str, Any]]:
    """Encode artifacts for persistence as `[{"kind", "data"}]`; deltas are refused."""
    out: list[dict[str, Any]] = []
    for artifact in artifacts or ():
        kind = _CONTENT_KINDS.get(type(artifact))
        if kind is not None:
            content = artifact.content  # type: ignore[attr-defined]
            if type(content) is str:
                out.append({"kind": kind, "data": {"kind": kind, "content": content}})
                continue
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
