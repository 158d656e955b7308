"""Guards for the hand encoders: they write every field their models have.

`encode_event` writes the events of every turn by hand (user_message, lifecycle,
turn_complete, the text and reasoning artifacts and their deltas, and each event's
context), and a turn is written by `turn_to_dict`. A field added to one of these models
is on the wire only once the encoder writes it, and a test that builds values from the
fields it names would not notice. These tests build each value from its model's own
field list (pydantic's `model_fields`, a dataclass's `fields`, recursively), every field
set to a value that is not its default, so a new field fails them until it is encoded.
A field of a type `value_for` does not know fails them too: teach it the type.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from datetime import UTC, datetime
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from ore_core import (
    Artifact,
    ArtifactEvent,
    EventContext,
    LifecycleEvent,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    Turn,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.artifacts import Attachment
from ore_core.events import _encode_with_pydantic, encode_event
from ore_core.jsonutil import loads
from ore_core.turn import turn_from_dict, turn_json, turn_to_dict

# Exactly the classes `encode_event` writes by hand (`_CONTENT_HEADS`).
HAND_ENCODED_ARTIFACTS: list[type[Artifact]] = [Text, TextDelta, Reasoning, ReasoningDelta]
PERSISTED_ARTIFACTS: list[type[Artifact]] = [Text, Reasoning]


def value_for(annotation: Any, name: str) -> Any:
    """A value of type `annotation` that no field has as its default (a field's name in
    its text, quotes and non-ASCII included, so escaping is exercised too)."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return value_for(get_args(annotation)[0], name)
    if origin in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        return value_for(options[0], name)
    if origin is Literal:
        return get_args(annotation)[-1]
    if origin is tuple and get_args(annotation)[1:] == (Ellipsis,):
        item = get_args(annotation)[0]
        if name == "images":  # validated: a data URL or an http(s) URL
            return ("data:image/png;base64,iVBORw0KGgo=", "https://example.com/a.png")
        if name == "attachments":  # validated: a sha256, a media type, a bucket name
            return (Attachment('a "é" ☃.txt', "text/plain", 3, "ab" * 32, "ORE_FILES"),)
        if item is Artifact:
            return (Text(f'{name} "é"'), Reasoning(f"{name} ☃"))
        return (value_for(item, name),)
    if origin is tuple:  # a fixed-length tuple: a value per item
        return tuple(value_for(item, name) for item in get_args(annotation))
    if origin is dict:  # a user message's metadata: the first key it allows
        return {"edit_of": value_for(get_args(annotation)[1], name)}
    if annotation is str:
        return f'{name} "é" ☃\n'
    if annotation is bool:
        return True
    if annotation is datetime:
        return datetime(2024, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return list(annotation)[-1]
    if isinstance(annotation, type) and (
        issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)
    ):
        return every_field_set(annotation)
    raise TypeError(f"field {name!r}: no test value for {annotation!r}; teach value_for")


def field_types(cls: type) -> dict[str, Any]:
    """The fields a caller sets on `cls` (its `__init__`'s), by name, with their types."""
    if issubclass(cls, BaseModel):
        return {name: field.annotation for name, field in cls.model_fields.items()}
    hints = typing.get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls) if field.init}


def every_field_set(cls: type) -> Any:
    """An instance of `cls` with every field (and every field of those) set."""
    values = {name: value_for(annotation, name) for name, annotation in field_types(cls).items()}
    if issubclass(cls, BaseModel):  # a flag is set to what its default is not
        for name, field in cls.model_fields.items():
            if isinstance(field.default, bool):
                values[name] = not field.default
    return cls(**values)


def hand_encoded_events() -> list[Any]:
    events: list[Any] = [
        every_field_set(UserMessageEvent),
        every_field_set(LifecycleEvent),
        every_field_set(TurnCompleteEvent),
    ]
    for artifact_class in HAND_ENCODED_ARTIFACTS:
        context = every_field_set(EventContext)
        events.append(ArtifactEvent(artifact=every_field_set(artifact_class), context=context))
    return events


@pytest.mark.parametrize("event", hand_encoded_events(), ids=lambda event: event.kind)
def test_the_hand_encoder_writes_every_field_of_the_event(event: Any) -> None:
    assert encode_event(event) == _encode_with_pydantic(event)


@pytest.mark.parametrize("event", hand_encoded_events(), ids=lambda event: event.kind)
def test_the_guard_sets_fields_that_reach_the_wire(event: Any) -> None:
    # Every field of the event and of its context is written by pydantic, so the guard
    # above compares every field (a value equal to its default could be left out).
    wire = loads(_encode_with_pydantic(event))
    named = set(type(event).model_fields) - {"artifact"}
    assert named <= set(wire)
    assert set(wire["context"]) == set(EventContext.model_fields)


def test_the_hand_encoder_writes_every_field_of_a_user_message_without_images() -> None:
    # With images the encoder hands a user message to pydantic; without, it writes
    # every other field itself, and this compares each of them.
    event = every_field_set(UserMessageEvent).model_copy(update={"images": ()})
    wire = loads(_encode_with_pydantic(event))
    assert set(UserMessageEvent.model_fields) - {"images"} <= set(wire)
    assert encode_event(event) == _encode_with_pydantic(event)


def test_a_turn_with_every_field_set_survives_its_json() -> None:
    turn = every_field_set(Turn)
    assert turn_from_dict(loads(turn_json(turn))) == turn


def test_the_guard_sets_every_field_of_a_turn_to_a_value_other_than_its_default() -> None:
    turn = every_field_set(Turn)
    unset = [
        field.name
        for field in dataclasses.fields(Turn)
        if field.init and getattr(turn, field.name) == field.default
    ]
    assert unset == []
    assert turn_to_dict(turn)["metadata"]


@pytest.mark.parametrize("artifact_class", PERSISTED_ARTIFACTS, ids=lambda cls: cls.KIND)
def test_an_artifact_with_every_field_set_survives_a_turns_json(
    artifact_class: type[Artifact],
) -> None:
    turn = Turn("0123456789abcdef", "assistant", (every_field_set(artifact_class),))
    assert turn_from_dict(loads(turn_json(turn))) == turn
