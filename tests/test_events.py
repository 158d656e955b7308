"""Events are the NATS wire schema: exact Go JSON (docs/go-compatibility.md, "Events")."""

import copy
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Self
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ore_core import (
    ActivityEvent,
    Artifact,
    ArtifactEvent,
    ErrorEvent,
    EventContext,
    EventDecodeError,
    Image,
    InterruptEvent,
    LifecycleEvent,
    LifecyclePhase,
    Notice,
    NoticeEvent,
    OreError,
    OutputEvent,
    PropertiesEvent,
    PropertyOperation,
    Reasoning,
    ReasoningDelta,
    Role,
    SessionSwitchEvent,
    Severity,
    Text,
    TextDelta,
    TraversalControl,
    Turn,
    TurnCompleteEvent,
    UnknownArtifact,
    UserMessageEvent,
)
from ore_core import events as events_module
from ore_core.events import (
    _encode_with_pydantic,
    decode_ingress,
    decode_output,
    decode_output_value,
    encode_event,
    event_json_schema,
)
from ore_core.jsonutil import dumps, loads
from ore_core.turn import turn_to_dict

HTTP = EventContext(provenance="http")
JAN_1 = datetime(2024, 1, 1, tzinfo=UTC)


# --- exact JSON of each event --------------------------------------------------------


def test_turn_complete_json_matches_go_example_exactly() -> None:
    turn = Turn("turn-event-1", Role.USER, [Text("hello")], timestamp=JAN_1)
    event = TurnCompleteEvent(turn=turn, context=EventContext(provenance="test"))
    assert encode_event(event) == (
        b'{"kind":"turn_complete","turn":{"id":"turn-event-1","role":"user","artifacts":'
        b'[{"kind":"text","data":{"kind":"text","content":"hello"}}],'
        b'"timestamp":"2024-01-01T00:00:00Z"},"context":{"provenance":"test"}}'
    )


def test_artifact_event_is_the_artifacts_own_json_with_context_merged() -> None:
    event = ArtifactEvent(artifact=TextDelta("wor"), context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"text_delta","content":"wor","context":{"provenance":"http"}}'
    )


def test_artifact_event_kind_is_the_artifacts_kind() -> None:
    assert ArtifactEvent(artifact=Reasoning("hm")).kind == "reasoning"


def test_lifecycle_json() -> None:
    event = LifecycleEvent(phase="streaming", context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"lifecycle","phase":"streaming","context":{"provenance":"http"}}'
    )


def test_lifecycle_rejects_an_unknown_phase() -> None:
    with pytest.raises(ValidationError, match="phase"):
        LifecycleEvent(phase="paused")  # type: ignore[arg-type]


def test_error_json_omits_an_empty_code() -> None:
    assert encode_event(ErrorEvent(message="boom")) == b'{"kind":"error","message":"boom"}'


def test_error_json_keeps_a_code_before_the_context() -> None:
    event = ErrorEvent(message="boom", code="rate_limited", context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"error","message":"boom","code":"rate_limited","context":{"provenance":"http"}}'
    )


def test_activity_json_always_carries_active_and_description() -> None:
    assert encode_event(ActivityEvent(active=False)) == (
        b'{"kind":"activity","active":false,"description":""}'
    )


def test_activity_rejects_a_string_for_active() -> None:
    with pytest.raises(EventDecodeError, match=r"activity\.active"):
        decode_output(b'{"kind":"activity","active":"true","description":"x"}')


def test_user_message_json_has_kind_id_content_then_context() -> None:
    event = UserMessageEvent(id="m1", content="hi", context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"user_message","id":"m1","content":"hi","context":{"provenance":"http"}}'
    )


def test_interrupt_json() -> None:
    assert encode_event(InterruptEvent(id="i1")) == b'{"kind":"interrupt","id":"i1"}'


def test_session_switch_json() -> None:
    event = SessionSwitchEvent(id="s1", session_id="thread-2", context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"session_switch","id":"s1","session_id":"thread-2",'
        b'"context":{"provenance":"http"}}'
    )


def test_session_switch_is_also_an_output_event() -> None:
    event = decode_output(b'{"kind":"session_switch","session_id":"thread-2"}')
    assert isinstance(event, SessionSwitchEvent)
    assert event.session_id == "thread-2"


