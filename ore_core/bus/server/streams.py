"""The JetStream streams and consumers of the bus, created or checked at start-up.

What ore needs is declared once in `layout.build_layout`; `ensure_streams` makes the
server match it: missing streams and consumers are created, differences in tunable
fields (limits, ack timing) are updated in place, and a difference in a fixed field
(subjects, partition count, retention, storage, republish: what a subject or a stored
message means) is refused with one line naming it and `ore migrate`, never silently
rewritten, because other workers, clients and stored messages rely on it.
`diff_layout` reports the same differences without changing anything (for the check
at start, `ore migrate --dry-run` and operators who pre-create streams).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig, DeliverPolicy, RePublish, StreamConfig, SubjectTransform
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from ore_core.bus.server.layout import (
    HEADER_ALLOWANCE,
    ConsumerEntry,
    Layout,
    StreamEntry,
    build_layout,
    consumer_name,
)
from ore_core.errors import BusError, OreError
from ore_core.subjects import Subjects

log = structlog.get_logger("ore.bus")

T = TypeVar("T")

__all__ = [
    "HEADER_ALLOWANCE",
    "BusConfig",
    "BusConfigError",
    "DEFAULT_PARTITIONS",
    "Difference",
    "adopt_partitions",
    "consumer_name",
    "diff_layout",
    "ensure_layout",
    "ensure_streams",
    "jetstream_call",
    "reset_consumer",
    "setup_summary",
]

_DAY = 24 * 3600.0
_PARTITION_COUNT = re.compile(r"partition\((\d+)")

DEFAULT_PARTITIONS = 8
"""Ingress partitions of a new deployment when none are configured: up to eight workers
share it. Each busy partition costs nats-server CPU per second (docs/scale-out.md), and
`ore migrate --partitions N` changes the count later."""

MIGRATE_HINT = "run `ore migrate --dry-run` to see the change and `ore migrate` to apply it"


class BusConfigError(OreError):
    """A stream or consumer on the server conflicts with this configuration."""


@dataclass(frozen=True, slots=True)
class BusConfig:
    """Sizes, ages and ack timing of the bus; every worker of a deployment must agree.

    `max_payload` bounds an ingress event's JSON; `ack_wait` is how long the server
    waits for an ack before redelivering (long turns extend it with progress acks).
    Redeliveries back off from `ack_wait` to ten times it, `max_deliver` times at most.
    A message the store could not save is handled again by the worker after
    `retry_delay`, doubling per failure up to `retry_delay_max` (held locally and kept
    unacknowledged, not NAKed: see `Ingress`), so it never uses up `max_deliver`.
    `events_duplicate_window` must outlast the core's publish retries (5 attempts of
    5 s); it is short because the server keeps an id per stored event for that long.
    `lease_ttl` is how long a partition lease in KV `workers_bucket` outlives its last
    renewal: the failover time after a worker dies is about this plus a second.
    `partitions` None (not configured) means the count of the existing ingress stream,
    or `DEFAULT_PARTITIONS` for a new one (`adopt_partitions` settles it at start), so
    a deployment made with another default keeps its count.
    """

    partitions: int | None = None
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
    retry_delay: float = 1.0
    retry_delay_max: float = 30.0
    lease_ttl: float = 4.0
    workers_bucket: str = "ORE_WORKERS"
    files_max_bytes: int = -1
    files_retention: float = 7 * _DAY
    files_sweep_every: float = 3600.0
    files_link_base: str = ""
    files_link_secret: str = ""
    files_link_ttl: float = 3 * _DAY

    def __post_init__(self) -> None:
        count = self.partitions
        if count is not None and (count < 1 or count & (count - 1)):
            raise BusConfigError(
                f"partitions must be a power of two (1, 2, 4, 8, ...), got {self.partitions}"
            )
        if self.max_payload < 1:
            raise BusConfigError(f"max_payload must be positive, got {self.max_payload}")
        if self.ack_wait <= 0 or self.max_deliver < 1 or self.max_ack_pending < 1:
            raise BusConfigError("ack_wait, max_deliver and max_ack_pending must be positive")

    @property
    def partition_count(self) -> int:
        """The ingress partitions: as configured, else `DEFAULT_PARTITIONS` (a worker
        serves the count `adopt_partitions` found on the server)."""
        return DEFAULT_PARTITIONS if self.partitions is None else self.partitions

    @property
    def backoff(self) -> list[float]:
        """Redelivery delays: ack_wait, doubling, capped at ten times ack_wait."""
        delays = [min(self.ack_wait * 2**attempt, self.ack_wait * 10) for attempt in range(5)]
        return delays[: self.max_deliver]


@dataclass(frozen=True, slots=True)
class Difference:
    """One way the server differs from the layout.

    `kind` is `stream` or `consumer`; `name` the stream (or `STREAM/consumer`); `field`
    the config field (`missing` when the whole thing is absent, `unmanaged` for a
    consumer this layout no longer has); `fixed` when only `ore migrate` may change it
    (by making the stream again), `guarded` when only `ore migrate` may change it (in
    place).
    """

    kind: str
    name: str
    field: str
    have: Any
    want: Any
    fixed: bool
    guarded: bool = False

    def describe(self) -> str:
        """`stream ORE_IN: partition count is 4, configured 8` and the like."""
        what = f"{self.kind} {self.name}"
        if self.field == "missing":
            return f"{what} does not exist"
        if self.field == "unmanaged":
            return f"{what} belongs to another layout ({self.have})"
        detail = f"{self.field} is {_describe(self.have)}, configured {_describe(self.want)}"
        if self.field == "subject_transform":
            found = _PARTITION_COUNT.search(str(getattr(self.have, "dest", "")))
            wanted = _PARTITION_COUNT.search(str(getattr(self.want, "dest", "")))
            if found and wanted and found.group(1) != wanted.group(1):
                detail = f"partition count is {found.group(1)}, configured {wanted.group(1)}"
            elif self.have is None:
                detail = "it has no partition transform (a layout of an older ore)"
        elif self.field == "subjects":
            detail += " (a layout of another ore version, or another prefix's stream)"
        return f"{what}: {detail}"


def setup_summary(applied: Sequence[Difference]) -> dict[str, list[str]]:
    """What setting up the layout did, for the log: what it `created` (a first start
    creates every stream and consumer: not an error) and what it `changed`."""
    summary: dict[str, list[str]] = {}
    created = [f"{d.kind} {d.name}" for d in applied if d.field == "missing"]
    changed = [d.describe() for d in applied if d.field != "missing"]
    if created:
        summary["created"] = created
    if changed:
        summary["changed"] = changed
    return summary


def _describe(value: Any) -> str:
    if isinstance(value, SubjectTransform | RePublish):
        return f"{value.src} -> {value.dest}"
    return repr(value.value if hasattr(value, "value") else value)


def _same(field: str, have: Any, want: Any) -> bool:
    if isinstance(want, SubjectTransform | RePublish):
        return have is not None and (have.src, have.dest) == (want.src, want.dest)
    if field == "allow_direct":
        return bool(have) == bool(want)
    if field in ("discard", "retention", "storage") and have is not None and want is not None:
        return bool(getattr(have, "value", have) == getattr(want, "value", want))
    return bool(have == want)


async def jetstream_call(action: str, call: Any) -> Any:
    """Await a JetStream API call; turn "no answer" into one line saying what to check.

    A user without permission for a `$JS.API` subject gets no answer at all (the server
    drops the request and reports a permissions violation asynchronously), so a timeout
    here almost always means missing permissions or an account without JetStream.
    """
    try:
        return await call
    except Exception as exc:
        raise _explained(action, exc) from None


def _explained(action: str, exc: Exception) -> Exception:
    """The one-line `BusError` for a failed JetStream call (NotFoundError and what is
    not a JetStream error stay as they are)."""
    if isinstance(exc, NatsTimeoutError | TimeoutError):
        return BusError(
            f"JetStream did not answer {action}: the NATS user probably lacks permission "
            "for it ($JS.API.>); grant it, or have an operator create the streams and "
            "consumers listed in docs/operating-nats.md (then ore only reads them)"
        )
    if isinstance(exc, ServiceUnavailableError | NoRespondersError):
        return BusError(
            f"JetStream is not available for {action}: enable JetStream for this NATS "
            "account (server `jetstream {}` block and the account's `jetstream: enabled`), "
            "or run without --nats to use the embedded server"
        )
    if isinstance(exc, APIError) and not isinstance(exc, NotFoundError):
        return BusError(f"JetStream refused {action}: {exc.description} (error {exc.err_code})")
    return exc


_CLUSTER_SETTLING = frozenset({10005, 10008})
"""JetStream errors of a cluster still forming or electing: no suitable peers for
placement (a peer not yet seen as online), JetStream temporarily unavailable."""
_SETTLE_TIMEOUT = 30.0  # seconds a starting cluster may take before the error stands


async def settled_call(action: str, make_call: Callable[[], Awaitable[T]]) -> T:
    """`jetstream_call(action, make_call())`, retried while the cluster is settling.

    A worker started with its NATS cluster (a restart, a deploy) can ask for a stream
    before every peer has reported in; that is a wait, not a refusal. Other errors,
    and the settling ones after `_SETTLE_TIMEOUT`, are raised as `jetstream_call` does.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _SETTLE_TIMEOUT
    delay = 0.1
    while True:
        try:
            return await make_call()
        except APIError as exc:
            if exc.err_code not in _CLUSTER_SETTLING or loop.time() > deadline:
                raise _explained(action, exc) from None
            log.info("JetStream cluster settling; retrying", action=action, error=repr(exc))
        except Exception as exc:
            raise _explained(action, exc) from None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def _stream_differences(js: JetStreamContext, entry: StreamEntry) -> list[Difference]:
    try:
        info = await jetstream_call(f"stream info {entry.name}", js.stream_info(entry.name))
    except NotFoundError:
        return [Difference("stream", entry.name, "missing", None, entry.config, fixed=False)]
    have: StreamConfig = info.config
    differences = []
    for fields, fixed in ((entry.fixed, True), (entry.tunable, False), (entry.guarded, False)):
        for name in fields:
            ours, theirs = getattr(entry.config, name), getattr(have, name)
            if not _same(name, theirs, ours):
                guarded = name in entry.guarded
                differences.append(
                    Difference("stream", entry.name, name, theirs, ours, fixed, guarded)
                )
    return differences


