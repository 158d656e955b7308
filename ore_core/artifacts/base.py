"""What an artifact is: the base classes, the renderer protocols and the field codec.

Every artifact has a string `kind` and an own JSON object that includes that kind.
Artifacts are immutable values: equality is by field, and `merge_into` returns new
objects rather than mutating the accumulator.

The field codec serves every kind whose JSON is just its fields: a frozen dataclass
subclass of `Artifact` gets `to_dict`/`from_dict` from its field types (`str`, `int`,
`bool`, `X | None`, a `Literal` of strings). Fields are written in declaration order
(or the order of `JSON_FIELDS`), `None` is left out, and so is a zero or empty field whose metadata
is `OMIT_EMPTY`. Decoding is tolerant like the Go framework: a missing or null field
takes its zero value (`None` for `X | None`); a field of the wrong JSON type is an
`ArtifactError`. Kinds with more to say (`ToolCall`, `ToolResult`) override both.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Protocol, Self, TypeVar, cast, runtime_checkable

import orjson

from ore_core.errors import ArtifactError

__all__ = [
    "OMIT_EMPTY",
    "Accumulable",
    "Artifact",
    "Delta",
    "LLMRenderer",
    "MarkdownRenderer",
    "StatusContributor",
    "decode_fields",
    "encode_fields",
    "json_text",
    "optional_field",
    "required_field",
]

OMIT_EMPTY: Mapping[str, Any] = types.MappingProxyType({"omit_empty": True})
"""Field metadata: leave the field out of the JSON while it is zero or empty."""


class Artifact:
    """Base of every artifact kind.

    Subclasses set the class variable `KIND`. A frozen dataclass of plain fields needs
    nothing else (see the module docstring); any other class implements `to_dict`
    (its own JSON, including `"kind"`) and `from_dict` (the inverse, tolerant of a
    missing `kind`).
    """

    __slots__ = ()
    KIND: ClassVar[str] = ""
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()
    """The order of the fields in the JSON, when it is not their declaration order."""

    @property
    def kind(self) -> str:
        """The kind string this artifact is registered and serialised under."""
        return self.KIND

    def to_dict(self) -> dict[str, Any]:
        """The artifact's own JSON object, `kind` included."""
        return encode_fields(self, {"kind": self.kind})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build the artifact from its own JSON object; raise on bad fields."""
        return decode_fields(cls, data)


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


# -- the field codec ----------------------------------------------------------------

_T = TypeVar("_T", str, int, bool, dict)  # type: ignore[type-arg]
_JSON_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object"}
_ZERO: dict[type, Any] = {str: "", int: 0, bool: False}
_D = TypeVar("_D")


def optional_field(data: Mapping[str, Any], key: str, expected: type[_T]) -> _T | None:
    """The field's value, None when missing or null; bools never pass as integers."""
    value = data.get(key)
    return None if value is None else _checked(key, value, expected)


def _checked(key: str, value: object, expected: type[_T]) -> _T:
    if isinstance(value, expected) and (expected is bool or not isinstance(value, bool)):
        return value
    raise ArtifactError(f'field "{key}" must be {_JSON_TYPE_NAMES[expected]}, got {value!r}')


def required_field(data: Mapping[str, Any], key: str, expected: type[_T]) -> _T:
    """The field's value, the Go zero value of its type when missing or null."""
    value = optional_field(data, key, expected)
    return cast(_T, _ZERO[expected]) if value is None else value


class _Field(typing.NamedTuple):
    name: str
    json_type: type
    zero: Any  # the value of a missing or null field: None when nullable, else Go's zero
    omit_empty: bool


_FIELDS: dict[type, tuple[_Field, ...]] = {}


def _fields_of(cls: type) -> tuple[_Field, ...]:
    """The JSON fields of a dataclass, in JSON order, with their JSON types (cached)."""
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    out = []
    for name in getattr(cls, "JSON_FIELDS", None) or tuple(by_name):
        hint = hints[name]
        args = typing.get_args(hint)
        nullable = type(None) in args
        if nullable:
            (hint,) = [arg for arg in args if arg is not type(None)]
        if typing.get_origin(hint) is Literal:
            hint = type(typing.get_args(hint)[0])
        if hint not in _ZERO:
            raise TypeError(f"{cls.__name__}.{name}: the field codec has no JSON type for {hint}")
        omit = bool(by_name[name].metadata.get("omit_empty"))
        out.append(_Field(name, hint, None if nullable else _ZERO[hint], omit))
    _FIELDS[cls] = fields = tuple(out)
    return fields


def encode_fields(value: object, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON object of a plain-field dataclass (see the module docstring).

    The fields are added to `out` when given (e.g. one that already holds the kind).
    """
    out = {} if out is None else out
    for name, _, _, omit_empty in _fields_of(type(value)):
        item = getattr(value, name)
        if item is not None and (item or not omit_empty):
            out[name] = item
    return out


def decode_fields(cls: type[_D], data: Mapping[str, Any]) -> _D:
    """The inverse of `encode_fields`: missing fields take their zero value."""
    values = {}
    for name, expected, zero, _ in _fields_of(cls):
        value = data.get(name)
        values[name] = zero if value is None else _checked(name, value, expected)
    return cast(Callable[..., _D], cls)(**values)


def json_text(value: Any, *, indent: bool = False) -> str | None:
    """JSON text of a tool value, or None when it cannot be serialised.

    orjson directly (not `jsonutil`) because rendering needs options the ledger codec
    does not: indentation, and non-string dict keys (Go marshals `map[int]...`).
    """
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(value, option=option).decode()
    except TypeError:  # orjson.JSONEncodeError: unsupported type, circular, huge int
        return None