def test_session_switch_rejects_an_unsafe_thread_id() -> None:
    with pytest.raises(EventDecodeError, match=r"session_switch\.session_id.*invalid thread id"):
        decode_ingress(b'{"kind":"session_switch","session_id":"../etc"}')


# --- context -------------------------------------------------------------------------


def test_context_is_omitted_when_provenance_is_empty() -> None:
    event = LifecycleEvent(phase="done", context=EventContext(user="u1", traceparent="00-ab"))
    assert encode_event(event) == b'{"kind":"lifecycle","phase":"done"}'


def test_context_writes_user_and_traceparent_only_when_set() -> None:
    context = EventContext(provenance="slack", user="U42", traceparent="00-abc-def-01")
    assert encode_event(LifecycleEvent(phase="done", context=context)) == (
        b'{"kind":"lifecycle","phase":"done","context":'
        b'{"provenance":"slack","user":"U42","traceparent":"00-abc-def-01"}}'
    )


def test_missing_context_decodes_to_an_empty_context() -> None:
    assert decode_output(b'{"kind":"lifecycle","phase":"done"}').context == EventContext()


def test_with_context_returns_a_stamped_copy() -> None:
    event = ErrorEvent(message="boom")
    stamped = event.with_context(HTTP)
    assert (stamped.context, event.context) == (HTTP, EventContext())


# --- properties ----------------------------------------------------------------------


def _properties_json(*operations: PropertyOperation) -> bytes:
    return encode_event(PropertiesEvent(operations=list(operations)))


def test_properties_set_carries_the_value() -> None:
    assert _properties_json(PropertyOperation(op="set", key="model", value="gpt")) == (
        b'{"kind":"properties","operations":[{"op":"set","key":"model","value":"gpt"}]}'
    )


def test_properties_delete_omits_the_value() -> None:
    assert _properties_json(PropertyOperation(op="delete", key="title")) == (
        b'{"kind":"properties","operations":[{"op":"delete","key":"title"}]}'
    )


def test_properties_set_to_empty_omits_the_value() -> None:
    assert _properties_json(PropertyOperation(op="set", key="title")) == (
        b'{"kind":"properties","operations":[{"op":"set","key":"title"}]}'
    )


def test_properties_without_operations_writes_null() -> None:
    assert encode_event(PropertiesEvent(operations=None)) == (
        b'{"kind":"properties","operations":null}'
    )


def test_properties_keep_the_order_of_mixed_operations() -> None:
    operations = [
        PropertyOperation(op="delete", key="a"),
        PropertyOperation(op="set", key="b", value="1"),
        PropertyOperation(op="delete", key="c"),
    ]
    decoded = decode_output(encode_event(PropertiesEvent(operations=operations)))
    assert isinstance(decoded, PropertiesEvent)
    assert list(decoded.operations or ()) == operations


def test_properties_operations_cannot_be_appended_to() -> None:
    event = PropertiesEvent(operations=[PropertyOperation(op="delete", key="a")])
    assert isinstance(event.operations, tuple)


def test_property_operation_rejects_an_unknown_op() -> None:
    with pytest.raises(EventDecodeError, match=r"properties\.operations\.0\.op"):
        decode_output(b'{"kind":"properties","operations":[{"op":"rename","key":"a"}]}')


# --- notices and severity ------------------------------------------------------------


def test_notice_json_without_context() -> None:
    event = NoticeEvent(content="saved", severity=Severity.SUCCESS)
    assert encode_event(event) == b'{"kind":"notice","content":"saved","severity":"Success"}'


def test_notice_json_with_context() -> None:
    event = NoticeEvent(content="careful", severity=Severity.WARN, context=HTTP)
    assert encode_event(event) == (
        b'{"kind":"notice","content":"careful","severity":"Warn","context":{"provenance":"http"}}'
    )


@pytest.mark.parametrize(
    ("severity", "label"),
    [
        (Severity.SUCCESS, "Success"),
        (Severity.INFO, "Info"),
        (Severity.WARN, "Warn"),
        (Severity.ERROR, "Error"),
    ],
)
def test_severity_labels_match_go(severity: Severity, label: str) -> None:
    assert (str(severity), severity.label) == (label, label)


def test_severities_are_ordered_success_info_warn_error() -> None:
    assert Severity.SUCCESS < Severity.INFO < Severity.WARN < Severity.ERROR


