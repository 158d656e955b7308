"""Reading inbound bodies and writing replies, without NATS."""

from __future__ import annotations

import json

import pytest

from ore_conduit_nats import MalformedMessage, Reply, encode_reply, parse_inbound
from ore_conduit_nats.wire import Inbound, child_traceparent

LIMIT = 1024


def test_a_plain_body_is_the_text() -> None:
    assert parse_inbound("grüß dich".encode(), max_bytes=LIMIT) == Inbound("grüß dich")


def test_a_json_body_gives_text_user_and_id() -> None:
    body = b' {"text": "hi", "user": "u1", "id": "m-1"}'
    assert parse_inbound(body, max_bytes=LIMIT) == Inbound("hi", "u1", "m-1")


def test_the_nats_msg_id_header_is_the_id_when_the_body_has_none() -> None:
    assert parse_inbound(b"hi", {"Nats-Msg-Id": "h-1"}, max_bytes=LIMIT).id == "h-1"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"", "empty message"),
        (b"  \n", "empty message"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"text": ', "invalid JSON"),
        (b'{"user": "u"}', "text: Field required"),
        (b'{"text": ""}', "text: String should have at least 1 character"),
        (b'{"text": 42}', "text: Input should be a valid string"),
        (b'{"text": "x", "colour": "red"}', "colour: Extra inputs are not permitted"),
        (b'{"text": "x", "id": "' + b"i" * 129 + b'"}', "id: String should have at most 128"),
    ],
)
def test_a_malformed_body_is_refused_saying_why(body: bytes, problem: str) -> None:
    with pytest.raises(MalformedMessage, match=problem):
        parse_inbound(body, max_bytes=LIMIT)


def test_a_body_over_the_limit_is_refused_naming_both_sizes() -> None:
    with pytest.raises(MalformedMessage, match="of 5 bytes is over the limit of 4 bytes"):
        parse_inbound(b"12345", max_bytes=4)


def test_a_json_reply_names_thread_and_message() -> None:
    body, headers = encode_reply(Reply("text", "hello", "t1", "m-1"), "json")
    assert json.loads(body) == {"text": "hello", "thread_id": "t1", "in_reply_to": "m-1"}
    assert headers == {"Ore-Kind": "text", "Ore-Thread-Id": "t1", "Ore-In-Reply-To": "m-1"}


def test_a_json_notice_carries_its_severity() -> None:
    body, _ = encode_reply(Reply("notice", "slow down", "t1", None, "Warn"), "json")
    assert json.loads(body) == {
        "notice": "slow down",
        "severity": "Warn",
        "thread_id": "t1",
        "in_reply_to": None,
    }


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        (Reply("text", "hello"), b"hello"),
        (Reply("error", "boom"), b"error: boom"),
        (Reply("notice", "slow down", severity="Warn"), b"Warn: slow down"),
    ],
)
def test_a_text_reply_is_the_content_with_errors_and_notices_marked(
    reply: Reply, text: bytes
) -> None:
    assert encode_reply(reply, "text") == (text, {"Ore-Kind": reply.kind})


def test_a_traceparent_continues_the_senders_trace_with_a_new_span() -> None:
    sender = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    child = child_traceparent({"traceparent": sender})
    assert child[:36] == sender[:36]
    assert child[-3:] == "-01"
    assert child != sender


def test_without_a_valid_traceparent_an_unsampled_trace_starts() -> None:
    first = child_traceparent({"traceparent": "garbage"})
    assert first.startswith("00-")
    assert first.endswith("-00")
    assert first[3:35] != child_traceparent(None)[3:35]


def test_a_json_body_may_name_the_sender_for_linked_endpoints() -> None:
    inbound = parse_inbound(b'{"text": "hi", "name": "Bo"}', max_bytes=1000)
    assert inbound == Inbound("hi", "", None, "Bo")


def test_a_sender_name_over_200_characters_is_refused() -> None:
    body = json.dumps({"text": "hi", "name": "x" * 201}).encode()
    with pytest.raises(MalformedMessage, match="name"):
        parse_inbound(body, max_bytes=1000)


def test_a_relayed_message_is_its_own_kind_in_json() -> None:
    body, headers = encode_reply(Reply("relayed", "Ana (web): hi", "t1"), "json")
    assert json.loads(body) == {"relayed": "Ana (web): hi", "thread_id": "t1", "in_reply_to": None}
    assert headers["Ore-Kind"] == "relayed"
