"""Nothing is lost: nats-server restarts, a worker killed mid-turn, SIGTERM drains."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client

from ore_core import Role
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.bus.service import CoreService
from ore_core.session.stores.sqlite_store import SQLiteStore
from ore_core.subjects import Subjects
from ore_core.testing.processors import GatedProcessor
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

RUNNER = Path(__file__).with_name("core_runner.py")
PROCESS_TIMEOUT = 60.0  # a fresh interpreter imports ore first
# A killed runner's partitions are taken over once its leases expire: after 1.5 s
# instead of the default 4 s (the takeover is the same, only sooner).
RUNNER_CONFIG = BusConfig(partitions=raw.PARTITIONS, ack_wait=1.0, lease_ttl=1.5)
TURN_KINDS = ["turn_complete", "text", "turn_complete", "lifecycle"]  # one stored batch


def answered(nc: Client, thread_id: str, count: int = 1) -> Callable[[], Awaitable[bool]]:
    """An async check: `count` turns of the thread are completely stored."""

    async def check() -> bool:
        kinds = [e["kind"] for e in await raw.stored_events(nc, thread_id)]
        return kinds.count("turn_complete") >= 2 * count and kinds[-1] == "lifecycle"

    return check


async def test_messages_published_after_a_server_restart_are_answered(
    core: CoreService, ore_nats_client: Client, ore_nats_server: EmbeddedNatsServer, outbox: Outbox
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("before", "m-1"))
    await outbox.done("t1")

    await ore_nats_server.arestart()
    await raw.publish(ore_nats_client, "t1", raw.user_message("after", "m-2"))

    await raw.eventually(answered(ore_nats_client, "t1", count=2))
    assert [e["kind"] for e in await raw.stored_events(ore_nats_client, "t1")] == TURN_KINDS * 2


async def test_a_turn_running_across_a_server_restart_completes_once(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_server: EmbeddedNatsServer
) -> None:
    processor = GatedProcessor()
    service = await start_core(processor)
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await asyncio.wait_for(processor.started.wait(), 10)

    await ore_nats_server.arestart()
    await raw.wait_for(lambda: service.ready)
    processor.release()

    await raw.eventually(answered(ore_nats_client, "t1"))
    kinds = [e["kind"] for e in await raw.stored_events(ore_nats_client, "t1")]
    # An ack lost in the restart makes the partition start again from its ack floor:
    # the redelivered message is recognised as answered and gets one more `done`.
    assert kinds[: len(TURN_KINDS)] == TURN_KINDS
    assert set(kinds[len(TURN_KINDS) :]) <= {"lifecycle"}
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    assert processor.calls == 1


class Runner:
    """A core_runner.py process; stopped by its pid when the test ends."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def turn_started(self) -> str:
        """The next `TURN <thread> <event id>` line the runner prints."""
        assert self.process.stdout is not None
        async with asyncio.timeout(PROCESS_TIMEOUT):
            while True:
                line = (await self.process.stdout.readline()).decode()
                if not line:
                    raise AssertionError("core runner exited before a turn started")
                if line.startswith("TURN "):
                    return line.strip()

    async def exit_code(self) -> int:
        """Wait for the process to end."""
        return await asyncio.wait_for(self.process.wait(), PROCESS_TIMEOUT)


@pytest.fixture
async def start_runner(
    ore_nats_url: str, ore_nats_client: Client, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Runner]]]:
    """Start core runners on one SQLite file; the streams exist before the first starts."""
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), RUNNER_CONFIG)
    runners: list[Runner] = []

    async def start(*, hold: float) -> Runner:
        log = (tmp_path / f"runner-{len(runners)}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(RUNNER),
            *("--url", ore_nats_url, "--db", str(tmp_path / "threads.db"), "--hold", str(hold)),
            *("--partitions", str(RUNNER_CONFIG.partitions)),
            *("--ack-wait", str(RUNNER_CONFIG.ack_wait)),
            *("--lease-ttl", str(RUNNER_CONFIG.lease_ttl)),
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
        log.close()
        runner = Runner(process)
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        if runner.process.returncode is None:
            runner.process.kill()
            await runner.process.wait()


async def thread_turns(db: Path, thread_id: str) -> list[tuple[Role | str, str]]:
    store = SQLiteStore(db)
    try:
        thread = await store.get(thread_id)
    finally:
        await store.close()
    return [(turn.role, turn.event_id) for turn in thread.all_turns()]


async def test_a_message_of_a_killed_worker_is_answered_exactly_once_by_the_next(
    start_runner: Callable[..., Awaitable[Runner]], ore_nats_client: Client, tmp_path: Path
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    first = await start_runner(hold=-1)
    assert await first.turn_started() == "TURN t1 m-1"

    first.process.kill()  # SIGKILL: no drain, no ack
    await first.exit_code()
    second = await start_runner(hold=0)

    assert await second.turn_started() == "TURN t1 m-1"
    await raw.eventually(answered(ore_nats_client, "t1"))
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    second.process.send_signal(signal.SIGTERM)
    assert await second.exit_code() == 0
    assert await thread_turns(tmp_path / "threads.db", "t1") == [
        (Role.USER, "m-1"),
        (Role.ASSISTANT, ""),
    ]


async def test_sigterm_lets_the_running_turn_finish_and_exits_zero(
    start_runner: Callable[..., Awaitable[Runner]], ore_nats_client: Client, tmp_path: Path
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    runner = await start_runner(hold=0.5)
    await runner.turn_started()

    runner.process.send_signal(signal.SIGTERM)

    assert await runner.exit_code() == 0
    assert [e["kind"] for e in await raw.stored_events(ore_nats_client, "t1")] == TURN_KINDS
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    assert [role for role, _ in await thread_turns(tmp_path / "threads.db", "t1")] == [
        Role.USER,
        Role.ASSISTANT,
    ]
