"""Artifact kinds, rendering, JSON and the envelope (docs/go-compatibility.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ore_core import (
    Artifact,
    ArtifactError,
    Delta,
    Image,
    Reasoning,
    ReasoningDelta,
    ReasoningSignature,
    StopReason,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Truncation,
    UnknownArtifact,
    Usage,
)
from ore_core.artifacts import (
    PERSISTABLE_KINDS,
    STOP_REASONS,
    Accumulable,
    ArtifactRegistry,
    Attachment,
    LLMRenderer,
    MarkdownRenderer,
    StatusContributor,
    decode_artifact,
    decode_envelope,
    encode_envelope,
    registry,
)
from ore_core.jsonutil import dumps, loads


class Rendered:
    """A tool value with its own renderings for the model and for people."""

    def marshal_llm(self) -> str:
        return "for the model"

    def marshal_markdown(self) -> str:
        return "**for people**"


class Opaque:
    """A value that neither renders itself nor serialises to JSON."""


SAMPLES: dict[str, Artifact] = {
    "text": Text("hello"),
    "reasoning": Reasoning("thinking"),
    "image": Image("https://example.com/a.png"),
    "tool_call": ToolCall("c1", "calc", '{"a":1}'),
    "tool_result": ToolResult("c1", "2", is_error=False, truncation=Truncation(10, 2, 5, 1)),
    "usage": Usage(10, 20, 30, cache_read_tokens=4, thinking_tokens=0),
    "stop_reason": StopReason("tool_use"),
    "reasoning_signature": ReasoningSignature("anthropic", "signature", "c2ln"),
    "attachment": Attachment("a.pdf", "application/pdf", 3, "ab" * 32, "ORE_FILES"),
}
"""One persistable artifact of every built-in kind."""

DELTAS: dict[str, Delta] = {
    "text_delta": TextDelta("he"),
    "reasoning_delta": ReasoningDelta("thi"),
    "tool_call_delta": ToolCallDelta(0, "c1", "ca", "{"),
}


def own_json(artifact: Artifact) -> bytes:
    return dumps(artifact.to_dict())


def round_trip(artifact: Artifact) -> Artifact:
    (decoded,) = decode_envelope(loads(dumps(encode_envelope([artifact]))))
    return decoded


# Kinds


@pytest.mark.parametrize("kind", sorted(SAMPLES.keys() | DELTAS.keys()))
def test_each_concrete_type_reports_its_kind_string(kind: str) -> None:
    artifact = SAMPLES.get(kind) or DELTAS[kind]
    assert artifact.kind == kind
    assert artifact.to_dict()["kind"] == kind


@pytest.mark.parametrize("kind", sorted(DELTAS))
def test_delta_types_are_accumulable_deltas(kind: str) -> None:
    assert isinstance(DELTAS[kind], Accumulable)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_persistable_types_are_not_deltas(kind: str) -> None:
    assert not isinstance(SAMPLES[kind], Delta)


# Registry


def test_default_registry_holds_exactly_the_persistable_manifest() -> None:
    assert set(registry.registered()) == PERSISTABLE_KINDS


@pytest.mark.parametrize("kind", sorted(PERSISTABLE_KINDS))
def test_registered_class_produces_artifacts_of_its_kind(kind: str) -> None:
    cls = registry.registered()[kind]
    assert kind == cls.KIND
    assert type(SAMPLES[kind]) is cls
    assert cls.from_dict(SAMPLES[kind].to_dict()).kind == kind


def test_registered_returns_a_copy() -> None:
    registry.registered().clear()
    assert set(registry.registered()) == PERSISTABLE_KINDS


@dataclass(frozen=True, slots=True)
class Poll(Artifact):
    """A plugin's own artifact kind."""

    KIND: ClassVar[str] = "poll"
    question: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "poll", "question": self.question}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(str(data["question"]))


def test_plugin_kind_registered_on_a_registry_decodes_to_its_class() -> None:
    plugins = ArtifactRegistry([Poll])
    items = loads(dumps(encode_envelope([Poll("lunch?")])))
    assert decode_envelope(items, plugins) == [Poll("lunch?")]
    assert decode_artifact({"kind": "poll", "question": "lunch?"}, plugins) == Poll("lunch?")


