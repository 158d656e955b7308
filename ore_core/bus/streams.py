"""The JetStream streams and consumers of the bus, created or checked at start-up.

`ensure_streams` makes the server match protocol.md: `ORE_IN` (ingress, partitioned
by a subject transform), `ORE_EVENTS` (stored output events, republished to
`P.out.NS.T`), `ORE_DLQ` (rejected input) and one durable pull consumer per partition.
Limits (ages, sizes, ack timing) are updated in place when the configuration changes;
anything that would change what a subject means (subjects, partition count,
republish, storage) is refused with `BusConfigError`, never silently rewritten, because
other workers and clients rely on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    RePublish,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError

from ore_core.errors import OreError
from ore_core.subjects import Subjects

__all__ = [
    "HEADER_ALLOWANCE",
    "BusConfig",
    "BusConfigError",
    "consumer_name",
    "ensure_cursors",
    "ensure_streams",
]

HEADER_ALLOWANCE = 4096
"""Bytes of headers a stored message may carry on top of the payload limit."""

_DAY = 24 * 3600.0
_PARTITION_COUNT = re.compile(r"partition\((\d+)")


class BusConfigError(OreError):
    """A stream or consumer on the server conflicts with this configuration."""


@dataclass(frozen=True, slots=True)
class BusConfig:
    """Sizes, ages and ack timing of the bus; every worker of a deployment must agree.

    `max_payload` bounds an ingress event's JSON; `ack_wait` is how long the server
    waits for an ack before redelivering (long turns extend it with progress acks).
    Redeliveries back off from `ack_wait` to ten times it, `max_deliver` times at most.
    `events_duplicate_window` must outlast the core's publish retries (5 attempts of
    5 s); it is short because the server keeps an id per stored event for that long.
    """

    partitions: int = 8
    max_payload: int = 1024 * 1024
    ingress_max_age: float = 7 * _DAY
    duplicate_window: float = 120.0
    events_max_age: float = 7 * _DAY
    events_max_bytes: int = 1024**3
    events_duplicate_window: float = 30.0
    dlq_max_age: float = 30 * _DAY
    dlq_max_bytes: int = 256 * 1024**2
    ack_wait: float = 30.0
    max_ack_pending: int = 1000
    max_deliver: int = 10
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.partitions & (self.partitions - 1):
            raise BusConfigError(
                f"partitions must be a power of two (1, 2, 4, 8, ...), got {self.partitions}"
            )
        if self.max_payload < 1:
            raise BusConfigError(f"max_payload must be positive, got {self.max_payload}")
        if self.ack_wait <= 0 or self.max_deliver < 1 or self.max_ack_pending < 1:
            raise BusConfigError("ack_wait, max_deliver and max_ack_pending must be positive")

    @property
    def backoff(self) -> list[float]:
        """Redelivery delays: ack_wait, doubling, capped at ten times ack_wait."""
        delays = [min(self.ack_wait * 2**attempt, self.ack_wait * 10) for attempt in range(5)]
        return delays[: self.max_deliver]


def consumer_name(partition: int) -> str:
    """The durable pull consumer that owns `partition` of ORE_IN."""
    return f"ore-core-p{partition}"


@dataclass(frozen=True, slots=True)
class _Spec:
    """A desired stream and which of its fields may never change under a running system."""

    config: StreamConfig
    fixed: tuple[str, ...]
    tunable: tuple[str, ...]


def _specs(subjects: Subjects, config: BusConfig) -> list[_Spec]:
    common = ("subjects", "storage", "retention")
    ingress = StreamConfig(
        name=subjects.inbound_stream,
        description="ore ingress: client messages, partitioned by thread",
        subjects=[subjects.inbound_wildcard],
        subject_transform=subjects.inbound_transform(config.partitions),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=config.ingress_max_age,
        duplicate_window=config.duplicate_window,
        max_msg_size=config.max_payload + HEADER_ALLOWANCE,
        num_replicas=config.replicas,
    )
    events = StreamConfig(
        name=subjects.events_stream,
        description="ore output events per thread, republished live",
        subjects=[subjects.events_wildcard],
        republish=RePublish(
            src=subjects.events_wildcard,
            dest=f"{subjects.prefix}.out.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}",
        ),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=config.events_max_age,
        max_bytes=config.events_max_bytes,
        duplicate_window=config.events_duplicate_window,
        allow_direct=True,
        num_replicas=config.replicas,
    )
    dlq = StreamConfig(
        name=subjects.dlq_stream,
        description="ore rejected input, by reason",
        subjects=[subjects.dlq_wildcard],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=config.dlq_max_age,
        max_bytes=config.dlq_max_bytes,
        duplicate_window=config.duplicate_window,
        num_replicas=config.replicas,
    )
    limits = ("max_age", "duplicate_window", "num_replicas")
    return [
        _Spec(ingress, (*common, "subject_transform"), (*limits, "max_msg_size")),
        _Spec(events, (*common, "republish"), (*limits, "max_bytes", "allow_direct", "discard")),
        _Spec(dlq, common, (*limits, "max_bytes", "discard")),
    ]


def _describe(value: Any) -> str:
    if isinstance(value, SubjectTransform | RePublish):
        return f"{value.src} -> {value.dest}"
    return repr(value.value if hasattr(value, "value") else value)


def _conflict(stream: str, field: str, have: Any, want: Any) -> BusConfigError:
    detail = f"{field} is {_describe(have)}, configured {_describe(want)}"
    if field == "subject_transform" and have is not None:
        found = _PARTITION_COUNT.search(str(have.dest))
        wanted = _PARTITION_COUNT.search(str(want.dest))
        if found and wanted and found.group(1) != wanted.group(1):
            detail = f"partition count is {found.group(1)}, configured {wanted.group(1)}"
    return BusConfigError(
        f"stream {stream} on the server conflicts with this configuration: {detail}. "
        "Use the deployment's settings, or move the data and delete the stream to change it"
    )


def _same(field: str, have: Any, want: Any) -> bool:
    if isinstance(want, SubjectTransform | RePublish):
        return have is not None and (have.src, have.dest) == (want.src, want.dest)
    if field == "allow_direct":
        return bool(have) == bool(want)
    return bool(have == want)


async def _ensure_stream(js: JetStreamContext, spec: _Spec) -> None:
    name = str(spec.config.name)
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(spec.config)
        return
    have = info.config
    for field in spec.fixed:
        if not _same(field, getattr(have, field), getattr(spec.config, field)):
            raise _conflict(name, field, getattr(have, field), getattr(spec.config, field))
    if any(
        not _same(field, getattr(have, field), getattr(spec.config, field))
        for field in spec.tunable
    ):
        await js.update_stream(spec.config)


def _consumer(subjects: Subjects, config: BusConfig, partition: int) -> ConsumerConfig:
    backoff = config.backoff
    return ConsumerConfig(
        durable_name=consumer_name(partition),
        description=f"ore core workers, partition {partition}",
        filter_subject=subjects.partitioned(partition),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=backoff[0],
        backoff=backoff if config.max_deliver > 1 else None,
        max_deliver=config.max_deliver,
        max_ack_pending=config.max_ack_pending,
        num_replicas=config.replicas,
    )


async def _ensure_consumer(js: JetStreamContext, stream: str, want: ConsumerConfig) -> None:
    name = str(want.durable_name)
    try:
        info = await js.consumer_info(stream, name)
    except NotFoundError:
        await js.add_consumer(stream, want)
        return
    have = info.config
    for field in ("filter_subject", "ack_policy", "deliver_policy"):
        if getattr(have, field) != getattr(want, field):
            raise BusConfigError(
                f"consumer {name} of stream {stream} conflicts with this configuration: "
                f"{field} is {_describe(getattr(have, field))}, configured "
                f"{_describe(getattr(want, field))}. Delete the consumer to recreate it"
            )
    tunable = ("ack_wait", "backoff", "max_deliver", "max_ack_pending")
    if any(getattr(have, field) != getattr(want, field) for field in tunable):
        await js.add_consumer(stream, want)


async def ensure_streams(js: JetStreamContext, subjects: Subjects, config: BusConfig) -> None:
    """Create or update ORE_IN, ORE_EVENTS, ORE_DLQ and the partition consumers.

    Idempotent: safe on every start of every worker. Raises BusConfigError when an
    existing stream or consumer differs in a way that cannot be changed in place.
    """
    for spec in _specs(subjects, config):
        await _ensure_stream(js, spec)
    for partition in range(config.partitions):
        await _ensure_consumer(js, subjects.inbound_stream, _consumer(subjects, config, partition))
    await ensure_cursors(js, subjects, config)


async def ensure_cursors(js: JetStreamContext, subjects: Subjects, config: BusConfig) -> None:
    """The KV bucket where the core keeps durable feed positions (`ORE_CURSORS`)."""
    try:
        await js.key_value(subjects.cursors_bucket)
    except (NotFoundError, BucketNotFoundError):
        await js.create_key_value(
            KeyValueConfig(
                bucket=subjects.cursors_bucket,
                description="ore durable feed positions, by namespace and name",
                history=1,
                storage=StorageType.FILE,
                replicas=config.replicas,
            )
        )
