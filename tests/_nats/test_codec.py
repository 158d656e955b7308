"""The wire codec's per-message helpers agree with nats-py on what they shortcut."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError
from nats.js.errors import APIError, NoStreamResponseError

from ore_core._nats.codec import read_publish_ack, redelivered, stream_sequence
from ore_core.bus.ingress.decoding import IngressDecoder
from ore_core.errors import BusError

V1_ACK = "$JS.ACK.ORE_IN.ore-core-p3.2.9876.41.1732960000000000000.5"
V2_ACK = "$JS.ACK._.ACCHASH.ORE_IN.ore-core-p3.2.9876.41.1732960000000000000.5.rnd"
V2_ACK_SHORT = "$JS.ACK._.ACCHASH.ORE_IN.ore-core-p3.2.9876.41.1732960000000000000.5"


def _message(reply: str) -> Msg:
    return Msg(_client=None, subject="ore.inp.3.raw.t-1", reply=reply, data=b"{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("reply", [V1_ACK, V2_ACK, V2_ACK_SHORT])
def test_stream_sequence_is_the_sequence_nats_py_reads_from_the_ack_subject(reply: str) -> None:
    assert stream_sequence(_message(reply)) == _message(reply).metadata.sequence.stream == 9876


@pytest.mark.parametrize("reply", ["", "_INBOX.abc", "$JS.ACK.too.short"])
def test_stream_sequence_of_a_message_that_is_not_from_jetstream_raises_nats_pys_error(
    reply: str,
) -> None:
    with pytest.raises(NotJSMessageError):
        stream_sequence(_message(reply))


@given(
    st.integers(min_value=0, max_value=2**63),
    st.booleans(),
    st.booleans(),
    st.sampled_from([(",", ":"), (", ", ": "), (",", " : ")]),
)
def test_a_pub_ack_s_sequence_is_what_its_json_says(
    sequence: int, domain: bool, duplicate: bool, separators: tuple[str, str]
) -> None:
    ack: dict[str, object] = {"stream": "ORE_EV"}
    if domain:
        ack["domain"] = "hub"
    ack["seq"] = sequence
    if duplicate:
        ack["duplicate"] = True
    data = json.dumps(ack, separators=separators).encode()
    msg = Msg(_client=None, subject="_INBOX.x.1", data=data)  # type: ignore[arg-type]
    assert read_publish_ack(msg) == (json.loads(data)["seq"], duplicate)


def test_a_refused_publish_raises_the_api_error_of_its_code() -> None:
    data = b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}'
    with pytest.raises(APIError) as refused:
        read_publish_ack(Msg(_client=None, subject="_INBOX.x.1", data=data))  # type: ignore[arg-type]
    assert (refused.value.err_code, refused.value.description) == (10071, "wrong last sequence: 3")


def test_an_empty_503_answer_is_no_stream_response() -> None:
    msg = Msg(_client=None, subject="_INBOX.x.1", headers={"Status": "503"})  # type: ignore[arg-type]
    with pytest.raises(NoStreamResponseError):
        read_publish_ack(msg)


@pytest.mark.parametrize("data", [b"not json", b"[1]", b'{"stream":"S"}', b""])
def test_an_unreadable_answer_is_a_bus_error(data: bytes) -> None:
    with pytest.raises(BusError):
        read_publish_ack(Msg(_client=None, subject="_INBOX.x.1", data=data))  # type: ignore[arg-type]


def test_a_refusal_with_fields_nats_py_does_not_know_is_still_an_api_error() -> None:
    data = b'{"error":{"err_code":10077,"description":"maximum bytes exceeded","new":1}}'
    with pytest.raises(APIError) as refused:
        read_publish_ack(Msg(_client=None, subject="_INBOX.x.1", data=data))  # type: ignore[arg-type]
    assert refused.value.err_code == 10077


@pytest.mark.parametrize("reply", [V1_ACK, V2_ACK, V2_ACK_SHORT])
@pytest.mark.parametrize("count", [1, 2, 11])
def test_redelivered_agrees_with_the_delivery_count_nats_py_reads(reply: str, count: int) -> None:
    msg = _message(reply.replace("ore-core-p3.2.", f"ore-core-p3.{count}."))
    assert (redelivered(msg), msg.metadata.num_delivered) == (count > 1, count)


@pytest.mark.parametrize("reply", ["", "_INBOX.abc", "$JS.ACK.too.short"])
def test_a_message_that_is_not_from_jetstream_is_not_redelivered(reply: str) -> None:
    assert not redelivered(_message(reply))


def test_the_ingress_decoder_counts_the_messages_jetstream_delivered_again() -> None:
    decoder = IngressDecoder(max_payload=1 << 20)
    first = V1_ACK.replace("ore-core-p3.2.", "ore-core-p3.1.")
    for reply in (first, V1_ACK, first):
        msg = Msg(
            _client=None,  # type: ignore[arg-type]
            subject="ore.in.raw.t-1",
            reply=reply,
            data=b'{"kind": "user_message", "id": "m-1", "content": "hi"}',
        )
        decoder.decode(msg, "raw", "t-1")
    assert decoder.redelivered == 1