async def _consumer_differences(js: JetStreamContext, entry: ConsumerEntry) -> list[Difference]:
    where = f"{entry.stream}/{entry.name}"
    try:
        info = await jetstream_call(
            f"consumer info {where}", js.consumer_info(entry.stream, entry.name)
        )
    except NotFoundError:
        return [Difference("consumer", where, "missing", None, entry.config, fixed=False)]
    differences = []
    for fields, fixed in ((entry.fixed, True), (entry.tunable, False)):
        for name in fields:
            ours, theirs = getattr(entry.config, name), getattr(info.config, name)
            if not _same(name, theirs, ours):
                differences.append(Difference("consumer", where, name, theirs, ours, fixed))
    return differences


async def _unmanaged_consumers(js: JetStreamContext, layout: Layout) -> list[Difference]:
    """Consumers named like ore's on its streams that this layout does not list."""
    wanted = {(entry.stream, entry.name) for entry in layout.consumers}
    differences = []
    for stream in {entry.stream for entry in layout.consumers}:
        try:
            infos = await jetstream_call(f"consumer list of {stream}", js.consumers_info(stream))
        except NotFoundError:
            continue
        for info in infos:
            name = str(info.name)
            if layout.owned_consumers.fullmatch(name) and (stream, name) not in wanted:
                differences.append(
                    Difference(
                        "consumer",
                        f"{stream}/{name}",
                        "unmanaged",
                        f"filter {info.config.filter_subject}",
                        None,
                        fixed=True,
                    )
                )
    return differences


