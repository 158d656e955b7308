"""Subjects, stream names and headers of the ore bus: the one place that spells them.

Every subject the core, the conduits and the tests use is built here, so a custom
prefix (several ore deployments on one NATS account) changes all of them at once and
no f-string elsewhere can drift. Layout (prefix `ore`, `NS` a conduit namespace,
`T` a thread id):

    ore.in.NS.T            conduit -> core (stream ORE_IN)
    ore.inp.<p>.NS.T       ore.in.NS.T after the partition transform (hash of T only)
    ore.ev.NS.T            durable output events (stream ORE_EVENTS)
    ore.out.NS.T           what conduits subscribe to (RePublished events + deltas)
    ore.journal.T          the ledger journal of the JetStream store (stream ORE_JOURNAL)
    ore.api.NS.<method>    control API a conduit may call for its own namespace
    ore.admin.<method>     control API for operators only
    ore.dlq.<reason>       rejected input (stream ORE_DLQ)
    _INBOX_NS.>            the private inbox of namespace NS's conduit connections

The namespace is the second token of every conduit-facing subject so that one NATS
permission (`ore.in.slack.>`, `ore.out.slack.>`, ...) says "conduit slack, its threads
only". The event kind travels in the `Ore-Kind` header, not in the subject, so each
thread has one subject per purpose and one per-subject sequence.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from nats.js.api import SubjectTransform

from ore_core.errors import OreError
from ore_core.ids import NAMESPACE_KEY as NAMESPACE_KEY
from ore_core.ids import validate_thread_id

SCHEMA_VERSION = 2
"""Version of the wire schema, sent in the `Ore-Schema` header of every ore message.

2: stored output is one `batch` message per handled event; lifecycle submitted and
streaming and notices are live only. Ingress events are unchanged, so the core also
accepts ingress marked `1`."""

HEADER_KIND = "Ore-Kind"
"""The event kind (`user_message`, `text_delta`, ...): lets subscribers filter unparsed."""
HEADER_SCHEMA = "Ore-Schema"
"""`SCHEMA_VERSION` of the payload, so a reader can refuse what it does not understand."""
HEADER_MSG_ID = "Nats-Msg-Id"
"""The event id: JetStream drops a second publish with the same id (safe retries)."""
HEADER_TRACEPARENT = "traceparent"
"""W3C trace context, as the OpenTelemetry propagators write it."""
HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
"""Optimistic concurrency on a per-thread subject: a stale writer's append is refused."""
HEADER_SEQUENCE = "Nats-Sequence"
"""Set by RePublish: the stored message's sequence (the core's copies for linked
namespaces carry it too)."""
HEADER_LAST_SEQUENCE = "Nats-Last-Sequence"
"""Set by RePublish: the previous sequence of the same subject, so a gap is visible."""
HEADER_LAST_TURN = "Ore-Last-Turn"
"""On a stored batch without turns (a `done` alone, a `properties` event): the id of the
last turn stored before it on the thread's subject, so a worker attaching the thread
can tell which saved answers are missing from the events."""

DEFAULT_PREFIX = "ore"

DEFAULT_NAMESPACE = "default"
"""The namespace of a thread that records none (created before namespaces existed)."""
INBOX_PREFIX = "_INBOX_"
"""A conduit of namespace NS uses the inbox prefix `_INBOX_NS` (see `Subjects.inbox`)."""

# Tokens are restricted to the thread-id alphabet: safe in subjects, stream names and
# file names alike, and never a wildcard or a reserved `$` subject.
_TOKENS = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_STREAM_NAME_UNSAFE = re.compile(r"[.-]")
_NAMESPACE = re.compile(r"[a-z0-9_-]{1,32}")
_PER_THREAD = re.compile(
    r"(?:journal|(?:in|ev|out|inp\.[0-9]+)\.(?P<namespace>[^.]+))\.(?P<thread>[^.]+)"
)

# 32-bit FNV-1a, the hash nats-server uses for `{{partition(N,...)}}`.
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


class SubjectError(OreError, ValueError):
    """A subject prefix, subject name or partition count is malformed."""


def _check_tokens(value: str, what: str) -> str:
    if not isinstance(value, str) or _TOKENS.fullmatch(value) is None:
        raise SubjectError(
            f"invalid {what} {value!r}: use dot-separated tokens of A-Z, a-z, 0-9, '_' and '-' "
            "(no wildcards, spaces or empty tokens)"
        )
    return value


def validate_namespace(namespace: str) -> str:
    """`namespace` if it is a valid namespace token (`[a-z0-9_-]{1,32}`), else SubjectError."""
    if not isinstance(namespace, str) or _NAMESPACE.fullmatch(namespace) is None:
        raise SubjectError(
            f"invalid namespace {str(namespace)[:40]!r}: use 1-32 characters from a-z, 0-9, "
            "'_' and '-' (a conduit's namespace defaults to its name)"
        )
    return namespace


def is_valid_namespace(namespace: str) -> bool:
    """True when `namespace` may be used as a namespace token."""
    return isinstance(namespace, str) and _NAMESPACE.fullmatch(namespace) is not None