def test_severity_zero_is_success() -> None:
    assert Severity(0) is Severity.SUCCESS


def test_unknown_numeric_severity_is_labelled_like_go() -> None:
    assert str(Severity(99)) == "Severity(99)"


def test_unknown_numeric_severity_still_orders_after_error() -> None:
    assert Severity(99) > Severity.ERROR


def test_unknown_severity_label_decodes_as_info() -> None:
    event = decode_output(b'{"kind":"notice","content":"x","severity":"Critical"}')
    assert isinstance(event, NoticeEvent)
    assert event.severity is Severity.INFO


def test_lower_case_severity_label_decodes_to_its_severity() -> None:
    event = decode_output(b'{"kind":"notice","content":"x","severity":"warn"}')
    assert isinstance(event, NoticeEvent)
    assert event.severity is Severity.WARN


def test_notice_event_from_notice_keeps_content_severity_and_context() -> None:
    event = NoticeEvent.from_notice(Notice("no such command", Severity.ERROR), HTTP)
    assert (event.content, event.severity, event.context) == (
        "no such command",
        Severity.ERROR,
        HTTP,
    )


# --- section 15: every NDJSON example decodes and re-encodes identically --------------

SECTION_15_LINES = [
    b'{"kind":"turn_complete","turn":{"id":"","role":"user","artifacts":[{"kind":"text","data":'
    b'{"kind":"text","content":"hi"}}],"timestamp":"2024-01-01T00:00:00Z"},'
    b'"context":{"provenance":"http"}}',
    b'{"kind":"lifecycle","phase":"submitted","context":{"provenance":"http"}}',
    b'{"kind":"text","content":"Hello world","context":{"provenance":"http"}}',
    b'{"kind":"tool_call","id":"c1","name":"calc","arguments":"{\\"a\\":1}","display":"calc(1)"}',
    b'{"kind":"properties","operations":[{"op":"set","key":"sent","value":"12"},'
    b'{"op":"delete","key":"title"}]}',
    b'{"kind":"notice","content":"Unknown command: /x. Type /help for available commands.",'
    b'"severity":"Info"}',
    b'{"kind":"error","message":"process event: turn failed: boom"}',
    b'{"kind":"text","content":"hi"}',
]


@pytest.mark.parametrize("line", SECTION_15_LINES)
def test_section_15_example_round_trips_byte_for_byte(line: bytes) -> None:
    assert encode_event(decode_output(line)) == line


def test_decoded_text_line_carries_a_text_artifact_and_context() -> None:
    event = decode_output(SECTION_15_LINES[2])
    assert isinstance(event, ArtifactEvent)
    assert (event.artifact, event.context) == (Text("Hello world"), HTTP)


def test_decoded_turn_complete_keeps_the_empty_pre_append_id() -> None:
    event = decode_output(SECTION_15_LINES[0])
    assert isinstance(event, TurnCompleteEvent)
    assert (event.turn.id, event.turn.artifacts) == ("", (Text("hi"),))


def test_deltas_decode_to_their_delta_classes() -> None:
    event = decode_output(b'{"kind":"reasoning_delta","content":"hm"}')
    assert isinstance(event, ArtifactEvent)
    assert event.artifact == ReasoningDelta("hm")


# --- ingress -------------------------------------------------------------------------


def test_user_message_decodes_with_its_context() -> None:
    event = decode_ingress(
        b'{"kind":"user_message","id":"m1","content":"hi","context":{"provenance":"slack","user":"U1"}}'
    )
    assert event == UserMessageEvent(
        id="m1", content="hi", context=EventContext(provenance="slack", user="U1")
    )


def test_ingress_without_id_gets_a_fresh_one() -> None:
    event = decode_ingress(b'{"kind":"interrupt"}')
    assert isinstance(event, InterruptEvent)
    assert len(event.id) == 32


def test_default_ids_are_unique() -> None:
    ids = {UserMessageEvent(content="x").id for _ in range(1000)}
    assert len(ids) == 1000


def test_empty_id_is_rejected() -> None:
    with pytest.raises(EventDecodeError, match=r"user_message\.id"):
        decode_ingress(b'{"kind":"user_message","id":"","content":"x"}')


def test_id_longer_than_256_characters_is_rejected() -> None:
    with pytest.raises(ValidationError, match="256"):
        InterruptEvent(id="x" * 257)