async def diff_layout(js: JetStreamContext, layout: Layout) -> list[Difference]:
    """Every difference between the server and `layout`; changes nothing."""
    differences: list[Difference] = []
    for stream in layout.streams:
        differences += await _stream_differences(js, stream)
    stream_missing = {d.name for d in differences if d.field == "missing"}
    for consumer in layout.consumers:
        if consumer.stream in stream_missing:
            where = f"{consumer.stream}/{consumer.name}"
            differences.append(Difference("consumer", where, "missing", None, None, False))
        else:
            differences += await _consumer_differences(js, consumer)
    return differences + await _unmanaged_consumers(js, layout)


def refusal(differences: list[Difference]) -> BusConfigError:
    """One line naming the first difference start may not apply (and how many more)."""
    fixed = [d for d in differences if d.fixed]
    if not fixed:
        guarded = [d for d in differences if d.guarded]
        more = f" (and {len(guarded) - 1} more)" if len(guarded) > 1 else ""
        return BusConfigError(
            f"NATS streams differ from this configuration: {guarded[0].describe()}{more}; "
            f"set nats.{_SETTING.get(guarded[0].field, guarded[0].field)} to keep it, or "
            f"{MIGRATE_HINT} in place"
        )
    more = f" (and {len(fixed) - 1} more difference(s))" if len(fixed) > 1 else ""
    return BusConfigError(
        f"NATS has ore streams from another layout: {fixed[0].describe()}{more}; "
        f"{MIGRATE_HINT} (it keeps every message), or use the deployment's settings"
    )


