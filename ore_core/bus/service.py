"""CoreService: the engine of `ore serve`, binding a `Manager` to NATS.

It connects, checks the server's version and JetStream (`check_server`,
`check_jetstream`), makes sure the streams of its layout exist (`ensure_layout`),
takes its share of the ingress partitions (`Ownership`: KV leases, so any number of
workers share one NATS and each thread has one owner), feeds those partitions into
the manager's streams (`Ingress`), publishes their output (`Egress`), answers the
control API (`ControlAPI`) and, if asked, a health endpoint. `stop()` drains: it
stops pulling, lets running turns finish for a grace period, acknowledges what
finished, closes the streams (unfinished messages are handed back), releases its
leases so other workers take over at once, and closes the connection.
`run()` does all that under SIGTERM, SIGINT and SIGHUP handlers, as a process entry point.

Every background task belongs to one `TaskScope` tree rooted here (the ownership
loop that renews and balances leases, the Manager's streams and sinks, the pipeline's,
ingress's and pullers' loops). A crash anywhere is logged with the task's name, turns
`/readyz` into a 503 that names it, and stops the service at once (as a second SIGTERM
would; a worker that cannot keep its leases must not keep serving); `stop()` then
raises `TaskCrashed`, so `ore serve` exits with status 1 instead of staying half alive.

nats-py reconnects by itself (forever); after a reconnect the partitions are pulled
again, and the publisher retries what the outage swallowed. An outage is logged once.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, TypeVar

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import StaleConnectionError

from ore_core._nats.connection import (
    MIN_SERVER_VERSION,
    NatsCredentials,
    check_jetstream,
    check_server,
    connect_nats,
)
from ore_core.bridge.cache import LinkCache
from ore_core.bridge.gateways import apply_gateways
from ore_core.bridge.links import LinkStore
from ore_core.bus.api.control_api import ControlAPI
from ore_core.bus.api.model_offer import ModelOffer
from ore_core.bus.cluster.fencing import FencedStore
from ore_core.bus.cluster.ownership import Ownership
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.ingress.ingress import Ingress
from ore_core.bus.ops.health import HealthServer
from ore_core.bus.ops.metrics import CONTENT_TYPE, TURN_KINDS, CoreMetrics, Readings
from ore_core.bus.ops.stats import StatsResponder
from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.streams import BusConfig, adopt_partitions, ensure_layout, setup_summary
from ore_core.config import GatewaySettings
from ore_core.errors import BusError
from ore_core.files.links import LinkSettings
from ore_core.session.manager import Manager
from ore_core.session.store_health import store_probe
from ore_core.subjects import Subjects
from ore_core.tasks import Crash, TaskCrashed, TaskScope
from ore_core.version import __version__

__all__ = ["SERVING_GC_THRESHOLD", "CoreService", "run", "serve"]

EXIT_CRASHED = 1
"""`run()`'s exit status when a background task crashed (0 after a clean drain)."""

CONNECT_TIMEOUT = 10.0  # seconds for the first connection to NATS

SERVING_GC_THRESHOLD = 20_000
"""The collector's youngest-generation threshold while `run` serves (CPython's is 700).

Every turn leaves objects alive (its turns stay in the attached thread's ledger), so at
700 the youngest generation filled every few dozen turns, and the older generations,
then the whole serving heap, were walked again and again: 15 µs of a turn's 110-125 at
100 threads (`bench/hotpath.py`'s workload, the collector's own time measured over 10,000
turns). At 20,000 that is 2 µs: a young collection every thousand turns or so (a
pause of about 4 ms), full ones rarely. Garbage without cycles is freed at once as
before, a closed stream's thread included (no reference cycle holds it: see
tests/session/test_manager.py); cyclic garbage would wait longer for a collection.
"""

_T = TypeVar("_T")
log = structlog.get_logger("ore.bus")

