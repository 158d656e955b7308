"""Everything ore needs on a NATS server, declared once: streams, consumers, KV buckets.

`build_layout(subjects, config)` is the single description. `ensure_streams` creates
or checks what it lists, `ore migrate` moves data into it, the connect-time check
derives the oldest server version from the features its entries use, and
docs/operating-nats.md is generated from it (a test keeps the page in step). A change
to the bus (a new stream, a KV bucket, a consumer) is one more entry here and every one
of those follows.

Each entry says which fields are `fixed` (they change what a subject or a stored
message means: subjects, transforms, retention, storage; a difference needs
`ore migrate`) and which are `tunable` (limits and timing the server can change in
place; a difference is applied at start). Fields in neither list are set at creation
only (e.g. a consumer's deliver policy) and never compared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RePublish,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from ore_core._nats.connection import (
    CORE_FEATURES,
    DIRECT_GET,
    JETSTREAM,
    MIN_SERVER_VERSION,
    PER_KEY_TTL,
    REPUBLISH,
    SUBJECT_TRANSFORM,
    Feature,
    Version,
)
from ore_core.ids import validate_thread_id
from ore_core.subjects import DEFAULT_NAMESPACE, SubjectError, Subjects

if TYPE_CHECKING:
    from ore_core.bus.server.streams import BusConfig

__all__ = [
    "HEADER_ALLOWANCE",
    "ConsumerEntry",
    "Layout",
    "StreamEntry",
    "build_layout",
    "consumer_name",
    "journal_stream",
    "kv_bucket",
    "object_bucket",
    "threads_bucket",
]

HEADER_ALLOWANCE = 4096
"""Bytes of headers a stored message may carry on top of the payload limit."""

StreamRole = Literal["work", "history"]


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One stream (or KV bucket, which is a stream `KV_<bucket>`) ore needs.

    `guarded` fields can change in place but only when asked (`ore migrate`): an
    operator may have scaled a stream's replicas on purpose, and a start with other
    settings must not quietly undo that.
    `role` says what `ore migrate` must keep: `work` streams (ingress) keep the messages
    no consumer has acknowledged yet; `history` streams keep every message.
    `resubmit(stored_subject)` is the subject a kept message is published to again (an
    ingress message is stored under its transformed subject and re-enters through the
    client subject so the new layout partitions it).
    """

    config: StreamConfig
    purpose: str
    fixed: tuple[str, ...]
    tunable: tuple[str, ...]
    features: tuple[Feature, ...] = ()
    guarded: tuple[str, ...] = ("num_replicas",)
    role: StreamRole = "history"
    resubmit: Callable[[str], str] | None = None
    kv_bucket: str | None = None

    @property
    def name(self) -> str:
        """The stream name (`KV_<bucket>` for a KV bucket)."""
        return str(self.config.name)


@dataclass(frozen=True, slots=True)
class ConsumerEntry:
    """One durable consumer ore needs on `stream`."""

    stream: str
    config: ConsumerConfig
    purpose: str
    fixed: tuple[str, ...] = ("filter_subject", "ack_policy")
    tunable: tuple[str, ...] = ("ack_wait", "backoff", "max_deliver", "max_ack_pending")
    features: tuple[Feature, ...] = ()

    @property
    def name(self) -> str:
        """The durable name."""
        return str(self.config.durable_name)


@dataclass(frozen=True, slots=True)
class Layout:
    """Every stream and consumer one ore deployment needs, and the features they use.

    `owned_consumers` matches durable names this layout manages on its streams: one that
    matches but is not listed (a partition of a larger layout) is a difference too.
    """

    streams: tuple[StreamEntry, ...]
    consumers: tuple[ConsumerEntry, ...]
    extra_features: tuple[Feature, ...] = CORE_FEATURES
    owned_consumers: re.Pattern[str] = field(default=re.compile(r"ore-core-p\d+"))

    def features(self) -> tuple[Feature, ...]:
        """Every feature the entries use, oldest first, without repeats."""
        seen: dict[str, Feature] = {}
        entries: Iterable[StreamEntry | ConsumerEntry] = (*self.streams, *self.consumers)
        for feature in (*self.extra_features, *(f for e in entries for f in e.features)):
            seen.setdefault(feature.name, feature)
        return tuple(sorted(seen.values(), key=lambda f: f.since))

    def required_version(self) -> Version:
        """The oldest server with every feature of `features()`."""
        return max((f.since for f in self.features()), default=MIN_SERVER_VERSION)

    def stream(self, name: str) -> StreamEntry:
        """The entry of stream `name` (KeyError when ore has none of that name)."""
        for entry in self.streams:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def consumers_of(self, stream: str) -> list[ConsumerEntry]:
        """The consumer entries of `stream`, in layout order."""
        return [entry for entry in self.consumers if entry.stream == stream]


