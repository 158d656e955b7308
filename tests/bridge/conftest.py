"""Fixtures for bridging's tests.

A linked thread is relayed by a real core: the core fixtures of the bus's tests (a real
nats-server, a CoreService, an outbox subscriber) serve here as they are.
"""

from __future__ import annotations

from tests.bus.conftest import core, outbox, raw_client, start_core, store

__all__ = ["core", "outbox", "raw_client", "start_core", "store"]
