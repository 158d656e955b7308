"""Ownership: which `ore serve` worker handles which ingress partition, via KV leases.

Every thread hashes to one partition and every partition has one owner at a time, so
every thread has exactly one owner, across any number of workers on one NATS.

KV bucket `ORE_WORKERS` (history 1, bucket TTL `lease_ttl`):
- `worker.<id>`: each worker's registration, re-put every `lease_ttl / 4`; a worker
  whose key expired is gone.
- `lease.<p>`: the owner of partition p. Claimed with `kv.create` (fails if the key is
  alive), renewed with `kv.update(last=revision)` (fails if anyone else wrote it), and
  deleted on a graceful release. A holder that dies stops renewing; the bucket TTL
  removes the key and another worker claims it.

Each worker claims free leases up to its fair share ceil(P / N) (N = live workers)
and releases what it holds beyond that, after draining, when workers join. A lease
counts as held only until `lease_ttl * 3/4` after the last renewal that succeeded
(`owns`): a worker that was paused or cut off stops writing before anybody else can
claim its lease. One that finds a lease lost (a renewal refused or overdue) drops the
partition at once, without saving (`on_lost`). A lease that only lapsed (NATS
unreachable, the worker paused) and that this worker claims again before the watcher
saw anybody else hold it is *claimed back* (`claimed_back`): no other worker handled
the partition meanwhile, so that is not a takeover from a lost worker.

A key's state is learnt from a KV watcher (one push stream, no polling per key); a key
not renewed for `lease_ttl` by its watcher's clock is presumed expired and worth a
`kv.create`, which the server decides. The watcher is only a hint; the CAS is the law.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from ore_core.bus.cluster.kv_keys import live_keys
from ore_core.bus.server.streams import BusConfig
from ore_core.subjects import partition_of
from ore_core.tasks import TaskScope

__all__ = ["Ownership", "default_worker_id", "ensure_workers_bucket"]

log = structlog.get_logger("ore.bus")

PartitionCallback = Callable[[int], Awaitable[None]]

_WORKER = "worker."
_LEASE = "lease."
_KEY_CHARS = re.compile(r"[^-_=a-zA-Z0-9]")
_KV_TIMEOUT = 2.0
_THREAD_CACHE = 65536  # threads whose partition is remembered; cleared when exceeded


def default_worker_id() -> str:
    """`<host>-<pid>-<random>`: unique per process, readable in `nats kv ls`."""
    host = _KEY_CHARS.sub("_", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


async def ensure_workers_bucket(nc: NatsClient, config: BusConfig) -> KeyValue:
    """The `ORE_WORKERS` bucket, created when missing (idempotent on every start)."""
    js = nc.jetstream(timeout=_KV_TIMEOUT)
    try:
        return await js.key_value(config.workers_bucket)
    except (BucketNotFoundError, NotFoundError):
        pass
    return await js.create_key_value(
        KeyValueConfig(
            bucket=config.workers_bucket,
            description="ore workers and partition leases",
            history=1,
            ttl=config.lease_ttl,
            storage=StorageType.FILE,
            replicas=config.replicas,
        )
    )


@dataclass(slots=True)
class _Lease:
    """A lease this worker holds."""

    revision: int
    renewed: float  # loop time the last successful renewal was sent
    releasing: bool = False


class Ownership:
    """Claims, renews and releases partition leases for one worker (see the module doc).

    `on_acquire(p)` runs after a lease is won and before it counts as usable (it resets
    and starts pulling the partition); `on_release(p)` drains a partition handed over
    gracefully (the lease is renewed meanwhile and deleted after); `on_lost(p)` drops a
    partition whose lease is gone. `start()` claims a first share and starts the loops
    (in `tasks`); `close()` stops them and releases everything.
    """

    def __init__(
        self,
        nc: NatsClient,
        config: BusConfig,
        *,
        on_acquire: PartitionCallback,
        on_release: PartitionCallback,
        on_lost: PartitionCallback,
        worker_id: str | None = None,
    ) -> None:
        self.worker_id = worker_id or default_worker_id()
        self._nc = nc
        self._config = config
        self._partitions = config.partition_count
        self._ttl = config.lease_ttl
        self._interval = config.lease_ttl / 4
        self._valid_for = config.lease_ttl * 3 / 4
        self._on_acquire = on_acquire
        self._on_release = on_release
        self._on_lost = on_lost
        self._kv: KeyValue | None = None
        self._leases: dict[int, _Lease] = {}
        self._dropping: set[int] = set()  # lost, threads not yet dropped: write nothing
        self._lapsed: set[int] = set()  # lapsed here, nobody else seen holding them since
        self._claiming_back: set[int] = set()  # in on_acquire, lapsed here before
        self._workers: dict[str, float] = {}  # worker id -> loop time last seen
        self._holders: dict[int, tuple[str, float]] = {}  # partition -> (worker, seen)
        self._wakeup = asyncio.Event()
        self._taking = True
        self.tasks = TaskScope("ownership")
        """The watch, renewal and balancing loops and the handovers (the core adopts it)."""
        self._worker_key = _WORKER + self.worker_id
        self._watcher: KeyValue.KeyWatcher | None = None
        # The loop's `time`, looked up once (each lookup is a syscall); asked per save.
        self._clock: Callable[[], float] | None = None
        self._thread_partitions: dict[str, int] = {}  # asked per save and per stored batch

    # -- state --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the loops run (started, not stopped, none crashed)."""
        return bool(self.tasks) and not self.tasks.closed and self.tasks.crash is None

    def held(self) -> list[int]:
        """The partitions this worker holds a lease for (usable or being handed over)."""
        return sorted(self._leases)

    def owns(self, partition: int) -> bool:
        """True while this worker's lease on `partition` is certainly still its own.

        False once `lease_ttl * 3/4` passed since the last renewal that succeeded: by
        then nobody else could have claimed it yet, and from then on this worker must
        not write for the partition's threads.
        """
        lease = self._leases.get(partition)
        if lease is None or lease.releasing:
            return False
        return (self._clock or self._bind_clock())() - lease.renewed < self._valid_for

    def owns_thread(self, thread_id: str) -> bool:
        """`owns` of the thread's partition: the control API attaches such a thread to
        apply a change live, so the change is announced to every conduit."""
        return self.owns(partition_of(thread_id, self._partitions))

    def holds(self, partition: int) -> bool:
        """True while this worker holds a lease on `partition` it is not handing over,
        usable or overdue (an overdue one is renewed again, or lost: `on_lost`)."""
        lease = self._leases.get(partition)
        return lease is not None and not lease.releasing

    def may_write(self, partition: int) -> bool:
        """False only for a partition this worker holds with an overdue lease (a zombie).

        Partitions it never held are for the control API (and the store's CAS) to decide.
        """
        lease = self._leases.get(partition)
        if lease is None:
            return partition not in self._dropping
        return (self._clock or self._bind_clock())() - lease.renewed < self._valid_for

    def may_write_thread(self, thread_id: str) -> bool:
        """`may_write` of the thread's partition (the fenced store and the egress ask
        per save and per stored batch: the partition is remembered per thread)."""
        partitions = self._thread_partitions
        partition = partitions.get(thread_id)
        if partition is None:
            if len(partitions) >= _THREAD_CACHE:
                partitions.clear()
            partition = partitions[thread_id] = partition_of(thread_id, self._partitions)
        return self.may_write(partition)

    def claimed_back(self, partition: int) -> bool:
        """True while `on_acquire(partition)` runs for a lease that lapsed at this worker
        (a NATS outage, a pause) and that no other worker was seen holding since."""
        return partition in self._claiming_back

    def other_holder(self, thread_id: str) -> str | None:
        """The id of another worker holding the lease of the thread's partition, as the
        watcher last saw it (None: this worker holds it, or nobody is known to: free,
        expired, or seen only by the exact listing). The control API forwards requests
        about the thread there."""
        partition = partition_of(thread_id, self._partitions)
        if partition in self._leases:
            return None
        holder, seen = self._holders.get(partition, ("", 0.0))
        if not holder or holder == self.worker_id:
            return None
        if (self._clock or self._bind_clock())() - seen >= self._ttl:
            return None
        return holder

    def _bind_clock(self) -> Callable[[], float]:
        """The running loop's clock, kept: `may_write` calls it without a frame of its own."""
        self._clock = asyncio.get_running_loop().time
        return self._clock

    def live_workers(self) -> int:
        """Workers whose registration was seen within the lease TTL (this one included)."""
        now = asyncio.get_running_loop().time()
        others = sum(
            1
            for wid, seen in self._workers.items()
            if wid != self.worker_id and now - seen < self._ttl
        )
        return others + 1

    # -- lifetime -------------------------------------------------------------------

    async def start(self) -> None:
        """Register, read the bucket once and claim a first share (before `run`).

        So a service is pulling when `start` returns: a lone worker holds every
        partition, one joining others takes what is free (more as they hand over).
        """
        self._kv = await ensure_workers_bucket(self._nc, self._config)
        await self._kv.put(self._worker_key, self.worker_id.encode())
        self._watcher = await self._kv.watchall()
        now = asyncio.get_running_loop().time()
        while True:
            entry = await self._watcher.updates(timeout=_KV_TIMEOUT * 5)  # type: ignore[no-untyped-call]
            if entry is None:
                break
            self._seen(entry.key, entry.value or b"", entry.operation, now)
        await self._count_keys(now)
        share = math.ceil(self._partitions / self.live_workers())
        await self._claim(share, now)
        self.tasks.spawn(self._watch(), name="ore-ownership-watch")
        self.tasks.spawn(self._renew_loop(), name="ore-ownership-renew")
        self.tasks.spawn(self._balance_loop(), name="ore-ownership-balance")

    def stop_taking(self) -> None:
        """Claim no more leases (shutdown: the ones held stay renewed until `close`)."""
        self._taking = False

    async def close(self) -> None:
        """Stop the loops, release every lease and the registration (after the caller
        drained)."""
        self._taking = False
        await self.tasks.aclose()
        kv = self._kv
        if kv is None:
            return
        leases = list(self._leases.items())
        self._leases.clear()
        await asyncio.gather(
            *(self._delete(_LEASE + str(p), lease.revision) for p, lease in leases),
            self._delete(self._worker_key, None),
            return_exceptions=True,
        )
        if leases:
            log.info("partition leases released", count=len(leases), worker=self.worker_id)

    async def _delete(self, key: str, revision: int | None) -> None:
        assert self._kv is not None
        try:
            async with asyncio.timeout(_KV_TIMEOUT):
                await self._kv.delete(key, last=revision)
        except (NatsError, TimeoutError) as exc:  # it expires by itself
            log.debug("lease delete failed", key=key, error=repr(exc))

    # -- the watcher: a live picture of the bucket -------------------------------------

    async def _watch(self) -> None:
        assert self._kv is not None
        loop = asyncio.get_running_loop()
        while True:
            watcher = self._watcher or await self._open_watch()
            self._watcher = None
            if watcher is None:
                continue
            try:
                while True:
                    try:
                        entry = await watcher.updates(timeout=2 * self._ttl)  # type: ignore[no-untyped-call]
                    except NatsError:
                        # Silence for two TTLs although every holder renews each second:
                        # the watcher died (server restart); open a new one.
                        break
                    if entry is None:
                        continue
                    self._seen(entry.key, entry.value or b"", entry.operation, loop.time())
            finally:
                try:
                    await watcher.stop()  # type: ignore[no-untyped-call]
                except NatsError:
                    pass

    async def _open_watch(self) -> KeyValue.KeyWatcher | None:
        """A new watch of the bucket; None (after a pause) while JetStream cannot open
        one: every node of a cluster restarting, no stream leader elected yet."""
        assert self._kv is not None
        try:
            return await self._kv.watchall()
        except (NatsError, TimeoutError) as exc:
            log.info("worker bucket not watchable yet; trying again", error=repr(exc))
            await asyncio.sleep(min(1.0, self._ttl / 4))
            return None

    async def _count_keys(self, now: float) -> None:
        """Add the keys an exact listing finds and the watch's first read missed.

        nats-py's watch can say "initial values done" before it delivered them all
        (its marker races the deliveries under load), and a starting worker that
        undercounts the others claims more than its share at first. The listing counts
        what the server holds (`live_keys`); a lease found only here has an unknown
        holder, which is all `_claim` needs to leave it alone.
        """
        try:
            keys = await live_keys(self._nc, self._config.workers_bucket, ">", _KV_TIMEOUT)
        except (NatsError, TimeoutError, APIError) as exc:
            log.debug("worker bucket not listed; the watch's first read stands", error=repr(exc))
            return
        for key in keys:
            if key.startswith(_WORKER):
                self._workers.setdefault(key[len(_WORKER) :], now)
            elif key.startswith(_LEASE) and key[len(_LEASE) :].isdigit():
                self._holders.setdefault(int(key[len(_LEASE) :]), ("", now))

    def _seen(self, key: str, value: bytes, operation: str | None, now: float) -> None:
        gone = operation in (KV_DEL, KV_PURGE)
        if key.startswith(_WORKER):
            worker = key[len(_WORKER) :]
            if gone:
                self._workers.pop(worker, None)
            else:
                self._workers[worker] = now
            self._wakeup.set()
        elif key.startswith(_LEASE):
            try:
                partition = int(key[len(_LEASE) :])
            except ValueError:
                return
            if gone:  # released by a holder (never by this worker after a lapse)
                self._lapsed.discard(partition)
                self._holders.pop(partition, None)
                self._wakeup.set()
            else:
                holder = value.decode(errors="replace")
                if holder != self.worker_id:
                    self._lapsed.discard(partition)
                self._holders[partition] = (holder, now)

    # -- the loop: renew, claim, release ------------------------------------------------

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self._renew()
            await asyncio.sleep(max(0.0, self._interval - (loop.time() - started)))

    async def _balance_loop(self) -> None:
        while True:
            self._wakeup.clear()
            await self._balance()
            try:
                async with asyncio.timeout(self._interval):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def _renew(self) -> None:
        assert self._kv is not None
        kv = self._kv
        try:
            async with asyncio.timeout(_KV_TIMEOUT):
                await kv.put(self._worker_key, self.worker_id.encode())
        except (NatsError, TimeoutError) as exc:
            log.debug("worker registration not renewed", error=repr(exc))
        await asyncio.gather(*(self._renew_one(p) for p in list(self._leases)))

    async def _renew_one(self, partition: int) -> None:
        assert self._kv is not None
        lease = self._leases.get(partition)
        if lease is None:
            return
        sent = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(_KV_TIMEOUT):
                revision = await self._kv.update(
                    _LEASE + str(partition), self.worker_id.encode(), last=lease.revision
                )
        except KeyWrongLastSequenceError:
            await self._lose(partition, "taken over by another worker", lapsed=False)
            return
        except (NatsError, TimeoutError) as exc:
            if sent - lease.renewed >= self._valid_for:
                await self._lose(partition, f"not renewed in time ({exc!r})")
            return
        if self._leases.get(partition) is lease:
            # Also after a pause that made `owns` false for a while: the CAS succeeded,
            # so nobody claimed the key meanwhile and the lease is still ours.
            lease.revision = revision
            lease.renewed = sent

    async def _lose(self, partition: int, reason: str, *, lapsed: bool = True) -> None:
        """Drop `partition`; `lapsed`: not renewed in time here (no other holder known)."""
        if self._leases.pop(partition, None) is None:
            return
        self._dropping.add(partition)
        if lapsed:  # most often NATS was out of reach: this worker claims it back after
            self._lapsed.add(partition)
            log.warning(
                "partition lease lapsed; dropping its threads until it is claimed again",
                partition=partition,
                reason=reason,
            )
        else:
            log.warning(
                "partition lease lost; dropping its threads", partition=partition, reason=reason
            )
        try:
            await self._on_lost(partition)
        finally:
            self._dropping.discard(partition)

    async def _balance(self) -> None:
        # A lease overdue by our own clock (we were paused) is dropped before anything else.
        now = asyncio.get_running_loop().time()
        for partition, lease in list(self._leases.items()):
            if now - lease.renewed >= self._valid_for:
                await self._lose(partition, "renewal overdue (paused or cut off)")
        share = math.ceil(self._partitions / self.live_workers())
        active = [p for p, lease in self._leases.items() if not lease.releasing]
        if len(active) > share:
            for partition in sorted(active, reverse=True)[: len(active) - share]:
                self._leases[partition].releasing = True
                self.tasks.spawn(self._release(partition), name=f"ore-release-p{partition}")
        elif self._taking and len(active) < share:
            await self._claim(share - len(active), now)

    async def _claim(self, wanted: int, now: float) -> None:
        free = [
            p
            for p in range(self._partitions)
            if p not in self._leases
            and (p not in self._holders or now - self._holders[p][1] >= self._ttl)
        ]
        random.shuffle(free)  # workers starting together do not all race for p0, p1, ...
        await asyncio.gather(*(self._claim_one(p) for p in free[:wanted]))

    async def _claim_one(self, partition: int) -> None:
        assert self._kv is not None
        sent = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(_KV_TIMEOUT):
                revision = await self._kv.create(_LEASE + str(partition), self.worker_id.encode())
        except KeyWrongLastSequenceError:
            return  # alive after all (or just claimed by someone else)
        except (NatsError, TimeoutError) as exc:
            log.debug("lease claim failed", partition=partition, error=repr(exc))
            return
        lease = self._leases[partition] = _Lease(revision, sent)
        back = partition in self._lapsed
        self._lapsed.discard(partition)
        if back:
            self._claiming_back.add(partition)
        try:
            await self._on_acquire(partition)
        except Exception:
            log.exception("taking over a partition failed; releasing it", partition=partition)
            self._leases.pop(partition, None)
            await self._delete(_LEASE + str(partition), lease.revision)
            return
        finally:
            self._claiming_back.discard(partition)
        if back:
            log.info("partition lease claimed back after it lapsed here", partition=partition)
        else:
            log.debug("partition lease taken", partition=partition, worker=self.worker_id)

    async def _release(self, partition: int) -> None:
        """Hand a partition over: drain it (lease still renewed), then delete the lease."""
        try:
            await self._on_release(partition)
        finally:
            lease = self._leases.pop(partition, None)
            if lease is not None:
                await self._delete(_LEASE + str(partition), lease.revision)
                log.info("partition handed over", partition=partition, worker=self.worker_id)