def consumer_name(partition: int) -> str:
    """The durable pull consumer that owns `partition` of ORE_IN."""
    return f"ore-core-p{partition}"


def kv_bucket(
    bucket: str,
    *,
    purpose: str,
    history: int = 1,
    ttl: float = 0.0,
    max_bytes: int = -1,
    replicas: int = 1,
    per_key_ttl: bool = False,
) -> StreamEntry:
    """A KV bucket as the stream nats-py's `create_key_value` makes for it.

    Declared as a stream so the same checks, migration and documentation apply; create
    it with `js.create_key_value` or this config (they are the same thing).
    """
    config = StreamConfig(
        name=f"KV_{bucket}",
        description=purpose,
        subjects=[f"$KV.{bucket}.>"],
        allow_rollup_hdrs=True,
        deny_delete=True,
        discard=DiscardPolicy.NEW,
        max_msgs_per_subject=history,
        max_bytes=max_bytes,
        max_age=ttl,
        allow_direct=True,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        allow_msg_ttl=True if per_key_ttl else None,
    )
    return StreamEntry(
        config,
        purpose=purpose,
        fixed=("subjects", "storage", "retention", "max_msgs_per_subject"),
        tunable=("max_age", "max_bytes"),
        features=(JETSTREAM, DIRECT_GET, *((PER_KEY_TTL,) if per_key_ttl else ())),
        kv_bucket=bucket,
    )


def object_bucket(bucket: str, *, purpose: str, max_bytes: int, replicas: int) -> StreamEntry:
    """An object store bucket as the stream nats-py's `create_object_store` makes for it
    (`OBJ_<bucket>`: chunks under `$O.<bucket>.C.>`, descriptions under `.M.>`)."""
    config = StreamConfig(
        name=f"OBJ_{bucket}",
        description=purpose,
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        allow_rollup_hdrs=True,
        discard=DiscardPolicy.NEW,
        max_bytes=max_bytes,
        allow_direct=True,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
    )
    return StreamEntry(
        config,
        purpose=purpose,
        fixed=("subjects", "storage", "retention"),
        tunable=("max_bytes", "allow_direct", "discard"),
        features=(JETSTREAM, DIRECT_GET),
    )