def test_register_works_as_a_class_decorator() -> None:
    plugins = ArtifactRegistry()
    assert plugins.register(Poll) is Poll
    assert plugins.get("poll") is Poll


def test_registering_a_delta_is_refused() -> None:
    with pytest.raises(ArtifactError, match='delta artifact "text_delta" cannot be registered'):
        ArtifactRegistry().register(TextDelta)


def test_registering_a_class_without_kind_is_refused() -> None:
    with pytest.raises(ArtifactError, match="has no KIND"):
        ArtifactRegistry().register(Artifact)


# Envelope


def test_envelope_wraps_the_own_json_under_data() -> None:
    assert dumps(encode_envelope([Text("hi")])) == (
        b'[{"kind":"text","data":{"kind":"text","content":"hi"}}]'
    )


@given(st.text(), st.sampled_from([Text, Reasoning]))
def test_envelope_of_text_kinds_is_their_own_json_under_data(content: str, cls: type) -> None:
    # Text and reasoning skip the field codec in the envelope: the same dict regardless.
    artifact = cls(content)
    assert encode_envelope([artifact]) == [{"kind": artifact.kind, "data": artifact.to_dict()}]


@pytest.mark.parametrize("kind", sorted(DELTAS))
def test_encode_envelope_refuses_deltas(kind: str) -> None:
    with pytest.raises(ArtifactError) as info:
        encode_envelope([Text("before"), DELTAS[kind]])
    assert str(info.value) == f'delta artifact "{kind}" cannot be persisted'


def test_every_sample_decodes_to_a_value_equal_to_the_original() -> None:
    originals = list(SAMPLES.values())
    assert decode_envelope(loads(dumps(encode_envelope(originals)))) == originals


def test_unknown_kind_decodes_to_unknown_artifact_and_re_encodes_byte_for_byte() -> None:
    written = (
        b'[{"kind":"chart","data":{"kind":"chart","series":[1,2.5,null],"opts":{"z":1,"a":"b"}}}]'
    )
    (decoded,) = decode_envelope(loads(written))
    assert isinstance(decoded, UnknownArtifact)
    assert decoded.kind == "chart"
    assert dumps(encode_envelope([decoded])) == written


def test_plugin_kind_is_unknown_to_a_registry_without_it() -> None:
    (decoded,) = decode_envelope(loads(dumps(encode_envelope([Poll("lunch?")]))))
    assert decoded == UnknownArtifact("poll", {"kind": "poll", "question": "lunch?"})


