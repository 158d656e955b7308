"""`ore top`: the workers of a deployment, live: partitions, turns, latency, errors, DLQ.

It asks `ore.admin.stats` (every worker answers: `ore_core.bus.ops.stats`), collects the
replies for a short window, and reads the dead-letter stream's count per reason.
`--once` prints one snapshot and exits (for scripts and tests); otherwise the table
is redrawn every `--interval` seconds, turns per second from the difference, and a
worker slower than the window keeps its last answer on screen, marked stale (`Board`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import click
import nats as nats_py
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from ore_core import jsonutil
from ore_core._nats.connection import NatsCredentials
from ore_core.bus.ops.stats import STATS_ENDPOINT
from ore_core.cli.options import cli_state, nats_option, nats_settings
from ore_core.cli.running import find_running
from ore_core.config import NatsSettings
from ore_core.errors import BusError, OreError
from ore_core.subjects import Subjects

__all__ = ["Board", "Snapshot", "gather", "percentile", "render", "top"]

_CONNECT_TIMEOUT = 10.0
_PIPED_WIDTH = 1000  # no table of `ore top` is wider: piped output is never cut


@dataclass(frozen=True)
class Snapshot:
    """What the workers answered, and the dead letters by reason.

    A worker that did not answer within the last window keeps its last answer, with
    `stale` set to the seconds since it answered (absent for a worker that answered).
    """

    workers: list[dict[str, Any]]
    dead_letters: dict[str, int]


def percentile(buckets: Sequence[Sequence[Any]], q: float) -> float | None:
    """The upper bound of the histogram bucket holding quantile `q` (None: no data)."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    for bound, count in buckets:
        if count >= q * total:
            return None if bound is None else float(bound)
    return None


class Board:
    """The workers as `ore top` last heard from them, asked once per `round`.

    One inbox for every round, so an answer that comes after its window (a busy or
    paused worker) still counts, in the next view. A worker that misses a window is not
    dropped: it keeps its last answer, marked stale, until `forget` seconds pass without
    one (it stopped, or left the deployment).
    """

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        window: float,
        *,
        forget: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc = nc
        self._subjects = subjects
        self._window = window
        self._forget = forget
        self._clock = clock
        self._heard: dict[str, tuple[dict[str, Any], float]] = {}  # worker -> answer, when
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None

    async def __aenter__(self) -> Board:
        self._sub = await self._nc.subscribe(self._inbox, cb=self._answered)
        return self

    async def __aexit__(self, *exc: object) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    async def _answered(self, msg: Msg) -> None:
        try:
            answer = jsonutil.loads(msg.data)
        except ValueError:
            return  # not a stats answer: nothing to show
        if isinstance(answer, dict) and "worker" in answer:
            self._heard[str(answer["worker"])] = (answer, self._clock())

    async def round(self) -> Snapshot:
        """Ask every worker, wait `window` seconds for the answers, read the DLQ counts."""
        asked = self._clock()
        await self._nc.publish(self._subjects.admin(STATS_ENDPOINT), b"{}", reply=self._inbox)
        await asyncio.sleep(self._window)  # scatter-gather: as many answers as come in time
        return Snapshot(self.workers(asked), await _dead_letters(self._nc, self._subjects))

    def workers(self, asked: float) -> list[dict[str, Any]]:
        """Every worker heard from in the last `forget` seconds, by name; those that have
        not answered since `asked` marked stale."""
        now = self._clock()
        for name in [n for n, (_, at) in self._heard.items() if now - at > self._forget]:
            del self._heard[name]
        workers = []
        for _name, (answer, at) in sorted(self._heard.items()):
            worker = dict(answer)
            if at < asked:
                worker["stale"] = round(now - at, 1)
            workers.append(worker)
        return workers


async def _dead_letters(nc: NatsClient, subjects: Subjects) -> dict[str, int]:
    dead: dict[str, int] = {}
    try:
        info = await nc.jetstream().stream_info(
            subjects.dlq_stream, subjects_filter=subjects.dlq_wildcard
        )
        head = subjects.dlq_wildcard.removesuffix(">")
        for subject, count in (info.state.subjects or {}).items():
            dead[subject.removeprefix(head)] = count
    except NotFoundError:
        pass  # no dead-letter stream yet: nothing was rejected
    return dead