def _check_partitions(partitions: int) -> None:
    # A power of two lets a deployment double N later and split every partition cleanly
    # in two (FNV % 2N % N == FNV % N), with no thread moving to an unrelated partition.
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise SubjectError(f"invalid partition count {partitions!r}: use a power of two >= 1")
    if partitions & (partitions - 1):
        raise SubjectError(
            f"invalid partition count {partitions}: use a power of two (1, 2, 4, 8, ...)"
        )


def partition_of(thread_id: str, partitions: int) -> int:
    """The partition nats-server's `{{partition(partitions,2)}}` puts this thread in.

    Lets a worker know which partition (and so which consumer) owns a thread without
    asking the server: FNV-1a 32-bit of the thread id, modulo `partitions`. The
    namespace is not hashed: a thread's partition does not depend on it.
    """
    _check_partitions(partitions)
    return _fnv32(validate_thread_id(thread_id)) % partitions


@functools.lru_cache(maxsize=65536)
def _fnv32(thread_id: str) -> int:
    # Cached: the egress and the fenced store ask per event and per save (a pure-Python
    # hash of 32 characters costs a few µs; a cache hit a tenth of that).
    value = _FNV32_OFFSET
    for byte in thread_id.encode():
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


@dataclass(frozen=True, slots=True)
class Subjects:
    """Builds every subject and stream name of one ore deployment from its prefix.

    The prefix is one or more dot-separated tokens (`ore`, `ore-x`, `acme.ore`). Stream
    names are the prefix upper-cased with `.` and `-` turned into `_`, plus a suffix:
    `ore` -> `ORE_IN`, `ore-x` -> `ORE_X_IN`, `acme.ore` -> `ACME_ORE_IN`. Prefixes that
    differ only in case or in `.`/`-`/`_` therefore share stream names: do not run
    such deployments on one NATS account. Immutable and safe to share between tasks.
    """

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        _check_tokens(self.prefix, "subject prefix")

    def _subject(self, kind: str, namespace: str, thread_id: str) -> str:
        return (
            f"{self.prefix}.{kind}.{validate_namespace(namespace)}.{validate_thread_id(thread_id)}"
        )

    def _namespaced_wildcard(self, kind: str, namespace: str | None) -> str:
        ns = "*" if namespace is None else validate_namespace(namespace)
        return f"{self.prefix}.{kind}.{ns}.*"

    def _stream(self, suffix: str) -> str:
        return f"{_STREAM_NAME_UNSAFE.sub('_', self.prefix).upper()}_{suffix}"

    def inbound(self, namespace: str, thread_id: str) -> str:
        """Where a conduit publishes ingress events of a thread: `ore.in.NS.T`."""
        return self._subject("in", namespace, thread_id)

    @property
    def inbound_wildcard(self) -> str:
        """Every thread's ingress subject: `ore.in.*.*` (the subjects of `inbound_stream`)."""
        return f"{self.prefix}.in.*.*"

    def partitioned(
        self, partition: int | Literal["*"], namespace: str = "*", thread_id: str = "*"
    ) -> str:
        """An ingress subject after the partition transform: `ore.inp.<p>.NS.T`.

        `"*"` for any part gives a filter: `partitioned(3)` is partition 3's consumer
        filter `ore.inp.3.*.*`, `partitioned("*", NS, T)` finds thread T in any partition.
        """
        if partition != "*" and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise SubjectError(f"invalid partition {partition!r}: use an int >= 0 or '*'")
        ns = namespace if namespace == "*" else validate_namespace(namespace)
        token = thread_id if thread_id == "*" else validate_thread_id(thread_id)
        return f"{self.prefix}.inp.{partition}.{ns}.{token}"

    def inbound_transform(self, partitions: int) -> SubjectTransform:
        """The `ORE_IN` transform `ore.in.NS.T` -> `ore.inp.<partition_of(T)>.NS.T`.

        Only the thread token (wildcard 2) is hashed, so `partition_of(T)` holds for
        every namespace.
        """
        _check_partitions(partitions)
        return SubjectTransform(
            src=self.inbound_wildcard,
            dest=(
                f"{self.prefix}.inp.{{{{partition({partitions},2)}}}}"
                ".{{wildcard(1)}}.{{wildcard(2)}}"
            ),
        )

    def events(self, namespace: str, thread_id: str) -> str:
        """Where the core appends a thread's durable output events: `ore.ev.NS.T`."""
        return self._subject("ev", namespace, thread_id)

    def events_wildcard_of(self, namespace: str | None) -> str:
        """Stored events of every thread of `namespace` (None: of all): `ore.ev.NS.*`."""
        return self._namespaced_wildcard("ev", namespace)

    @property
    def events_wildcard(self) -> str:
        """Every thread's durable events: `ore.ev.*.*` (the subjects of `events_stream`)."""
        return f"{self.prefix}.ev.*.*"

    def output(self, namespace: str, thread_id: str) -> str:
        """What conduits subscribe to for one thread: `ore.out.NS.T`."""
        return self._subject("out", namespace, thread_id)

    def output_wildcard_of(self, namespace: str | None) -> str:
        """Output of every thread of `namespace` (None: of all): `ore.out.NS.*`."""
        return self._namespaced_wildcard("out", namespace)

    @property
    def output_wildcard(self) -> str:
        """Every thread's output: `ore.out.*.*` (audit sinks)."""
        return f"{self.prefix}.out.*.*"

    def journal(self, thread_id: str) -> str:
        """The ledger journal of one thread in the JetStream store: `ore.journal.T`."""
        return f"{self.prefix}.journal.{validate_thread_id(thread_id)}"

    @property
    def journal_wildcard(self) -> str:
        """Every thread's journal: `ore.journal.*` (the subjects of `journal_stream`)."""
        return f"{self.prefix}.journal.*"

    def api(self, namespace: str, name: str) -> str:
        """A conduit's control API endpoint: `api("slack", "threads.create")` ->
        `ore.api.slack.threads.create`."""
        ns = namespace if namespace == "*" else validate_namespace(namespace)
        return f"{self.prefix}.api.{ns}.{_check_tokens(name, 'API name')}"

    def api_namespace_wildcard(self, namespace: str) -> str:
        """The whole control API of one namespace: `ore.api.NS.>` (for permissions)."""
        return f"{self.prefix}.api.{validate_namespace(namespace)}.>"

    @property
    def api_wildcard(self) -> str:
        """The control API of every namespace: `ore.api.>` (for permissions)."""
        return f"{self.prefix}.api.>"

    def admin(self, name: str) -> str:
        """An operator endpoint: `admin("threads.delete")` -> `ore.admin.threads.delete`."""
        return f"{self.prefix}.admin.{_check_tokens(name, 'API name')}"

    @property
    def admin_wildcard(self) -> str:
        """The whole operator API: `ore.admin.>` (for permissions)."""
        return f"{self.prefix}.admin.>"

    def worker(self, worker_id: str) -> str:
        """One core worker's own subjects: `ore.worker.<id>` (control API requests that
        another worker forwards to the owner of a thread; only cores may use them)."""
        return f"{self.prefix}.worker.{_check_tokens(worker_id, 'worker id')}"

    def inbox(self, namespace: str) -> str:
        """The inbox prefix of namespace NS's connections: `_INBOX_NS`.

        Replies to a conduit's requests and its JetStream publish acks arrive below it,
        and only that conduit's user may subscribe to `_INBOX_NS.>`. It does not carry
        the subject prefix: inboxes are per connection, not per deployment.
        """
        return INBOX_PREFIX + validate_namespace(namespace)

    def dlq(self, reason: str) -> str:
        """Where rejected input is recorded with its reason: `ore.dlq.<reason>`."""
        return f"{self.prefix}.dlq.{_check_tokens(reason, 'dead-letter reason')}"

    @property
    def dlq_wildcard(self) -> str:
        """Every dead-letter reason: `ore.dlq.>` (the subjects of `dlq_stream`)."""
        return f"{self.prefix}.dlq.>"

    @property
    def inbound_stream(self) -> str:
        """Name of the ingress stream: `ORE_IN`."""
        return self._stream("IN")

    @property
    def events_stream(self) -> str:
        """Name of the durable output-event stream: `ORE_EVENTS`."""
        return self._stream("EVENTS")

    @property
    def dlq_stream(self) -> str:
        """Name of the dead-letter stream: `ORE_DLQ`."""
        return self._stream("DLQ")

    @property
    def cursors_bucket(self) -> str:
        """KV bucket of durable feed positions, per namespace (core only): `ORE_CURSORS`."""
        return self._stream("CURSORS")

    @property
    def journal_stream(self) -> str:
        """Name of the ledger journal stream of the JetStream store: `ORE_JOURNAL`."""
        return self._stream("JOURNAL")

    @property
    def threads_bucket(self) -> str:
        """KV bucket of the JetStream store's thread metadata and lookups: `ORE_THREADS`."""
        return self._stream("THREADS")

    @property
    def links_bucket(self) -> str:
        """KV bucket of links between endpoints and threads (core only): `ORE_LINKS`."""
        return self._stream("LINKS")

    @property
    def files_bucket(self) -> str:
        """Object store bucket of attachments' bytes, by sha256: `ORE_FILES`."""
        return self._stream("FILES")

    def thread_of(self, subject: str) -> tuple[str | None, str]:
        """(namespace, thread id) of a per-thread subject of this prefix.

        in, inp, ev and out subjects name both; a journal subject names only the
        thread (namespace None). A received message names its thread only in its
        subject; this is the inverse of the builders above, and it refuses subjects of
        another prefix or kind.
        """
        match = _PER_THREAD.fullmatch(subject[len(self.prefix) + 1 :])
        if subject.startswith(self.prefix + ".") and match is not None:
            namespace = match.group("namespace")
            if namespace is None or is_valid_namespace(namespace):
                return namespace, validate_thread_id(match.group("thread"))
        raise SubjectError(
            f"subject {subject!r} is not a per-thread subject of prefix {self.prefix!r}"
        )

    def thread_id_of(self, subject: str) -> str:
        """The thread id in a per-thread subject of this prefix (in, inp, ev, out, journal)."""
        return self.thread_of(subject)[1]