def test_ingress_rejects_an_unknown_kind_naming_it() -> None:
    with pytest.raises(EventDecodeError, match=r"'typing'.*'user_message'"):
        decode_ingress(b'{"kind":"typing"}')


def test_ingress_rejects_a_user_message_without_content_naming_the_field() -> None:
    with pytest.raises(EventDecodeError, match=r"user_message\.content: Field required"):
        decode_ingress(b'{"kind":"user_message","id":"m1"}')


def test_ingress_rejects_non_json() -> None:
    with pytest.raises(EventDecodeError, match="Invalid JSON"):
        decode_ingress(b"hello there")


def test_ingress_rejects_an_object_without_kind() -> None:
    with pytest.raises(EventDecodeError, match="kind"):
        decode_ingress(b'{"content":"hi"}')


def test_ingress_rejects_a_non_string_content() -> None:
    with pytest.raises(EventDecodeError, match=r"user_message\.content"):
        decode_ingress(b'{"kind":"user_message","content":42}')


def test_ingress_decodes_from_str_too() -> None:
    assert decode_ingress('{"kind":"user_message","id":"a","content":"x"}').id == "a"


def test_decode_errors_are_ore_errors() -> None:
    with pytest.raises(OreError):
        decode_ingress(b"[]")


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind":"user_message","id":"a","content":"x","thread_hint":"t"}',
        b'{"kind":"interrupt","id":"a","thread_hint":"t"}',
    ],
)
def test_an_unknown_field_of_an_ingress_event_is_refused_naming_it(data: bytes) -> None:
    """Issue 28: a misspelt field was dropped unseen; the control API refuses them too."""
    with pytest.raises(EventDecodeError, match="thread_hint"):
        decode_ingress(data)


def test_unknown_fields_of_output_events_are_ignored_for_forward_compatibility() -> None:
    event = decode_output(b'{"kind":"lifecycle","phase":"done","added_later":1}')
    assert encode_event(event) == b'{"kind":"lifecycle","phase":"done"}'


# --- output union --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Weather(Artifact):
    """A plugin's artifact kind that the core knows nothing about."""

    KIND: ClassVar[str] = "x_weather"
    city: str
    celsius: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "city": self.city, "celsius": self.celsius}

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        return cls(data["city"], data["celsius"])


def test_plugin_artifact_kind_is_emitted_as_its_own_json() -> None:
    event = ArtifactEvent(artifact=Weather("Oslo", -3), context=HTTP)
    assert (event.kind, encode_event(event)) == (
        "x_weather",
        b'{"kind":"x_weather","city":"Oslo","celsius":-3,"context":{"provenance":"http"}}',
    )


def test_plugin_artifact_kind_unknown_to_the_reader_arrives_verbatim() -> None:
    raw = encode_event(ArtifactEvent(artifact=Weather("Oslo", -3)))
    event = decode_output(raw)
    assert isinstance(event, ArtifactEvent)
    assert event.artifact == UnknownArtifact("x_weather", {**Weather("Oslo", -3).to_dict()})
    assert encode_event(event) == raw


def test_artifact_with_an_event_kind_is_rejected() -> None:
    with pytest.raises(ValidationError, match='"notice" is an event kind'):
        ArtifactEvent(artifact=UnknownArtifact("notice", {"kind": "notice"}))


def test_artifact_event_rejects_a_non_artifact() -> None:
    with pytest.raises(ValidationError, match="expected an Artifact"):
        ArtifactEvent(artifact="text")  # type: ignore[arg-type]


def test_output_rejects_bad_artifact_fields_naming_the_kind() -> None:
    with pytest.raises(EventDecodeError, match='artifact "text"'):
        decode_output(b'{"kind":"text","content":5}')


def test_output_rejects_an_event_without_kind() -> None:
    with pytest.raises(EventDecodeError, match="non-empty string 'kind'"):
        decode_output(b'{"content":"hi"}')


def test_turn_complete_shares_the_immutable_turn() -> None:
    turn = Turn("t1", Role.ASSISTANT, (Text("a"),))
    assert TurnCompleteEvent(turn=turn).turn is turn


def test_turn_complete_rejects_a_turn_holding_deltas() -> None:
    with pytest.raises(ValidationError, match='delta artifact "text_delta"'):
        TurnCompleteEvent(turn=Turn("t1", Role.ASSISTANT, [TextDelta("a")]))