_SETTING = {"num_replicas": "replicas"}


async def ensure_layout(
    js: JetStreamContext, layout: Layout, *, change_guarded: bool = False
) -> list[Difference]:
    """Create what is missing and update tunable fields; refuse fixed differences.

    Guarded differences (replicas) are refused too unless `change_guarded` (ore
    migrate). Checks everything before changing anything, so a refused start leaves the
    server as it was. Returns the differences it applied (for a log line).
    """
    differences = await diff_layout(js, layout)
    if any(d.fixed or (d.guarded and not change_guarded) for d in differences):
        raise refusal(differences)
    changed_streams = {d.name for d in differences if d.kind == "stream"}
    for stream in layout.streams:
        if stream.name not in changed_streams:
            continue
        missing = any(d.name == stream.name and d.field == "missing" for d in differences)
        if missing:
            await settled_call(
                f"create stream {stream.name}", functools.partial(js.add_stream, stream.config)
            )
        else:
            await settled_call(
                f"update stream {stream.name}", functools.partial(js.update_stream, stream.config)
            )
    changed_consumers = {d.name for d in differences if d.kind == "consumer"}
    for consumer in layout.consumers:
        where = f"{consumer.stream}/{consumer.name}"
        if where in changed_consumers:
            missing = any(d.name == where and d.field == "missing" for d in differences)
            await settled_call(
                f"create consumer {where}", functools.partial(_put_consumer, js, consumer, missing)
            )
    return differences


_START_FIXED = 10012  # "deliver policy can not be updated"


async def _put_consumer(js: JetStreamContext, consumer: ConsumerEntry, missing: bool) -> None:
    """Create the consumer (`missing`) or update it in place, keeping its start.

    Another worker may rewind it meanwhile (`reset_consumer` deletes it and creates it
    again from a start sequence, after a crash of its owner): then the server refuses
    our config's deliver policy, and we read the start it has now and try again. A
    worker started while a partition was being taken over failed to start on that.
    """
    config = consumer.config if missing else await _keep_start(js, consumer)
    for attempt in range(3):
        try:
            await js.add_consumer(consumer.stream, config)
            return
        except APIError as exc:
            if exc.err_code != _START_FIXED or attempt == 2:
                raise
        config = await _keep_start(js, consumer)


async def _keep_start(js: JetStreamContext, consumer: ConsumerEntry) -> ConsumerConfig:
    """The consumer's config for an update in place: a consumer rewound after a crash
    (`reset_consumer`) keeps its start, which the server does not let change."""
    try:
        info = await jetstream_call(
            f"consumer info {consumer.stream}/{consumer.name}",
            js.consumer_info(consumer.stream, consumer.name),
        )
    except NotFoundError:  # deleted meanwhile (a rewind in progress): create it as ours
        return consumer.config
    if info.config.deliver_policy != DeliverPolicy.BY_START_SEQUENCE:
        return consumer.config
    return dataclasses.replace(
        consumer.config,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=info.config.opt_start_seq,
    )


