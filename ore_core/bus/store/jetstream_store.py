"""JetStreamStore: threads in NATS JetStream, the store several workers share.

Layout (prefix `ore`; `T` a thread id, `H` a hash of a metadata key and value):

- stream `ORE_JOURNAL`, subject `ore.journal.T`: the thread's ledger journal. Every
  save is ONE message holding the journal entries of that save as JSON lines (the
  format of the `journal` store's files), so replaying the subject in order rebuilds
  the thread: every branch, the tip, control and metadata.
- KV bucket `ORE_THREADS`: `t.T` = the thread's metadata (JSON; its existence lists
  the thread), `i.H.T` = an index entry per metadata pair (what `get_by` looks up)
  and `l.H` = the thread created by `get_or_create_by` for that pair.

Compare-and-set: a copy remembers the last sequence of its subject when it was read;
its save is published with `Nats-Expected-Last-Subject-Sequence` set to it (0 for a
new thread), so the server refuses the append of a copy that another worker got
ahead of (error 10071) and the store raises StaleThread: nothing written, reload.
The journal is the truth; the KV entries only find threads, and every lookup is
checked against the journal, so an index left behind by a crash never answers wrong.
Lookup-or-create is atomic across workers through `kv.create` of `l.H`.

The store has no connection of its own: `ore serve` binds it to the core's NATS
connection (`attach_nats`) before anything uses it; tests and tools may construct
it with a connection.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from ore_core import jsonutil
from ore_core.bus.cluster.kv_keys import live_keys
from ore_core.bus.server.layout import journal_stream
from ore_core.errors import ArtifactError, LedgerError, StoreError, ThreadCorrupt, ThreadNotFound
from ore_core.ids import generate_thread_id
from ore_core.ledger.clock import SystemClock
from ore_core.ledger.entries import EntryWriter, Replay, collector_paused
from ore_core.ledger.journal import JournalState
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore
from ore_core.session.stores.changes import Change, ChangeSet, ChangeTracker, replay
from ore_core.session.stores.journal_store import Snapshot
from ore_core.session.stores.thread_json import build_thread
from ore_core.subjects import HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE, Subjects

__all__ = ["JetStreamStore"]

_WRONG_LAST_SEQUENCE = 10071
_BATCH = 512
_REQUEST_TIMEOUT = 5.0
_CLAIM_WAIT = 2.0  # how long a lookup waits for a thread another worker is creating
_HEADER_ALLOWANCE = 1024  # room for the headers of a journal message


def _pair_hash(key: str, value: str) -> str:
    return hashlib.sha256(f"{key}\0{value}".encode()).hexdigest()[:32]


def _encode(entries: Sequence[Mapping[str, Any]]) -> bytes:
    return b"\n".join(jsonutil.dumps(entry) for entry in entries)


class JetStreamStore(BaseStore):
    """Threads as per-thread journals in JetStream plus a KV index (see the module doc)."""

    name = "jetstream"

    def __init__(
        self,
        nc: NatsClient | None = None,
        *,
        subjects: Subjects | None = None,
        replicas: int = 1,
        bucket: str | None = None,
    ) -> None:
        self.subjects = subjects or Subjects()
        super().__init__(f"jetstream:{self.subjects.journal_stream}")
        self._replicas = replicas
        self._bucket_override = bucket
        self._bucket = bucket or self.subjects.threads_bucket
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._pending_nc = nc
        self._ready = asyncio.Lock()
        self._tracker = ChangeTracker()
        self._clock = SystemClock()

    # -- connection ---------------------------------------------------------------------

    async def attach_nats(self, nc: NatsClient, subjects: Subjects | None = None) -> None:
        """Use `nc` (the core's connection) and create the stream and bucket if missing."""
        if subjects is not None:
            self.subjects = subjects
            self.location = f"jetstream:{subjects.journal_stream}"
            self._bucket = self._bucket_override or subjects.threads_bucket
        self._nc = nc
        js = nc.jetstream()
        try:
            try:  # ensure_streams made it from the layout, unless the store runs alone
                await js.stream_info(self.subjects.journal_stream)
            except NotFoundError:
                await js.add_stream(journal_stream(self.subjects, self._replicas).config)
            try:
                self._kv = await js.key_value(self._bucket)
            except BucketNotFoundError:
                self._kv = await js.create_key_value(
                    KeyValueConfig(
                        bucket=self._bucket,
                        description="ore thread metadata and lookups",
                        storage=StorageType.FILE,
                        replicas=self._replicas,
                    )
                )
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        self._js = js

    async def _connected(self) -> tuple[JetStreamContext, KeyValue]:
        self._check_open()
        if self._js is None or self._kv is None:
            async with self._ready:
                if self._js is None and self._pending_nc is not None:
                    await self.attach_nats(self._pending_nc)
            if self._js is None or self._kv is None:
                raise StoreError(
                    f"{self.location} has no NATS connection: the jetstream store runs "
                    "inside `ore serve`, which binds it to the core's connection"
                )
        return self._js, self._kv

    # -- Store --------------------------------------------------------------------------

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Register the thread in KV (atomic: ThreadExists when taken), then its journal."""
        thread_id = self._checked_id(generate_thread_id() if thread_id is None else thread_id)
        metadata = dict(metadata or {})
        _, kv = await self._connected()
        try:
            await kv.create(f"t.{thread_id}", jsonutil.dumps(metadata))
        except KeyWrongLastSequenceError:
            raise self._exists(thread_id) from None
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        snapshot = Snapshot([], "", metadata)
        try:
            sequence = await self._append(thread_id, snapshot.changes_since(None), 0)
        except BaseException:
            await self._quietly(kv.delete(f"t.{thread_id}"))
            raise
        await self._index(thread_id, {}, metadata)
        return self._hand_out(thread_id, JournalState(meta=metadata), sequence)

    async def get(self, thread_id: str) -> Thread:
        """Replay the thread's journal subject (ThreadNotFound when it has none)."""
        thread_id = self._checked_id(thread_id)
        state, sequence = await self._read(thread_id)
        return self._hand_out(thread_id, state, sequence)

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread whose metadata has `key` == `value` (an index lookup)."""
        prefix = f"i.{_pair_hash(key, value)}."
        for thread_id in sorted(k[len(prefix) :] for k in await self._keys(prefix + "*")):
            try:
                thread = await self.get(thread_id)
            except ThreadNotFound:
                continue
            if thread.meta().get(key) == value:  # the journal decides, not the index
                return thread
        raise self._no_match(key, value)

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """Find, or create with a `kv.create` claim: one thread even across workers."""
        _, kv = await self._connected()
        claim = f"l.{_pair_hash(key, value)}"
        deadline = asyncio.get_running_loop().time() + _CLAIM_WAIT
        while True:
            try:
                return await self.get_by(key, value), False
            except ThreadNotFound:
                pass
            thread_id = generate_thread_id()
            try:
                await kv.create(claim, thread_id.encode())
            except KeyWrongLastSequenceError:
                entry = await self._kv_get(kv, claim)
                if entry is None:
                    continue  # the claim was just released: try again
                if asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.02)  # its creator is still writing it
                    continue
                # The claimed thread never appeared (its creator died): release the claim.
                await self._quietly(kv.delete(claim, last=entry.revision))
                deadline = asyncio.get_running_loop().time() + _CLAIM_WAIT
                continue
            except (NatsError, APIError) as exc:
                raise self._failed(exc) from exc
            return await self.create(thread_id, {**(metadata or {}), key: value}), True

    async def save(self, thread: Thread) -> None:
        """Append the changes as one journal message, fenced on the version read.

        StaleThread (nothing written) when another writer appended since this copy was
        read; a Thread read elsewhere, or whose journal was deleted, is written whole.
        """
        thread_id = self._checked_id(thread.id)
        await self._connected()
        with self._tracker.pending(thread) as changes:
            if changes == []:
                return
            expected = self._tracker.version(thread)
            if changes is not None and isinstance(expected, int):
                try:
                    sequence = await self._append(thread_id, changes, expected)
                except _Gone:
                    pass  # deleted meanwhile: the changes alone would be a fragment
                else:
                    self._tracker.saved(thread, sequence)
                    await self._reindex(thread_id, ChangeSet.of(changes).meta)
                    return
            sequence = await self._write_whole(thread)
            self._tracker.saved(thread, sequence)

    async def delete(self, thread_id: str) -> bool:
        """Purge the journal subject and the KV entries; True when the thread existed."""
        thread_id = self._checked_id(thread_id)
        js, kv = await self._connected()
        entry = await self._kv_get(kv, f"t.{thread_id}")
        try:
            info = await js.stream_info(
                self.subjects.journal_stream, subjects_filter=self.subjects.journal(thread_id)
            )
            had_journal = bool(info.state.subjects)
            if had_journal:
                await js.purge_stream(
                    self.subjects.journal_stream, subject=self.subjects.journal(thread_id)
                )
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        if entry is not None:
            metadata = _metadata_of(entry.value)
            await self._index(thread_id, metadata, {})
            for key, value in metadata.items():
                claim = await self._kv_get(kv, f"l.{_pair_hash(key, value)}")
                if claim is not None and bytes(claim.value or b"").decode() == thread_id:
                    await self._quietly(kv.delete(claim.key, last=claim.revision))
            await self._quietly(kv.delete(f"t.{thread_id}"))
        return entry is not None or had_journal

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """Thread ids (from KV `t.*`) in ascending order after `after`."""
        ids = sorted(k[2:] for k in await self._keys("t.*") if k[2:] > after)
        return ids if limit is None else ids[: max(limit, 0)]

    async def check(self) -> None:
        """StoreError unless the journal stream answers (the health probe)."""
        js, _ = await self._connected()
        try:
            await js.stream_info(self.subjects.journal_stream)
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc

    async def close(self) -> None:
        """Forget the connection (it belongs to the core). Idempotent."""
        await super().close()
        self._js = self._kv = None

    async def _thread_ids(self) -> builtins.list[str]:
        return await self.list_ids()

    # -- journal ----------------------------------------------------------------------------

    def _hand_out(self, thread_id: str, state: JournalState, sequence: int) -> Thread:
        thread = build_thread(thread_id, state.turns.values(), state.tip, state.meta)
        return self._tracker.track(thread, sequence)

    def _entries(self, changes: Sequence[Change]) -> builtins.list[dict[str, Any]]:
        entries: builtins.list[dict[str, Any]] = []
        replay(changes, EntryWriter(entries.extend, self._clock, encoded_turns=True))
        return entries

    async def _append(self, thread_id: str, changes: Sequence[Change], expected: int) -> int:
        """Publish one journal message if the subject's last sequence is `expected`."""
        js, _ = await self._connected()
        data = _encode(self._entries(changes))
        limit = self._nc.max_payload if self._nc is not None else 0
        if limit and len(data) > limit - _HEADER_ALLOWANCE:
            # Retrying cannot help: fail the turn (an error to the sender), not the store.
            raise ArtifactError(
                f"thread {thread_id}: a save of {len(data)} bytes does not fit in one NATS "
                f"message (max_payload {limit}); the jetstream store cannot keep turns this "
                "large: raise the server's max_payload or keep large content elsewhere"
            )
        try:
            ack = await js.publish(
                self.subjects.journal(thread_id),
                data,
                timeout=_REQUEST_TIMEOUT,
                headers={HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected)},
            )
        except APIError as exc:
            if exc.err_code == _WRONG_LAST_SEQUENCE:
                if expected and await self._last_sequence(thread_id) == 0:
                    raise _Gone from None
                raise self._stale(thread_id) from None
            raise self._failed(exc) from exc
        except (NatsError, NatsTimeout) as exc:
            raise self._failed(exc) from exc
        return int(ack.seq)

    async def _write_whole(self, thread: Thread) -> int:
        """Write a Thread from elsewhere: its difference to what is stored, fenced."""
        thread_id = thread.id
        snapshot = Snapshot.of(thread)
        try:
            state, sequence = await self._read(thread_id)
        except ThreadNotFound:
            state, sequence = None, 0
        before = {} if state is None else dict(state.meta)
        changes = snapshot.changes_since(state)
        if changes:
            sequence = await self._append(thread_id, changes, sequence)
        _, kv = await self._connected()
        try:
            await kv.put(f"t.{thread_id}", jsonutil.dumps(snapshot.metadata))
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        await self._index(thread_id, before, snapshot.metadata)
        return sequence

    async def _read(self, thread_id: str) -> tuple[JournalState, int]:
        """Replay the journal subject: (state, last sequence). ThreadNotFound if empty."""
        await self._connected()
        nc = self._nc
        assert nc is not None
        subject = self.subjects.journal(thread_id)
        api = f"$JS.API.DIRECT.GET.{self.subjects.journal_stream}"
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        run = Replay()
        last = 0
        try:
            start = 1
            while True:
                request = {"batch": _BATCH, "next_by_subj": subject, "seq": start}
                await nc.publish(api, jsonutil.dumps(request), reply=inbox)
                pending = 0
                while True:
                    msg = await sub.next_msg(timeout=_REQUEST_TIMEOUT)
                    headers = msg.headers or {}
                    status = headers.get("Status")
                    if status == "404":
                        break
                    if status is not None:  # 204: end of this batch
                        pending = int(headers.get("Nats-Num-Pending") or 0)
                        break
                    last = int(headers["Nats-Sequence"])
                    self._feed(run, thread_id, last, msg.data)
                if not pending:
                    break
                start = last + 1
        except (NatsError, NatsTimeout) as exc:
            raise self._failed(exc) from exc
        finally:
            await self._quietly(sub.unsubscribe())
        if last == 0:
            raise self._not_found(thread_id)
        state = run.finish()
        if state.problem is not None:
            raise self._corrupt(thread_id, state.problem)
        return state, last

    def _feed(self, run: Replay, thread_id: str, sequence: int, data: bytes) -> None:
        with collector_paused():
            for number, line in enumerate(data.split(b"\n"), 1):
                try:
                    run.feed(jsonutil.loads(line))
                except (LedgerError, ValueError) as exc:
                    raise self._corrupt(
                        thread_id, f"message {sequence}, entry {number}: {exc}"
                    ) from exc

    def _corrupt(self, thread_id: str, problem: str) -> ThreadCorrupt:
        return ThreadCorrupt(
            f"thread {thread_id} in {self.location} is unreadable: {problem} "
            f"(purge subject {self.subjects.journal(thread_id)} to delete it)"
        )

    async def _last_sequence(self, thread_id: str) -> int:
        js, _ = await self._connected()
        try:
            msg = await js.get_last_msg(
                self.subjects.journal_stream, self.subjects.journal(thread_id), direct=True
            )
        except NotFoundError:
            return 0
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        return int(msg.seq or 0)

    # -- KV index ---------------------------------------------------------------------------

    async def _reindex(self, thread_id: str, changed: Mapping[str, str | None]) -> None:
        """After a save that changed metadata: update `t.T` and the index entries."""
        if not changed:
            return
        _, kv = await self._connected()
        entry = await self._kv_get(kv, f"t.{thread_id}")
        before = {} if entry is None else _metadata_of(entry.value)
        after = dict(before)
        for key, value in changed.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        try:
            await kv.put(f"t.{thread_id}", jsonutil.dumps(after))
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc
        await self._index(thread_id, before, after)

    async def _index(
        self, thread_id: str, before: Mapping[str, str], after: Mapping[str, str]
    ) -> None:
        _, kv = await self._connected()
        try:
            for key, value in before.items():
                if after.get(key) != value:
                    await self._quietly(kv.delete(f"i.{_pair_hash(key, value)}.{thread_id}"))
            for key, value in after.items():
                if before.get(key) != value:
                    await kv.put(f"i.{_pair_hash(key, value)}.{thread_id}", b"")
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc

    async def _keys(self, pattern: str) -> builtins.list[str]:
        """Live keys matching `pattern` (a subject filter on the server, not a scan)."""
        await self._connected()
        assert self._nc is not None
        try:
            return await live_keys(self._nc, self._bucket, pattern, _REQUEST_TIMEOUT)
        except (NatsError, APIError, TimeoutError) as exc:
            raise self._failed(exc) from exc

    async def _kv_get(self, kv: KeyValue, key: str) -> KeyValue.Entry | None:
        try:
            return await kv.get(key)
        except KeyNotFoundError:
            return None
        except (NatsError, APIError) as exc:
            raise self._failed(exc) from exc

    @staticmethod
    async def _quietly(call: Any) -> None:
        """Await a best-effort clean-up; its failure leaves only a harmless leftover."""
        try:
            await call
        except (NatsError, APIError, KeyNotFoundError):
            pass


class _Gone(Exception):
    """Internal: the journal of a thread being saved was deleted meanwhile."""


def _metadata_of(value: bytes | None) -> dict[str, str]:
    try:
        data = jsonutil.loads(value or b"{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