async def gather(nc: NatsClient, subjects: Subjects, window: float) -> Snapshot:
    """Every worker's stats answer within `window` seconds, and the DLQ counts (one round)."""
    async with Board(nc, subjects, window) as board:
        return await board.round()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:g} ms"


def render(snapshot: Snapshot, rates: Mapping[str, float] | None = None) -> Group:
    """The workers' table and the dead letters' (`rates`: turns/s per worker, if known)."""
    workers = Table(title=f"ore workers ({len(snapshot.workers)})")
    for column in ("worker", "partitions", "in flight", "turns/s", "done", "p50", "p99"):
        workers.add_column(column)
    workers.add_column("errors")
    for w in snapshot.workers:
        name = str(w["worker"])
        rate = (rates or {}).get(name)
        if rate is None:
            rate = w["completed"] / w["uptime"] if w.get("uptime") else 0.0
        stale = w.get("stale")
        workers.add_row(
            name if stale is None else f"{name} (stale, {stale:g}s ago)",
            ",".join(str(p) for p in w["partitions"]) or "-",
            f"{w['in_flight']:g}",
            f"{rate:.1f}",
            f"{w['completed']:g}",
            _ms(percentile(w["latency_buckets"], 0.5)),
            _ms(percentile(w["latency_buckets"], 0.99)),
            f"{w['failed'] + w['dead_lettered']:g}",
            style=None if stale is None else "dim",
        )
    dead = Table(title="dead letters")
    dead.add_column("reason")
    dead.add_column("messages")
    for reason, count in sorted(snapshot.dead_letters.items()):
        dead.add_row(reason, str(count))
    if not snapshot.dead_letters:
        dead.add_row("-", "0")
    return Group(workers, dead)


def print_snapshot(snapshot: Snapshot, file: TextIO) -> None:
    """`--once`: the tables at the terminal's width, or whole when piped (a script
    reading them must not get rows cut at a width nobody chose)."""
    console = Console(file=file)
    if not console.is_terminal:
        console = Console(file=file, width=_PIPED_WIDTH)
    console.print(render(snapshot))


@click.command()
@nats_option(help="NATS server URL (default: nats.url, else the running `ore serve`'s).")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the snapshot as JSON.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option(
    "--window",
    type=click.FloatRange(min=0.05),
    default=0.5,
    show_default=True,
    help="Seconds to wait for the workers' answers.",
)
def top(
    nats_urls: tuple[str, ...], once: bool, as_json: bool, interval: float, window: float
) -> None:
    """Show the workers of a deployment: partitions, turns, latency, errors, dead letters."""
    settings = nats_settings(cli_state().settings.nats, nats_urls)
    if not settings.url:
        running = find_running()
        if running is None:
            raise OreError("ore top: no NATS server configured (--nats URL) and no running core")
        settings = nats_settings(settings, [running.nats_url])
    asyncio.run(_top(settings, once, as_json, interval, window))


async def _top(
    settings: NatsSettings, once: bool, as_json: bool, interval: float, window: float
) -> None:
    servers = list(settings.url or [])
    options = NatsCredentials.from_settings(settings).connect_options()
    try:
        async with asyncio.timeout(_CONNECT_TIMEOUT):
            nc = await nats_py.connect(servers=servers, name="ore-top", **options)
    except (TimeoutError, NatsError, OSError) as exc:
        raise BusError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from None
    subjects = Subjects(settings.subject_prefix)
    console = Console()
    try:
        async with Board(nc, subjects, window) as board:
            snapshot = await board.round()
            if once and as_json:
                click.echo(jsonutil.dumps(asdict(snapshot)).decode())
                return
            if once:
                print_snapshot(snapshot, sys.stdout)
                return
            with Live(render(snapshot), console=console, auto_refresh=False) as live:
                while True:
                    await asyncio.sleep(interval)
                    previous = {str(w["worker"]): w["completed"] for w in snapshot.workers}
                    snapshot = await board.round()
                    rates = {
                        str(w["worker"]): (w["completed"] - previous.get(str(w["worker"]), 0))
                        / (interval + window)
                        for w in snapshot.workers
                    }
                    live.update(render(snapshot, rates), refresh=True)
    finally:
        await nc.close()
