"""A round trip proving the server has processed this connection's subscriptions.

nats-py's `flush()` writes its PING straight to the socket while SUB commands may
still wait in the client's pending buffer, so a returned flush does not prove a
subscription is live (seen here: requests answered "no responders", live events
missed). Writing the pending buffer first and then flushing orders the PING after
the SUBs, so its PONG proves the server registered them. Needs no publish permission.
"""

from __future__ import annotations

from nats.aio.client import Client as NatsClient

__all__ = ["subscriptions_registered"]


async def subscriptions_registered(nc: NatsClient, within: int = 5) -> None:
    """Return once the server has processed every subscription made on `nc` so far."""
    write_pending = getattr(nc, "_flush_pending", None)
    if write_pending is not None:
        await write_pending(force_flush=True)
    else:  # a client without the private hook: one round trip lets its flusher run
        await nc.flush(within)
    await nc.flush(within)