def test_turn_complete_rejects_a_malformed_turn() -> None:
    with pytest.raises(EventDecodeError, match=r"turn_complete\.turn"):
        decode_output(b'{"kind":"turn_complete","turn":{"id":"t","role":"user","timestamp":"x"}}')


def test_events_are_frozen() -> None:
    event = ErrorEvent(message="boom")
    with pytest.raises(ValidationError, match="frozen"):
        event.message = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (UserMessageEvent(content="x"), "user_message"),
        (InterruptEvent(), "interrupt"),
        (SessionSwitchEvent(session_id="t"), "session_switch"),
        (ArtifactEvent(artifact=Image("u")), "image"),
        (TurnCompleteEvent(turn=Turn("t", Role.USER)), "turn_complete"),
        (LifecycleEvent(phase="done"), "lifecycle"),
        (PropertiesEvent(), "properties"),
        (NoticeEvent(content="x"), "notice"),
        (ErrorEvent(message="x"), "error"),
        (ActivityEvent(active=True), "activity"),
    ],
)
def test_every_event_exposes_its_kind_as_a_plain_string(event: Any, kind: str) -> None:
    assert type(event.kind) is str
    assert event.kind == kind


# --- JSON schema ---------------------------------------------------------------------


def test_json_schema_defines_ingress_and_output() -> None:
    schema = event_json_schema()
    assert schema["anyOf"] == [
        {"$ref": "#/$defs/IngressEvent"},
        {"$ref": "#/$defs/OutputEvent"},
    ]


def test_json_schema_maps_each_ingress_kind_to_its_event() -> None:
    mapping = event_json_schema()["$defs"]["IngressEvent"]["discriminator"]["mapping"]
    assert set(mapping) == {
        "user_message",
        "interrupt",
        "session_switch",
        "delete",
        "edit",
        "regenerate",
        "react",
    }


def test_json_schema_lets_any_artifact_kind_through_with_a_context() -> None:
    artifact = event_json_schema()["$defs"]["ArtifactEvent"]
    assert (artifact["required"], artifact["additionalProperties"]) == (["kind"], True)
    assert set(artifact["properties"]) == {"kind", "context"}


def test_json_schema_is_plain_json() -> None:
    assert dumps(event_json_schema()).startswith(b'{"$schema"')


# --- property: output events survive the wire ----------------------------------------

_text = st.text(max_size=12)
_contexts = st.builds(EventContext, provenance=_text, user=_text, traceparent=_text)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_plugin_artifacts = st.builds(
    lambda kind, fields: UnknownArtifact(kind, {"kind": kind, **fields}),
    st.from_regex(r"x_[a-z]{1,8}", fullmatch=True),
    st.dictionaries(_text.filter(lambda key: key not in ("kind", "context")), _json_values),
)
_complete_artifacts = st.one_of(
    st.builds(Text, _text), st.builds(Reasoning, _text), st.builds(Image, _text), _plugin_artifacts
)
_artifacts = _complete_artifacts | st.builds(TextDelta, _text) | st.builds(ReasoningDelta, _text)
_turns = st.builds(
    Turn,
    id=_text,
    role=st.sampled_from(Role),
    artifacts=st.lists(_complete_artifacts, max_size=3),
    parent_id=_text,
    timestamp=st.none() | st.datetimes(min_value=datetime(2000, 1, 1), timezones=st.just(UTC)),
    control=st.sampled_from(TraversalControl),
    event_id=_text,
)
_operations = st.builds(
    PropertyOperation, op=st.sampled_from(["set", "delete"]), key=_text, value=_text
)
_output_events = st.one_of(
    st.builds(ArtifactEvent, artifact=_artifacts, context=_contexts),
    st.builds(TurnCompleteEvent, turn=_turns, context=_contexts),
    st.builds(
        LifecycleEvent,
        phase=st.sampled_from(["submitted", "streaming", "cancelled", "done"]),
        context=_contexts,
    ),
    st.builds(PropertiesEvent, operations=st.none() | st.lists(_operations), context=_contexts),
    st.builds(NoticeEvent, content=_text, severity=st.sampled_from(Severity), context=_contexts),
    st.builds(ErrorEvent, message=_text, code=_text, context=_contexts),
    st.builds(ActivityEvent, active=st.booleans(), description=_text, context=_contexts),
)