# How a lost or refused connection shows up in error_cb: logged once as "connection lost".
_CONNECTION_ERRORS = (OSError, StaleConnectionError)  # UnexpectedEOF is a StaleConnectionError


class CoreService:
    """Serves one `Manager` over NATS until stopped (see the module docstring).

    `credentials` (user/password, token, nkey, creds file, TLS: a `NatsCredentials`,
    as `ConduitClient.connect` takes) are passed to nats-py.
    `health_port` (0 = any free port) serves `/healthz`, `/readyz` and `/metrics` on
    `health_host`. `metrics` keeps the worker's metrics (`/metrics`, `ore.admin.stats`
    for `ore top`); False only to measure what they cost. `processor_name` is what the
    control API's `models` calls the manager's processor (the picker shows it).
    `stop()` (and a failed `start()`) closes `manager`: its streams must stop for
    their unfinished messages to be redelivered. The store stays the caller's.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        servers: Sequence[str],
        subjects: Subjects | None = None,
        config: BusConfig | None = None,
        credentials: NatsCredentials | None = None,
        name: str = "ore-core",
        health_port: int | None = None,
        health_host: str = "127.0.0.1",
        drain_grace: float = 30.0,
        handover_grace: float = 30.0,
        worker_id: str | None = None,
        pull_batch: int = 256,
        publish_window: int = 4096,
        reconnect_wait: float = 1.0,
        store_probe_interval: float = 5.0,
        version: str = __version__,
        gateways: Sequence[GatewaySettings] = (),
        conversation_keys: Callable[[str], str | None] = lambda namespace: None,
        metrics: bool = True,
        processor_name: str = "processor",
    ) -> None:
        if not servers:
            raise BusError("CoreService needs at least one NATS server URL")
        self.manager = manager
        self.subjects = subjects or Subjects()
        self.config = config or BusConfig()
        self._servers = list(servers)
        self._connect_options: dict[str, Any] = {
            "name": name,
            **(credentials or NatsCredentials()).connect_options(),
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": reconnect_wait,
            "pending_size": 16 * 1024 * 1024,
        }
        self._drain_grace = drain_grace
        self._handover_grace = handover_grace
        self._worker_id = worker_id
        self._pull_batch = pull_batch
        self._publish_window = publish_window
        self._version = version
        self._processor_name = processor_name
        self._nc: NatsClient | None = None
        self._links: LinkCache | None = None
        self._gateways = list(gateways)
        self._keys = conversation_keys
        self._pipeline: Pipeline | None = None
        self._egress: Egress | None = None
        self._ingress: Ingress | None = None
        self._ownership: Ownership | None = None
        self._control: ControlAPI | None = None
        self.metrics = CoreMetrics(_processor_name(manager)) if metrics else None
        """The worker's Prometheus metrics (None when turned off)."""
        self._health = (
            None
            if health_port is None
            else HealthServer(
                self._unhealthy,
                self._unready,
                host=health_host,
                port=health_port,
                metrics=None if self.metrics is None else (self.metrics.render, CONTENT_TYPE),
            )
        )
        self._stats: StatsResponder | None = None
        self.tasks = TaskScope("core", on_crash=self._crashed)
        """Every background task of the service, the Manager's included (see the module doc)."""
        self._disconnected = False
        self._closing = False
        self._stop_requested = asyncio.Event()
        self._hurry = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None
        self._store_probe_interval = store_probe_interval

    # -- state ------------------------------------------------------------------

    @property
    def nc(self) -> NatsClient:
        """The NATS connection (after `start`)."""
        return _started(self._nc)

    @property
    def health_port(self) -> int | None:
        """The port of the health endpoint, if one was asked for."""
        return None if self._health is None else self._health.port

    @property
    def stopped(self) -> bool:
        """True once `stop()` has finished (cleanly or with TaskCrashed)."""
        return self._stopping is not None and self._stopping.done()

    @property
    def stop_requested(self) -> bool:
        """True once `request_stop` (or a signal under `serve`) asked the service to stop."""
        return self._stop_requested.is_set()

    def _unhealthy(self) -> str | None:
        if self._nc is None or not self._nc.is_connected:
            return "not connected to NATS"
        return None

    def _unready(self) -> str | None:
        """Why the service is not ready, or None (what `/readyz` answers)."""
        crash = self.tasks.crash
        if crash is not None:
            return crash.describe()
        if self._stopping is not None:
            return "stopping"
        if (problem := self._unhealthy()) is not None:
            return problem
        if self._ownership is None or not self._ownership.running:
            return "not keeping partition leases"
        if self._ingress is None or not self._ingress.running:
            return "not pulling every owned ingress partition"
        if self._pipeline is not None and self._pipeline.full is not None:
            return f"JetStream limit reached: {self._pipeline.full}"
        store = self.manager.store_health
        if not store.usable:
            return f"store unusable: {store.error}"
        return None

    @property
    def ready(self) -> bool:
        """Connected, streams set up, leases kept, every owned partition pulled, no
        JetStream limit reached, the store usable and no task crashed."""
        return self._unready() is None

    @property
    def crash(self) -> Crash | None:
        """The background task that crashed, if one did (the service is then stopping)."""
        return self.tasks.crash

    @property
    def ownership(self) -> Ownership:
        """This worker's partition leases (after `start`)."""
        return _started(self._ownership)

    @property
    def ingress(self) -> Ingress:
        """The partition pullers (after `start`)."""
        return _started(self._ingress)

    @property
    def links(self) -> LinkCache:
        """The links every part of this worker asks (after `start`)."""
        if self._links is None:
            raise BusError("CoreService is not started: await start() first")
        return self._links

    # -- lifetime -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect, set up streams and start serving; on failure undo what was started."""
        if self._health is not None:
            await self._health.start()
        try:
            await self._start()
        except BaseException:
            await self.stop(grace=0.0)
            raise
        # After `_start`: a store that lives in NATS is attached to the connection there.
        self.tasks.spawn(self._probe_store(), name="ore-store-probe")
        log.info(
            "ore core serving",
            servers=self._servers,
            prefix=self.subjects.prefix,
            partitions=self.config.partition_count,
            health_port=self.health_port,
        )

    async def _start(self) -> None:
        try:
            # nats-py retries an unreachable server forever: bound the first connect.
            async with asyncio.timeout(CONNECT_TIMEOUT):
                nc = await connect_nats(
                    self._servers,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    **self._connect_options,
                )
        except TimeoutError:
            raise BusError(
                f"cannot reach NATS at {', '.join(self._servers)} within {CONNECT_TIMEOUT:g}s; "
                "is the server running, and is nats.url right?"
            ) from None
        except (NatsError, OSError) as exc:
            raise BusError(
                f"cannot connect the ore core to NATS at {', '.join(self._servers)}: {exc}"
            ) from exc
        self._nc = nc
        self.tasks.adopt(self.manager.tasks)
        wanted = build_layout(self.subjects, self.config)  # its features, whatever the count
        required = max(MIN_SERVER_VERSION, wanted.required_version())
        check_server(nc, required, wanted.features(), who="the ore core (ore serve)")
        await check_jetstream(nc, who="the ore core (ore serve)")
        self.config = await adopt_partitions(nc.jetstream(), self.subjects, self.config)
        applied = await ensure_layout(nc.jetstream(), build_layout(self.subjects, self.config))
        if applied:
            log.info("NATS streams and consumers set up", **setup_summary(applied))
        # A store that lives in NATS (jetstream) shares this connection.
        attach_nats = getattr(self.manager.store, "attach_nats", None)
        if callable(attach_nats):
            await attach_nats(nc, self.subjects)
        config = self.config
        self._links = LinkCache(
            LinkStore(await nc.jetstream().key_value(self.subjects.links_bucket))
        )
        self.tasks.adopt(self._links.tasks)
        await self._links.start()
        self._pipeline = Pipeline(nc, window=self._publish_window)
        self.tasks.adopt(self._pipeline.tasks)
        await self._pipeline.start()
        ownership = Ownership(
            nc,
            config,
            on_acquire=self._acquire,
            on_release=self._release,
            on_lost=self._lost,
            worker_id=self._worker_id,
        )
        self._ownership = ownership
        may_write = ownership.may_write_thread
        # Saves of a worker whose lease is overdue are refused (the stream drops itself).
        self.manager.store = FencedStore(self.manager.store, may_write)
        egress = Egress(
            nc, self.subjects, self._pipeline, self.manager, may_write=may_write, links=self._links
        )
        egress.attach(self.manager)
        self._egress = egress
        self._ingress = Ingress(
            nc,
            self.manager,
            self.subjects,
            config,
            egress=egress,
            pipeline=self._pipeline,
            owns=ownership.owns,
            holds=ownership.holds,
            batch=self._pull_batch,
            handover_grace=self._handover_grace,
            links=self._links,
        )
        # Output dropped for an overdue lease (a pause): its messages are handled again.
        egress.watch_overdue(self._ingress.output_refused)
        self.tasks.adopt(self._ingress.tasks)
        await self._ingress.start()
        self.tasks.adopt(ownership.tasks)
        await ownership.start()
        self._control = ControlAPI(
            nc,
            self.manager,
            self.subjects,
            version=self._version,
            on_resolve=egress.bind,
            on_delete=egress.thread_deleted,
            route=ownership.other_holder,
            owns=ownership.owns_thread,
            worker_id=ownership.worker_id,
            links=self._links,
            offer=ModelOffer(self.manager.processor, self._processor_name),
            files_retention=self.config.files_retention,
            file_links=LinkSettings(
                self.config.files_link_base,
                self.config.files_link_secret,
                self.config.files_link_ttl,
            ),
        )
        await self._control.start()
        if self.config.files_sweep_every > 0:
            sweeping = self._control.files.sweep_every(
                self.config.files_sweep_every, partial(ownership.owns, 0)
            )
            self.tasks.spawn(sweeping, name="ore-files-sweep", critical=False)
        if self._gateways:
            await apply_gateways(
                self._gateways, await self._control.link_admin(), self.manager, self._keys
            )
        if self.metrics is not None:
            self._read_metrics(self.metrics, self._pipeline, egress, self._ingress, ownership)
            self._stats = StatsResponder(
                nc, self.subjects, self.metrics, ownership.worker_id, ownership.held
            )
            await self._stats.start()

    def _read_metrics(
        self,
        metrics: CoreMetrics,
        pipeline: Pipeline,
        egress: Egress,
        ingress: Ingress,
        ownership: Ownership,
    ) -> None:
        """Count turns with a sink and read the parts' own counters at each scrape."""
        self.manager.register_batch_sink(TURN_KINDS, metrics.observe, name="ore-metrics")
        metrics.read(
            Readings(
                in_flight=lambda: ingress.inflight,
                partitions_owned=lambda: len(ownership.held()),
                events_refused=lambda: egress.refused,
                deltas_dropped=lambda: egress.dropped_deltas,
                publishes_lost=lambda: pipeline.lost,
                dead_lettered=lambda: ingress.tallies[0],
                parked=lambda: ingress.tallies[1],
                store_failures=lambda: self.manager.store_health.failures,
                store_saves=self.manager.store_health.save_seconds,
                redelivered=lambda: ingress.tallies[2],
                egress_batches=lambda: egress.batches,
                egress_retries=lambda: pipeline.retried,
            )
        )

    async def _acquire(self, partition: int) -> None:
        # A lease claimed back after it lapsed here (a NATS outage) is no takeover: no
        # other worker held the partition meanwhile, none was lost.
        back = self._ownership is not None and self._ownership.claimed_back(partition)
        if self.metrics is not None and not back:
            self.metrics.takeovers += 1
        if self._ingress is not None:
            await self._ingress.acquire(partition, claimed_back=back)

    async def _release(self, partition: int) -> None:
        if self._ingress is not None:
            await self._ingress.release(partition)

    async def _lost(self, partition: int) -> None:
        if self.metrics is not None:
            self.metrics.leases_lost += 1
        if self._ingress is not None:
            await self._ingress.abandon(partition)

    def _crashed(self, crash: Crash) -> None:
        # Logged where it happened; here the service stops, at once: what is unfinished
        # is redelivered to a worker whose loops all run.
        log.error("stopping: a background task crashed", task=crash.task, scope=crash.scope)
        self.request_stop(now=True)

    def request_stop(self, *, now: bool = False) -> None:
        """Ask `serve_forever` to return after draining; `now` skips the grace period."""
        self._stop_requested.set()
        if now:
            self._hurry.set()

    async def serve_forever(self) -> None:
        """Serve until `request_stop`, then drain and stop."""
        await self._stop_requested.wait()
        await self.stop()

    async def stop(self, grace: float | None = None) -> None:
        """Drain and stop (see the module docstring). Idempotent; concurrent calls wait.

        Raises TaskCrashed, after stopping, if a background task crashed.
        """
        self._stop_requested.set()
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(
                self._shutdown(self._drain_grace if grace is None else grace)
            )
        await asyncio.shield(self._stopping)

    async def _shutdown(self, grace: float) -> None:
        self._closing = True
        if self._stats is not None:
            await self._stats.stop()
        if self._control is not None:
            await self._control.stop()
        ingress = self._ingress
        if self._ownership is not None:
            self._ownership.stop_taking()
        if ingress is not None:
            await ingress.stop_pulling()
            if not await self._drain(ingress, grace):
                log.warning(
                    "drain grace over; unfinished messages will be redelivered",
                    count=ingress.inflight,
                )
        await self.manager.aclose()
        if self._egress is not None:
            await self._egress.flush()  # events held for a `done` that will not come
        if ingress is not None:
            await ingress.stop()
        if self._ownership is not None and self._nc is not None and self._nc.is_connected:
            await self._ownership.close()  # others take the partitions over at once
        if self._pipeline is not None:
            await self._pipeline.stop()
        if self._nc is not None:
            await _close(self._nc)
        try:
            await self.tasks.aclose()  # all ended by now; raises a crash
        finally:
            if self._health is not None:
                await self._health.stop()
            if ingress is not None:  # a refused start says why in its exception, nothing more
                log.info("ore core stopped")

    async def _drain(self, ingress: Ingress, grace: float) -> bool:
        """Wait for in-flight messages, at most `grace` seconds or until told to hurry."""
        handled = asyncio.ensure_future(ingress.wait_handled())
        hurry = asyncio.ensure_future(self._hurry.wait())
        await asyncio.wait({handled, hurry}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
        for task in (handled, hurry):
            task.cancel()
        return handled.done() and not handled.cancelled()

    async def _probe_store(self) -> None:
        """Check the store now and every `store_probe_interval` s: `/readyz` follows it."""
        probe = store_probe(self.manager.store)
        while True:
            await self.manager.store_health.probe(probe)
            await asyncio.sleep(self._store_probe_interval)

    # -- connection events ----------------------------------------------------------

    async def _on_error(self, error: Exception) -> None:
        if isinstance(error, _CONNECTION_ERRORS):
            log.debug("NATS connection error", error=repr(error))
        else:  # e.g. a permissions violation: worth an operator's attention
            log.warning("NATS error", error=repr(error))

    async def _on_disconnected(self) -> None:
        if not self._disconnected and not self._closing:
            self._disconnected = True
            log.warning("NATS connection lost; reconnecting", servers=self._servers)

    async def _on_reconnected(self) -> None:
        self._disconnected = False
        log.info("NATS connection restored", server=str(self.nc.connected_url))
        if self._ingress is not None and not self._closing:
            await self._ingress.reconnected()


def _processor_name(manager: Manager) -> str:
    """The turn processor's name for the metrics' `processor` label (one per worker)."""
    processor = manager.processor
    return str(getattr(processor, "name", None) or type(processor).__name__)


async def _close(nc: NatsClient) -> None:
    """Drain `nc` (flushes what is buffered), or just close it if it cannot drain now."""
    if nc.is_closed:
        return
    try:
        await nc.drain()
    except (NatsError, OSError) as exc:  # e.g. reconnecting: nothing left to flush
        log.debug("NATS drain failed; closing", error=repr(exc))
        try:
            await nc.close()
        except OSError:
            pass  # the socket was already gone


async def serve(
    service: CoreService, on_started: Callable[[CoreService], None] | None = None
) -> None:
    """Start `service`, serve until SIGTERM, SIGINT or SIGHUP, then drain and stop.

    A second signal while draining stops at once (unfinished turns are redelivered).
    `on_started` runs once the service answers (e.g. to tell other processes where).
    """
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        hurry = service.stop_requested
        log.info("stopping" if not hurry else "stopping now", signal=signum.name)
        service.request_stop(now=hurry)

    # SIGHUP: the terminal closed or the SSH session dropped; stop as for SIGTERM.
    hangup = getattr(signal, "SIGHUP", None)
    for signum in (signal.SIGTERM, signal.SIGINT, *([hangup] if hangup else [])):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            handled.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
            pass
    try:
        await service.start()
        if on_started is not None:
            on_started(service)
        await service.serve_forever()
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        if not service.stopped:  # cancelled before serve_forever stopped it
            await service.stop()


def run(
    app: Callable[[], AbstractAsyncContextManager[CoreService]],
    on_started: Callable[[CoreService], None] | None = None,
) -> int:
    """Process entry point: serve the CoreService `app()` yields; the exit status.

    0 after a clean drain, `EXIT_CRASHED` when a background task crashed (logged with
    its traceback; the service stopped at once, the rest of `app` was still closed).

    `app` is an async context manager factory so the caller can open and close what the
    service uses (the store) around it::

        @asynccontextmanager
        async def app():
            store = SQLiteStore(path)
            try:
                yield CoreService(Manager(store, EchoProcessor()), servers=[url])
            finally:
                await store.close()

        sys.exit(run(app))
    """

    def started(service: CoreService) -> None:
        gc.freeze()  # see `_settle_heap`
        if on_started is not None:
            on_started(service)

    async def main() -> None:
        async with app() as service:
            _settle_heap()
            await serve(service, started)

    try:
        asyncio.run(main())
    except TaskCrashed as exc:
        log.error("ore core stopped after a crash", error=str(exc))
        return EXIT_CRASHED
    return 0


def _settle_heap() -> None:
    """Collect start-up garbage now and collect less often while serving; `run` then
    freezes the heap once the core serves.

    A full collection walks every tracked object, and after start-up those are mostly
    the process's imports and the models' schemas, which live as long as it does:
    `gc.freeze()` (once started: it takes no time) moves them out of the collector's
    generations for good, so the collections a busy core runs walk only what serving
    made (measured: the collector was ~13 % of `ore serve`'s CPU per turn at 100
    threads), and `SERVING_GC_THRESHOLD` makes them rarer. The one full collection that
    keeps start-up garbage out of the frozen heap runs here, before the service holds
    any lease: a pause while serving could outlast a lease's validity. Only for the
    process entry point: a library caller's heap is its own business.
    """
    gc.collect()
    gc.set_threshold(SERVING_GC_THRESHOLD, *gc.get_threshold()[1:])


def _started(part: _T | None) -> _T:
    """`part` of a started service; before `start`, a BusError that says so."""
    if part is None:
        raise BusError("CoreService is not started: await start() first")
    return part
