"""Artifacts: the typed content blocks a turn is made of.

Every artifact has a string `kind` and an own JSON object that includes that kind.
Persisted artifacts travel in the envelope `{"kind": k, "data": <own JSON>}` so that
readers can pick the class before decoding. The kind registry is open: plugins add
kinds with `registry.register(cls)`. Deltas are streaming fragments and are never
persisted. A kind this process does not know is kept as an `UnknownArtifact` that
re-encodes to the same JSON, so one unknown kind never makes a thread unreadable.

Artifacts are immutable values: equality is by field, and `merge_into` returns new
objects rather than mutating the accumulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from ore_core.errors import ArtifactError

__all__ = [
    "Accumulable",
    "Artifact",
    "ArtifactRegistry",
    "Delta",
    "Image",
    "Reasoning",
    "ReasoningDelta",
    "Text",
    "TextDelta",
    "UnknownArtifact",
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


def _str_field(data: Mapping[str, Any], key: str, kind: str, *, default: str | None = "") -> str:
    value = data.get(key, default)
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise ArtifactError(f'artifact "{kind}": field "{key}" must be a string, got {value!r}')
    return value


@dataclass(frozen=True, slots=True)
class Text(Artifact):
    """Plain (Markdown) text from any role."""

    KIND: ClassVar[str] = "text"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "text", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str_field(data, "content", cls.KIND))


@dataclass(frozen=True, slots=True)
class Reasoning(Artifact):
    """Model reasoning ("thinking") text, shown to humans, optional for models."""

    KIND: ClassVar[str] = "reasoning"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "reasoning", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str_field(data, "content", cls.KIND))


@dataclass(frozen=True, slots=True)
class Image(Artifact):
    """An image by URL (http(s) or data: URL)."""

    KIND: ClassVar[str] = "image"
    url: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", "url": self.url}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str_field(data, "url", cls.KIND))


@dataclass(frozen=True, slots=True)
class TextDelta(Accumulable):
    """A fragment of streamed text; accumulates into `Text` under the key `text`."""

    KIND: ClassVar[str] = "text_delta"
    content: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "text_delta", "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str_field(data, "content", cls.KIND))

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
        return cls(_str_field(data, "content", cls.KIND))

    def accumulator_key(self) -> str:
        return "reasoning"

    def merge_into(self, acc: Artifact | None) -> Artifact:
        if isinstance(acc, Reasoning):
            return Reasoning(acc.content + self.content)
        return Reasoning(self.content)


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


A = TypeVar("A", bound=type[Artifact])


class ArtifactRegistry:
    """Maps kind strings to artifact classes for decoding.

    Process-wide by default (`registry`); tests may build their own. Registering a
    kind that exists replaces it. Delta classes are refused: they never persist.
    """

    def __init__(self, classes: Iterable[type[Artifact]] = ()) -> None:
        self._classes: dict[str, type[Artifact]] = {}
        for cls in classes:
            self.register(cls)

    def register(self, cls: A) -> A:
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
        try:
            return cls.from_dict(data)
        except ArtifactError as exc:
            raise ArtifactError(f'unmarshal artifact "{kind}": {exc}') from exc
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ArtifactError(f'unmarshal artifact "{kind}": {exc}') from exc


registry = ArtifactRegistry([Text, Reasoning, Image])


def encode_envelope(artifacts: Sequence[Artifact] | None) -> list[dict[str, Any]]:
    """Encode artifacts for persistence as `[{"kind", "data"}]`; deltas are refused."""
    out: list[dict[str, Any]] = []
    for artifact in artifacts or ():
        if isinstance(artifact, Delta):
            raise ArtifactError(f'delta artifact "{artifact.kind}" cannot be persisted')
        out.append({"kind": artifact.kind, "data": artifact.to_dict()})
    return out


def decode_envelope(
    items: Sequence[Any] | None, reg: ArtifactRegistry | None = None
) -> list[Artifact]:
    """Decode an envelope list written by `encode_envelope` (or the Go framework)."""
    reg = reg or registry
    out: list[Artifact] = []
    for index, item in enumerate(items or ()):
        if not isinstance(item, Mapping):
            raise ArtifactError(f"unmarshal artifact {index}: expected an object, got {item!r}")
        kind = item.get("kind")
        data = item.get("data")
        if not isinstance(kind, str) or not kind:
            raise ArtifactError(f"unmarshal artifact {index}: missing kind")
        if not isinstance(data, Mapping):
            raise ArtifactError(f'unmarshal artifact "{kind}": data must be an object')
        out.append(reg.decode(kind, data))
    return out


def decode_artifact(data: Mapping[str, Any], reg: ArtifactRegistry | None = None) -> Artifact:
    """Decode an artifact's own JSON object (kind read from its `kind` field)."""
    kind = data.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ArtifactError(f"artifact without a kind: {dict(data)!r}")
    reg = reg or registry
    if kind in _DELTA_CLASSES:
        return _DELTA_CLASSES[kind].from_dict(data)
    return reg.decode(kind, data)


_DELTA_CLASSES: dict[str, type[Delta]] = {
    TextDelta.KIND: TextDelta,
    ReasoningDelta.KIND: ReasoningDelta,
}