@given(_output_events)
def test_every_output_event_survives_encode_then_decode(event: OutputEvent) -> None:
    raw = encode_event(event)
    decoded = decode_output(raw)
    # Without a provenance the context is not written, so it comes back empty.
    expected = event if event.context.provenance else event.with_context(EventContext())
    assert decoded == expected
    assert encode_event(decoded) == raw


@given(_output_events)
def test_the_fast_encoder_writes_exactly_what_pydantic_writes(event: OutputEvent) -> None:
    assert encode_event(event) == _encode_with_pydantic(event)


@given(_output_events)
def test_an_event_encoded_again_is_the_same_bytes(event: OutputEvent) -> None:
    # The second time a turn's cached JSON and the context's cached tail are reused.
    first = encode_event(event)
    assert encode_event(event) == first == _encode_with_pydantic(event)


@given(st.lists(_contexts, min_size=2, max_size=4), st.sampled_from(["submitted", "done"]))
def test_events_of_different_contexts_never_share_a_cached_context(
    contexts: list[EventContext], phase: LifecyclePhase
) -> None:
    for _ in range(2):
        for context in contexts:
            event = LifecycleEvent(phase=phase, context=context)
            assert encode_event(event) == _encode_with_pydantic(event)


@given(_contexts, st.sampled_from(["submitted", "done"]), _text)
def test_a_context_that_keeps_its_encoded_tail_is_still_the_same_context(
    context: EventContext, phase: LifecyclePhase, provenance: str
) -> None:
    fresh = EventContext(
        provenance=context.provenance, user=context.user, traceparent=context.traceparent
    )
    events = [LifecycleEvent(phase=phase, context=context), ArtifactEvent.of(Text("hi"), context)]
    for event in events * 2:  # the second time from the tail kept on the context
        assert encode_event(event) == _encode_with_pydantic(event)
    assert context == fresh
    assert hash(context) == hash(fresh)
    assert context.__dict__ == fresh.__dict__
    assert context.model_dump_json() == fresh.model_dump_json()
    assert context.model_fields_set == fresh.model_fields_set
    for copied in (copy.copy(context), copy.deepcopy(context), pickle.loads(pickle.dumps(context))):
        assert copied == fresh
        assert encode_event(events[0].with_context(copied)) == encode_event(events[0])
    # A changed copy of an encoded context writes its own values, not the kept tail.
    changed = context.model_copy(update={"provenance": provenance, "user": provenance})
    event = LifecycleEvent(phase=phase, context=changed)
    assert encode_event(event) == _encode_with_pydantic(event)


def test_a_context_is_encoded_once_for_all_the_events_that_carry_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[EventContext] = []
    context_value = events_module._context_value

    def counting(context: EventContext) -> dict[str, str]:
        encoded.append(context)
        return context_value(context)

    monkeypatch.setattr(events_module, "_context_value", counting)
    first, second = EventContext(provenance="http"), EventContext(provenance="http")
    for context in (first, second, first):
        for phase in ("submitted", "streaming", "done"):
            encode_event(LifecycleEvent.of(phase, context))
        encode_event(ArtifactEvent.of(TextDelta("hi"), context))
    assert encoded == [first, second]
    assert [c is e for c, e in zip((first, second), encoded, strict=True)] == [True, True]


@given(
    st.builds(
        ArtifactEvent,
        artifact=st.one_of(
            st.builds(Text, _text),
            st.builds(TextDelta, _text),
            st.builds(Reasoning, _text),
            st.builds(ReasoningDelta, _text),
        ),
        context=_contexts,
    )
)
def test_the_fast_encoder_of_text_events_matches_pydantic_for_any_text(event: OutputEvent) -> None:
    assert encode_event(event) == _encode_with_pydantic(event)


@given(st.builds(UserMessageEvent, id=_text.filter(bool), content=_text, context=_contexts))
def test_the_fast_encoder_of_user_messages_matches_pydantic(event: UserMessageEvent) -> None:
    assert encode_event(event) == _encode_with_pydantic(event)


@given(_output_events)
def test_decoding_a_parsed_event_gives_what_decoding_its_bytes_gives(event: OutputEvent) -> None:
    raw = encode_event(event)
    assert decode_output_value(loads(raw)) == decode_output(raw)