def test_decode_envelope_of_none_is_empty() -> None:
    assert decode_envelope(None) == []


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["text"], "unmarshal artifact 0: expected an object"),
        ([{"data": {}}], "unmarshal artifact 0: missing kind"),
        ([{"kind": "text", "data": "hi"}], 'unmarshal artifact "text": data must be an object'),
        (
            [{"kind": "usage", "data": {"prompt_tokens": "10"}}],
            'unmarshal artifact "usage": field "prompt_tokens" must be an integer',
        ),
        (
            [{"kind": "tool_result", "data": {"is_error": 1}}],
            'unmarshal artifact "tool_result": field "is_error" must be a boolean',
        ),
    ],
)
def test_decode_envelope_reports_bad_items_by_index_or_kind(items: list[Any], message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        decode_envelope(items)


def test_booleans_are_not_accepted_as_token_counts() -> None:
    with pytest.raises(ArtifactError, match='field "total_tokens" must be an integer'):
        decode_artifact({"kind": "usage", "total_tokens": True})


def test_missing_and_null_fields_decode_as_zero_values() -> None:
    data = {"kind": "tool_call", "id": None}
    assert decode_artifact(data) == ToolCall("", "", "")


def test_encode_envelope_names_the_kind_whose_to_dict_failed() -> None:
    class Broken(Poll):
        def to_dict(self) -> dict[str, Any]:
            raise TypeError("cannot encode")

    with pytest.raises(ArtifactError, match='marshal artifact "poll": cannot encode'):
        encode_envelope([Broken("x")])


def test_decode_artifact_accepts_deltas_from_their_own_json() -> None:
    delta = ToolCallDelta(2, "c9", "grep", '{"q"')
    assert decode_artifact(loads(own_json(delta))) == delta


def test_decode_artifact_requires_a_kind() -> None:
    with pytest.raises(ArtifactError, match="artifact without a kind"):
        decode_artifact({"content": "hi"})


# Own JSON of every kind


@pytest.mark.parametrize(
    ("artifact", "expected"),
    [
        (Text("hi"), b'{"kind":"text","content":"hi"}'),
        (TextDelta("h"), b'{"kind":"text_delta","content":"h"}'),
        (Reasoning("hm"), b'{"kind":"reasoning","content":"hm"}'),
        (ReasoningDelta("h"), b'{"kind":"reasoning_delta","content":"h"}'),
        (
            ToolCall("c1", "calc", '{"a":1}'),
            b'{"kind":"tool_call","id":"c1","name":"calc","arguments":"{\\"a\\":1}"}',
        ),
        (
            ToolCall("c1", "calc", "{}", display={"result": 42}),
            b'{"kind":"tool_call","id":"c1","name":"calc","arguments":"{}",'
            b'"display":"{\\"result\\":42}"}',
        ),
        (
            ToolCallDelta(0, "c1", "calc", ""),
            b'{"kind":"tool_call_delta","id":"c1","name":"calc","arguments":"","index":0}',
        ),
        (
            ToolResult("c1", "2"),
            b'{"kind":"tool_result","tool_call_id":"c1","content":"2","is_error":false}',
        ),
        (
            ToolResult("c1", "raw", value={"n": 2}),
            b'{"kind":"tool_result","tool_call_id":"c1",'
            b'"content":"```json\\n{\\n  \\"n\\": 2\\n}\\n```","is_error":false}',
        ),
        (
            Image("data:image/png;base64,AA=="),
            b'{"kind":"image","url":"data:image/png;base64,AA=="}',
        ),
    ],
)
def test_own_json_has_the_exact_keys(artifact: Artifact, expected: bytes) -> None:
    assert own_json(artifact) == expected


# StopReason


@pytest.mark.parametrize("reason", sorted(STOP_REASONS))
def test_stop_reason_marshals_and_re_marshals_identically(reason: Any) -> None:
    written = own_json(StopReason(reason))
    assert written == b'{"kind":"stop_reason","reason":"%s"}' % reason.encode()
    assert own_json(decode_artifact(loads(written))) == written


def test_stop_reason_refuses_an_unknown_reason() -> None:
    with pytest.raises(ArtifactError, match='invalid stop reason "paused"'):
        StopReason("paused")  # type: ignore[arg-type]


def test_decoding_an_unknown_stop_reason_names_the_kind() -> None:
    with pytest.raises(
        ArtifactError, match='unmarshal artifact "stop_reason": invalid stop reason'
    ):
        decode_artifact({"kind": "stop_reason", "reason": "paused"})


# ToolCall rendering


@pytest.mark.parametrize("display", [None, "calc(1)", {"a": 1}, Rendered(), Opaque()])
def test_tool_call_llm_string_is_always_the_arguments(display: Any) -> None:
    assert ToolCall("c1", "calc", '{"x":1}', display).llm_string() == '{"x":1}'


@pytest.mark.parametrize(
    ("display", "expected"),
    [
        (Rendered(), "**for people**"),
        ("🧮 calc(1)", "🧮 calc(1)"),
        ({"a": 1}, '{"a":1}'),
        (Opaque(), '{"x":1}'),
        (None, '{"x":1}'),
    ],
)
def test_tool_call_markdown_string_renders_the_display(display: Any, expected: str) -> None:
    assert ToolCall("c1", "calc", '{"x":1}', display).markdown_string() == expected


@pytest.mark.parametrize("display", ['{"x":1}', "", None, Opaque()])
def test_tool_call_json_omits_display_that_adds_nothing(display: Any) -> None:
    assert "display" not in ToolCall("c1", "calc", '{"x":1}', display).to_dict()


def test_tool_call_display_decodes_as_its_rendered_string() -> None:
    decoded = round_trip(ToolCall("c1", "calc", "{}", display={"result": 42}))
    assert decoded == ToolCall("c1", "calc", "{}", display='{"result":42}')


# ToolResult rendering


@pytest.mark.parametrize(
    ("value", "expected"),
    [(Rendered(), "for the model"), ("hello", '"hello"'), (None, "content"), (Opaque(), "content")],
)
def test_tool_result_llm_string_prefers_the_value(value: Any, expected: str) -> None:
    assert ToolResult("c1", "content", value=value).llm_string() == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Rendered(), "**for people**"),
        (42, "```json\n42\n```"),
        (None, "content"),
        (Opaque(), "content"),
    ],
)
def test_tool_result_markdown_string_prefers_the_value(value: Any, expected: str) -> None:
    assert ToolResult("c1", "content", value=value).markdown_string() == expected