def build_layout(subjects: Subjects, config: BusConfig) -> Layout:
    """Everything a deployment with this prefix and bus configuration needs."""
    common = ("subjects", "storage", "retention")
    limits = ("max_age", "duplicate_window")
    ingress = StreamEntry(
        StreamConfig(
            name=subjects.inbound_stream,
            description="ore ingress: client messages, partitioned by thread",
            subjects=[subjects.inbound_wildcard],
            subject_transform=subjects.inbound_transform(config.partition_count),
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            # A full stream refuses new messages instead of dropping unprocessed ones.
            discard=DiscardPolicy.NEW,
            max_age=config.ingress_max_age,
            duplicate_window=config.duplicate_window,
            max_msg_size=config.max_payload + HEADER_ALLOWANCE,
            num_replicas=config.replicas,
        ),
        purpose="client messages to the core; each partition has a durable pull consumer",
        fixed=(*common, "subject_transform"),
        tunable=(*limits, "max_msg_size", "discard"),
        features=(JETSTREAM, SUBJECT_TRANSFORM),
        role="work",
        resubmit=lambda stored: subjects.inbound(*_namespaced(subjects, stored)),
    )
    events = StreamEntry(
        StreamConfig(
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
        ),
        purpose="durable output events, one subject per thread, republished to P.out.NS.T",
        fixed=(*common, "republish"),
        tunable=(*limits, "max_bytes", "allow_direct", "discard"),
        features=(JETSTREAM, REPUBLISH, DIRECT_GET),
    )
    dlq = StreamEntry(
        StreamConfig(
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
        ),
        purpose="rejected input records, one subject per reason",
        fixed=common,
        tunable=(*limits, "max_bytes", "discard"),
        features=(JETSTREAM,),
    )
    backoff = config.backoff
    consumers = tuple(
        ConsumerEntry(
            subjects.inbound_stream,
            ConsumerConfig(
                durable_name=consumer_name(partition),
                description=f"ore core workers, partition {partition}",
                filter_subject=subjects.partitioned(partition, "*"),
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=backoff[0],
                backoff=backoff if config.max_deliver > 1 else None,
                max_deliver=config.max_deliver,
                max_ack_pending=config.max_ack_pending,
                num_replicas=config.replicas,
            ),
            purpose=f"durable pull consumer of partition {partition}",
        )
        for partition in range(config.partition_count)
    )
    cursors = kv_bucket(
        subjects.cursors_bucket,
        purpose="durable feed positions of conduits, by namespace and feed name (core only)",
        replicas=config.replicas,
    )
    # Partition ownership (ownership.py): worker registry and leases. A bucket-level TTL
    # expires what is not renewed (no per-key TTL needed); claims are revision CAS.
    workers = kv_bucket(
        config.workers_bucket,
        purpose="worker registry and partition leases (which worker pulls which partition)",
        ttl=config.lease_ttl,
        replicas=config.replicas,
    )
    # Bridging (ore_core/bridge): endpoint and thread link records, create-only and CAS.
    links = kv_bucket(
        subjects.links_bucket,
        purpose="links: which conduit endpoints reach which thread (core only)",
        replicas=config.replicas,
    )
    files = object_bucket(
        subjects.files_bucket,
        purpose="attachments' bytes, one object per sha256 (conduits read by name)",
        max_bytes=config.files_max_bytes,
        replicas=config.replicas,
    )
    store = (
        journal_stream(subjects, config.replicas),
        threads_bucket(subjects, config.replicas),
    )
    return Layout((ingress, events, dlq, cursors, workers, links, files, *store), consumers)


def journal_stream(subjects: Subjects, replicas: int) -> StreamEntry:
    """`ORE_JOURNAL` of the jetstream store: one ledger journal subject per thread.

    In the layout whatever the store, so a deployment can switch to the jetstream store
    (or run `ore chat` on it next to `ore serve`) with the streams an operator made; an
    unused empty stream costs nothing. The store creates it from this entry too.
    """
    return StreamEntry(
        StreamConfig(
            name=subjects.journal_stream,
            description="ore threads: one ledger journal subject per thread",
            subjects=[subjects.journal_wildcard],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            allow_direct=True,
            num_replicas=replicas,
        ),
        purpose="the jetstream store's ledger journals, one subject per thread (core only)",
        fixed=("subjects", "storage", "retention"),
        tunable=("allow_direct",),
        features=(JETSTREAM, DIRECT_GET),
    )


def threads_bucket(subjects: Subjects, replicas: int) -> StreamEntry:
    """KV `ORE_THREADS` of the jetstream store: thread metadata and lookups."""
    return kv_bucket(
        subjects.threads_bucket,
        purpose="the jetstream store's thread metadata and lookups (core only)",
        replicas=replicas,
    )


def _namespaced(subjects: Subjects, stored: str) -> tuple[str, str]:
    """(namespace, thread) of a stored ingress subject; a v1 subject had no namespace."""
    try:
        namespace, thread_id = subjects.thread_of(stored)
    except SubjectError:  # schema 1: `P.in.T` / `P.inp.<p>.T`, the default namespace
        return DEFAULT_NAMESPACE, validate_thread_id(stored.rsplit(".", 1)[-1])
    return namespace or DEFAULT_NAMESPACE, thread_id