_MALFORMED_OUTPUT = [
    b'{"kind":"lifecycle","phase":"sleeping"}',
    b'{"kind":"lifecycle"}',
    b'{"kind":"activity","active":"yes"}',
    b'{"kind":"properties","operations":[{"op":"rename","key":"k"}]}',
    b'{"kind":"turn_complete","turn":{"id":"t","role":"user","timestamp":"x"}}',
    b'{"kind":"session_switch","session_id":"a.b"}',
    b'{"kind":"text","content":5}',
    b'{"kind":"","content":"hi"}',
    b'{"kind":7}',
    b'{"content":"hi"}',
    b'["kind"]',
]


@pytest.mark.parametrize("raw", _MALFORMED_OUTPUT)
def test_a_malformed_parsed_event_is_refused_with_the_error_of_its_bytes(raw: bytes) -> None:
    with pytest.raises(EventDecodeError) as from_bytes:
        decode_output(raw)
    with pytest.raises(EventDecodeError) as from_value:
        decode_output_value(loads(raw))
    assert str(from_value.value) == str(from_bytes.value)


# --- ArtifactEvent.of: the constructor's event, without pydantic's validation ----------


class _ContextSubclass(EventContext):
    pass


_of_artifacts = _artifacts | st.builds(
    lambda kind: UnknownArtifact(kind, {"kind": kind}),
    st.sampled_from(["lifecycle", "turn_complete", "notice", "error", "session_switch"]),
)
_of_contexts = _contexts | st.builds(_ContextSubclass, provenance=_text)


def _same_as_constructed(build: Callable[[], Any], construct: Callable[[], Any]) -> None:
    """`build()` makes exactly what `construct()` (pydantic's validation) makes, or
    raises the same validation errors."""
    try:
        expected = construct()
    except ValidationError as exc:
        refused = exc.errors(include_context=False)
        with pytest.raises(ValidationError) as also_refused:
            build()
        assert also_refused.value.errors(include_context=False) == refused
        return
    event = build()
    assert type(event) is type(expected)
    assert event == expected
    assert event.__dict__ == expected.__dict__
    assert event.model_fields_set == expected.model_fields_set
    assert event.model_dump() == expected.model_dump()
    assert event.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)
    assert encode_event(event) == _encode_with_pydantic(expected)


@given(_of_artifacts, _of_contexts)
def test_artifact_event_of_is_the_event_the_constructor_makes(
    artifact: Artifact, context: EventContext
) -> None:
    _same_as_constructed(
        lambda: ArtifactEvent.of(artifact, context),
        lambda: ArtifactEvent(artifact=artifact, context=context),
    )


@given(
    st.sampled_from(["submitted", "streaming", "cancelled", "done", "sleeping", "", None, 1]),
    _of_contexts,
)
def test_lifecycle_event_of_is_the_event_the_constructor_makes(
    phase: Any, context: EventContext
) -> None:
    _same_as_constructed(
        lambda: LifecycleEvent.of(phase, context),
        lambda: LifecycleEvent(phase=phase, context=context),
    )


_of_turns = _turns | st.builds(
    lambda turn, delta: Turn(turn.id, turn.role, (*turn.artifacts, delta)),
    _turns,
    st.builds(TextDelta, _text) | st.builds(ReasoningDelta, _text),
)


@given(_of_turns | st.builds(turn_to_dict, _turns) | st.none(), _of_contexts)
def test_turn_complete_event_of_is_the_event_the_constructor_makes(
    turn: Any, context: EventContext
) -> None:
    _same_as_constructed(
        lambda: TurnCompleteEvent.of(turn, context),
        lambda: TurnCompleteEvent(turn=turn, context=context),
    )


@pytest.mark.parametrize("value", ["text", None, {"kind": "text", "content": "hi"}])
def test_artifact_event_of_refuses_what_is_not_an_artifact_as_the_constructor_does(
    value: object,
) -> None:
    with pytest.raises(ValidationError, match="expected an Artifact"):
        ArtifactEvent.of(value, HTTP)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "event",
    [
        ArtifactEvent.of(Text("hi"), HTTP),
        LifecycleEvent.of("done", HTTP),
        TurnCompleteEvent.of(Turn("t", Role.USER, (Text("hi"),)), HTTP),
    ],
)
def test_events_built_by_of_are_frozen_and_copy_like_constructed_ones(event: Any) -> None:
    with pytest.raises(ValidationError, match="frozen"):
        event.context = EventContext()
    copy = event.with_context(EventContext(provenance="x"))
    assert copy.context.provenance == "x"
    assert copy == type(event)(**{**event.__dict__, "context": EventContext(provenance="x")})