def test_tool_result_zero_value_is_still_a_value() -> None:
    assert ToolResult("c1", "content", value=0).llm_string() == "0"


def test_failed_tool_result_shows_its_content_verbatim_to_both_audiences() -> None:
    content = '{"error":"boom"}\n\n**Error:** boom'
    result = ToolResult("c1", content, value=Rendered(), is_error=True)
    assert result.llm_string() == content
    assert result.markdown_string() == content


def test_failed_tool_result_without_content_renders_its_value() -> None:
    result = ToolResult("c1", "", value=Rendered(), is_error=True)
    assert result.markdown_string() == "**for people**"


def test_tool_result_json_writes_the_markdown_and_loses_the_value() -> None:
    decoded = round_trip(ToolResult("c1", "raw", value=Rendered()))
    assert decoded == ToolResult("c1", "**for people**")


def test_renderer_protocols_are_checked_at_runtime() -> None:
    class Cwd:
        def status(self) -> dict[str, str]:
            return {"cwd": "/tmp"}

    assert isinstance(Rendered(), LLMRenderer)
    assert isinstance(Rendered(), MarkdownRenderer)
    assert isinstance(Cwd(), StatusContributor)
    assert not isinstance(Opaque(), StatusContributor)


# Delta accumulation


def test_text_and_reasoning_deltas_seed_from_nothing() -> None:
    assert TextDelta("a").merge_into(None) == Text("a")
    assert ReasoningDelta("a").merge_into(None) == Reasoning("a")


def test_text_and_reasoning_deltas_concatenate() -> None:
    assert TextDelta("b").merge_into(Text("a")) == Text("ab")
    assert ReasoningDelta("b").merge_into(Reasoning("a")) == Reasoning("ab")


def test_delta_accumulator_keys() -> None:
    assert TextDelta().accumulator_key() == "text"
    assert ReasoningDelta().accumulator_key() == "reasoning"
    assert ToolCallDelta(3).accumulator_key() == "tool_call:3"


def test_tool_call_delta_seeds_a_tool_call_without_display() -> None:
    assert ToolCallDelta(0, "c1", "ca", "{").merge_into(None) == ToolCall("c1", "ca", "{")


def test_tool_call_deltas_concatenate_name_and_arguments() -> None:
    acc = ToolCallDelta(0, "c1", "ca", '{"a"').merge_into(None)
    assert ToolCallDelta(0, "", "lc", ":1}").merge_into(acc) == ToolCall("c1", "calc", '{"a":1}')


def test_tool_call_delta_latest_non_empty_id_wins() -> None:
    acc = ToolCall("old", "calc", "")
    assert ToolCallDelta(0, "new").merge_into(acc) == ToolCall("new", "calc", "")


def test_tool_call_delta_with_empty_id_keeps_the_old_id() -> None:
    acc = ToolCall("old", "calc", "")
    assert ToolCallDelta(0, "", "", "{}").merge_into(acc) == ToolCall("old", "calc", "{}")


# Usage


def test_usage_omits_zero_cache_fields_and_absent_thinking() -> None:
    assert own_json(Usage(1, 2, 3)) == (
        b'{"kind":"usage","prompt_tokens":1,"completion_tokens":2,"total_tokens":3}'
    )


def test_usage_emits_non_zero_cache_fields() -> None:
    data = Usage(1, 2, 3, cache_read_tokens=4, cache_write_tokens=5).to_dict()
    assert (data["cache_read_tokens"], data["cache_write_tokens"]) == (4, 5)


