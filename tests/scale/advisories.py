"""What JetStream gave up on during a run: its MAX_DELIVERIES advisories, counted.

A consumer that delivered a message `max_deliver` times without an acknowledgement
stops delivering it and publishes `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.
<consumer>`: from then on the message is acknowledged to its sender and never handled.
ore's consumers must never get there (their redeliveries back off over minutes and ore
keeps what it waits on in progress), so the fault runs count these advisories as a
class of their own and fail on any: a lost message with an advisory was given up by the
consumer, one without was lost some other way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["MAX_DELIVERIES", "GivenUp", "MaxDeliveries"]

MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"


@dataclass(frozen=True)
class GivenUp:
    """One message a consumer gave up on."""

    stream: str
    consumer: str
    stream_seq: int
    deliveries: int


@dataclass
class MaxDeliveries:
    """Collects the MAX_DELIVERIES advisories `nc`'s account sees while listening."""

    given_up: list[GivenUp] = field(default_factory=list)

    async def listen(self, nc: Client) -> None:
        await nc.subscribe(MAX_DELIVERIES, cb=self._on_advisory)
        await nc.flush()

    async def _on_advisory(self, msg: Msg) -> None:
        try:
            advisory = json.loads(msg.data)
        except ValueError:
            advisory = {}
        self.given_up.append(
            GivenUp(
                stream=str(advisory.get("stream", "")),
                consumer=str(advisory.get("consumer", "")),
                stream_seq=int(advisory.get("stream_seq", 0)),
                deliveries=int(advisory.get("deliveries", 0)),
            )
        )
