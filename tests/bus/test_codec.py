"""The bus codec's per-message helpers agree with nats-py on what they shortcut."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError

from ore_core.bus.codec import stream_sequence

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
