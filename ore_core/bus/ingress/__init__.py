"""Ingress: messages of `ORE_IN` into the threads' streams, acknowledged once handled.

Owns the ingress path of one worker: the `Puller` of each owned partition
(`puller`), decoding and its checks (`decoding`), bad input answered and recorded
(`rejections`), threads waiting to be handled again (`parking`), what streams hold
and have not finished (`inflight`), acknowledging once the output is stored (`acks`),
and `Ingress`, which runs them (`ingress`).

May import: the vocabulary, the ledger and the session, `ore_core._nats`,
`ore_core.bridge` (the link cache admits another namespace's messages), and of the
bus: `cluster`, `server` (the consumers' names and settings) and `egress` (an ack waits
for the output it stored). Checked by tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.ingress.acks import AckBatcher
    from ore_core.bus.ingress.decoding import IngressDecoder, Rejected
    from ore_core.bus.ingress.inflight import InFlight
    from ore_core.bus.ingress.ingress import Ingress
    from ore_core.bus.ingress.parking import Parking
    from ore_core.bus.ingress.puller import Puller
    from ore_core.bus.ingress.rejections import Rejections

_EXPORTS: dict[str, str] = {
    "AckBatcher": "ore_core.bus.ingress.acks",
    "InFlight": "ore_core.bus.ingress.inflight",
    "Ingress": "ore_core.bus.ingress.ingress",
    "IngressDecoder": "ore_core.bus.ingress.decoding",
    "Parking": "ore_core.bus.ingress.parking",
    "Puller": "ore_core.bus.ingress.puller",
    "Rejected": "ore_core.bus.ingress.decoding",
    "Rejections": "ore_core.bus.ingress.rejections",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "AckBatcher",
    "InFlight",
    "Ingress",
    "IngressDecoder",
    "Parking",
    "Puller",
    "Rejected",
    "Rejections",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