_lifecycle_values = st.fixed_dictionaries(
    {
        "kind": st.just("lifecycle"),
        "phase": st.one_of(
            st.sampled_from(["submitted", "streaming", "cancelled", "done"]), _text, st.integers()
        ),
        "context": st.one_of(
            st.fixed_dictionaries({"provenance": st.one_of(_text, st.integers())}),
            st.fixed_dictionaries({"provenance": _text, "user": _text}),
            st.just({}),
            st.none(),
        ),
    },
    optional={"extra": _text},
)


def _decoded_or_error(value: dict[str, Any]) -> object:
    try:
        return decode_output_value(value)
    except EventDecodeError as exc:
        return str(exc)


@given(_lifecycle_values)
def test_a_lifecycle_value_decodes_as_pydantic_decodes_it_first_time_and_again(
    value: dict[str, Any],
) -> None:
    with patch.object(events_module, "_lifecycle_key", lambda value: None):
        expected = _decoded_or_error(value)  # validated every time, as before the cache
    first = _decoded_or_error(value)
    assert first == expected
    assert _decoded_or_error(value) == expected
    if isinstance(first, LifecycleEvent):
        assert first.model_fields_set == LifecycleEvent.model_validate(value).model_fields_set


def test_plain_lifecycle_values_are_validated_once_per_phase_and_provenance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[Any] = []
    validator = events_module._OUTPUT_VALIDATORS["lifecycle"]

    class Counting:
        def validate_python(self, value: Any) -> Any:
            validated.append(value)
            return validator.validate_python(value)

    monkeypatch.setitem(events_module._OUTPUT_VALIDATORS, "lifecycle", Counting())
    monkeypatch.setattr(events_module, "_PLAIN_LIFECYCLES", {})
    for _ in range(20):
        for phase in ("submitted", "streaming", "done"):
            value = {"kind": "lifecycle", "phase": phase, "context": {"provenance": "slack"}}
            event = decode_output_value(value)
            assert event == LifecycleEvent(phase=phase, context=EventContext(provenance="slack"))
    assert len(validated) == 3
    odd = {"kind": "lifecycle", "phase": "done", "context": {"provenance": "slack", "user": "u"}}
    decode_output_value(odd)
    decode_output_value(odd)
    assert len(validated) == 5, "other shapes are validated every time"


_INGRESS_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children)
    ),
    max_leaves=6,
)
_INGRESS_LIKE = st.fixed_dictionaries(
    {"kind": st.sampled_from(["user_message", "interrupt", "session_switch", "dance", 1])},
    optional={
        "id": st.text(max_size=3) | st.integers(0, 9),
        "content": st.text(max_size=5) | st.none(),
        "session_id": st.sampled_from(["t-1", "", "bad id", "x" * 200]),
        "context": st.fixed_dictionaries(
            {}, optional={"provenance": st.text(max_size=3) | st.integers(0, 9), "user": st.text()}
        )
        | _INGRESS_VALUES,
        "extra": _INGRESS_VALUES,
    },
)


@given(st.one_of(_INGRESS_LIKE.map(dumps), _INGRESS_VALUES.map(dumps), st.binary(max_size=12)))
def test_decode_ingress_gives_what_the_type_adapter_gives_or_its_error(data: bytes) -> None:
    # decode_ingress calls the adapter's validator directly (issue 11): same event, same error.
    try:
        expected = events_module._INGRESS.validate_json(data)
    except ValidationError as exc:
        message = str(events_module._decode_error("ingress", exc))
        with pytest.raises(EventDecodeError) as raised:
            decode_ingress(data)
        assert str(raised.value) == message
        return
    event = decode_ingress(data)
    assert type(event) is type(expected)
    assert event.model_fields_set == expected.model_fields_set
    if "id" not in expected.model_fields_set:  # a fresh id each time
        event = event.model_copy(update={"id": expected.id})
    assert event == expected
