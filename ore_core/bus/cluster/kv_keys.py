"""The live keys of a KV bucket that match a pattern, exactly, at one moment.

Why not `kv.watch(...)` / `kv.keys()` of nats-py: their end of the initial values is a
`None` that nats-py puts when a `consumer_info` asked for after subscribing says
`num_pending == 0` and the subscription has received nothing yet (nats/js/kv.py
`watch`). The server counts a message as delivered before it reaches the client, and
its API reply can overtake the message, so on a loaded machine the `None` comes first
and the listing is short. Each watch also leaves its ephemeral consumer on the server
for five minutes (`inactive_threshold`), enough for a busy store to hit the server's
consumer limit.

Here: an ephemeral pull consumer on the bucket's stream, filtered to the pattern,
last message per subject, headers only. Its create reply's `num_pending` is counted
by the server when the consumer is made and nothing is delivered before the first
pull, so it is exactly how many messages the listing reads; then the consumer is
deleted. A key whose last message is a delete or purge marker is not live.
"""

from __future__ import annotations

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from ore_core import jsonutil

__all__ = ["live_keys"]

_BATCH = 512
_OPERATION = "KV-Operation"
_REMOVED = ("DEL", "PURGE")
_ENDED = ("404", "408")  # no (more) messages for a no-wait pull
_MARKER_REASON = "Nats-Marker-Reason"  # 2.11+: a server-placed TTL or removal marker
_ABANDONED_AFTER = 60.0  # the server deletes a consumer a crashed listing left behind


async def live_keys(nc: NatsClient, bucket: str, pattern: str, request_timeout: float) -> list[str]:
    """The keys of `bucket` matching `pattern` whose last entry is a value.

    `request_timeout` bounds each request. Raises nats-py's errors (`nats.errors.Error`, its
    TimeoutError, `nats.js.errors.APIError`): the caller says what they mean to it.
    """
    js = nc.jetstream()
    stream = f"KV_{bucket}"
    prefix = f"$KV.{bucket}."
    info = await js.add_consumer(
        stream,
        ConsumerConfig(
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            filter_subject=prefix + pattern,
            headers_only=True,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=_ABANDONED_AFTER,
        ),
        timeout=request_timeout,
    )
    keys: list[str] = []
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        remaining = info.num_pending or 0
        api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{info.name}"
        while remaining:
            batch = min(remaining, _BATCH)
            await nc.publish(api, jsonutil.dumps({"batch": batch, "no_wait": True}), reply=inbox)
            for _ in range(batch):
                msg = await sub.next_msg(timeout=request_timeout)
                headers = msg.headers or {}
                status = headers.get("Status")
                if status in _ENDED:  # an entry vanished since the count: none follow
                    return keys
                if status is not None:
                    raise NatsError(
                        f"listing {prefix}{pattern}: the server answered the pull with "
                        f"{status} {headers.get('Description', '')}".rstrip()
                    )
                remaining -= 1
                if headers.get(_OPERATION) in _REMOVED or _MARKER_REASON in headers:
                    continue
                keys.append(msg.subject[len(prefix) :])
        return keys
    finally:
        await sub.unsubscribe()
        try:
            await js.delete_consumer(stream, info.name)
        except (NatsError, APIError):
            pass  # the server deletes it after _ABANDONED_AFTER idle seconds anyway