def test_usage_with_only_cache_reads_emits_only_the_read_count() -> None:
    data = Usage(1, 2, 3, cache_read_tokens=4).to_dict()
    assert "cache_read_tokens" in data
    assert "cache_write_tokens" not in data


def test_usage_keeps_an_explicit_zero_thinking_count() -> None:
    assert Usage(1, 2, 3, thinking_tokens=0).to_dict()["thinking_tokens"] == 0


@pytest.mark.parametrize("thinking", [None, 0, 80])
def test_usage_round_trips_its_thinking_count(thinking: int | None) -> None:
    usage = Usage(1, 2, 3, cache_read_tokens=4, cache_write_tokens=5, thinking_tokens=thinking)
    assert round_trip(usage) == usage


# ReasoningSignature


@pytest.mark.parametrize(
    ("provider", "sub_kind"),
    [("anthropic", "signature"), ("anthropic", "redacted"), ("openai", "encrypted")],
)
def test_reasoning_signature_marshals_with_sub_kind_and_round_trips(
    provider: str, sub_kind: str
) -> None:
    signature = ReasoningSignature(provider, sub_kind, "b3BhcXVl")
    assert own_json(signature) == (
        b'{"kind":"reasoning_signature","provider":"%s","sub_kind":"%s","data":"b3BhcXVl"}'
        % (provider.encode(), sub_kind.encode())
    )
    assert round_trip(signature) == signature


# Truncation


def test_tool_result_without_truncation_is_not_truncated() -> None:
    assert not ToolResult("c1", "x").truncated()


@pytest.mark.parametrize(
    ("truncation", "truncated"),
    [
        (Truncation(), False),
        (Truncation(original_bytes=50, shown_bytes=50), False),
        (Truncation(original_bytes=1000, shown_bytes=50), True),
        (Truncation(original_bytes=51, shown_bytes=50), True),
    ],
)
def test_truncated_means_fewer_bytes_shown_than_produced(
    truncation: Truncation, truncated: bool
) -> None:
    assert truncation.truncated() is truncated
    assert ToolResult("c1", "x", truncation=truncation).truncated() is truncated


def test_empty_truncation_json_keeps_only_the_shown_counts() -> None:
    assert dumps(Truncation().to_dict()) == b'{"shown_bytes":0,"shown_lines":0}'


def test_full_truncation_json_has_every_field() -> None:
    truncation = Truncation(1000, 40, 50, 2, "tail", "read from line {next_offset}")
    assert truncation.to_dict() == {
        "original_bytes": 1000,
        "original_lines": 40,
        "shown_bytes": 50,
        "shown_lines": 2,
        "style": "tail",
        "recovery_hint": "read from line {next_offset}",
    }


def test_tool_result_json_includes_truncation_only_when_set() -> None:
    assert "truncation" not in ToolResult("c1", "x").to_dict()
    with_truncation = ToolResult("c1", "x", truncation=Truncation(10, 2, 5, 1))
    assert with_truncation.to_dict()["truncation"] == Truncation(10, 2, 5, 1).to_dict()


# Round trip of every persistable kind

counts = st.integers(min_value=0, max_value=2**63 - 1)
truncations = st.builds(Truncation, counts, counts, counts, counts, st.text(), st.text())
persistable = st.one_of(
    st.builds(Text, st.text()),
    st.builds(Reasoning, st.text()),
    st.builds(Image, st.text()),
    st.builds(ToolCall, st.text(), st.text(), st.text()),
    st.builds(ToolResult, st.text(), st.text(), st.none(), st.booleans(), st.none() | truncations),
    st.builds(Usage, counts, counts, counts, counts, counts, st.none() | counts),
    st.builds(StopReason, st.sampled_from(sorted(STOP_REASONS))),
    st.builds(ReasoningSignature, st.text(), st.text(), st.text()),
)


@given(st.lists(persistable, max_size=5))
def test_persistable_artifacts_round_trip_to_equal_values(artifacts: list[Artifact]) -> None:
    assert decode_envelope(loads(dumps(encode_envelope(artifacts)))) == artifacts