async def ensure_streams(js: JetStreamContext, subjects: Subjects, config: BusConfig) -> None:
    """Create or update the streams and consumers of `build_layout(subjects, config)`
    (with the partitions `adopt_partitions` settles when none are configured).

    Idempotent: safe on every start of every worker. Raises BusConfigError when an
    existing stream or consumer differs in a way that cannot be changed in place, and
    BusError (one line) when JetStream is missing or the user may not do this.
    """
    config = await adopt_partitions(js, subjects, config)
    await ensure_layout(js, build_layout(subjects, config))


async def adopt_partitions(
    js: JetStreamContext, subjects: Subjects, config: BusConfig
) -> BusConfig:
    """`config` with its partition count settled: the configured one, else the existing
    ingress stream's, else `DEFAULT_PARTITIONS` (a new deployment, or a stream of an older
    layout without partitions, which `ore migrate` partitions).

    Why: a deployment made when the default was 32 keeps its 32 partitions on upgrade
    instead of refusing to start; a count that is configured must match the stream.
    """
    if config.partitions is not None:
        return config
    try:
        info = await jetstream_call(
            f"reading stream {subjects.inbound_stream}",
            js.stream_info(subjects.inbound_stream),
        )
    except NotFoundError:
        return replace(config, partitions=DEFAULT_PARTITIONS)
    transform = info.config.subject_transform
    found = _PARTITION_COUNT.search(str(getattr(transform, "dest", "") or ""))
    count = int(found.group(1)) if found else DEFAULT_PARTITIONS
    if count < 1 or count & (count - 1):
        count = DEFAULT_PARTITIONS  # not a layout of ore's: the comparison names it
    return replace(config, partitions=count)


async def reset_consumer(
    js: JetStreamContext,
    subjects: Subjects,
    config: BusConfig,
    partition: int,
    *,
    settle: float = 0.0,
    request_timeout: float | None = None,
    resume: dict[int, int] | None = None,
) -> int | None:
    """Make partition's consumer redeliver everything after its ack floor, at once.

    After an unclean loss of its owner (the consumer has messages delivered and not
    acknowledged) the server would hold those messages back for `ack_wait` and hand
    out newer ones of the same threads first. Deleting the durable and creating it
    again from ack floor + 1 (`by_start_sequence`; the layout never compares the
    deliver policy) puts the dead owner's in-flight messages first, in stream order,
    now. Messages after the floor that were already handled come back too; streams
    recognise them by event id. Returns the start sequence, or None when the consumer
    was clean and left alone. Only the lease holder of the partition may call this.
    `settle` seconds let acks this worker just sent be counted first (the server
    applies acks asynchronously). `request_timeout` bounds each info and create request.
    `resume` (kept by the caller across tries) remembers the start before the durable
    is deleted: a try that failed between the delete and the create is finished by the
    next one from that start, not from the beginning of the stream.
    """
    stream = subjects.inbound_stream
    name = consumer_name(partition)
    entry = next(c for c in build_layout(subjects, config).consumers if c.name == name)
    want = entry.config
    try:
        info = await js.consumer_info(stream, name, timeout=request_timeout)
    except NotFoundError:
        start = None if resume is None else resume.get(partition)
        if start is not None:
            want = replace(
                want, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
            )
        await js.add_consumer(stream, want, timeout=request_timeout)
        return start
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    while info.num_ack_pending and loop.time() < deadline:
        await asyncio.sleep(0.05)
        info = await js.consumer_info(stream, name, timeout=request_timeout)
    if not info.num_ack_pending:
        return None
    start = (info.ack_floor.stream_seq if info.ack_floor else 0) + 1
    if resume is not None:
        resume[partition] = start
    want = replace(want, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
    for attempt in range(3):
        try:
            await js.delete_consumer(stream, name)
        except NotFoundError:
            pass
        try:
            await js.add_consumer(stream, want, timeout=request_timeout)
            return start
        except BadRequestError:
            # A worker starting up re-created it (ensure_streams) in between: again.
            if attempt == 2:
                raise
    return start
