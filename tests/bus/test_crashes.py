"""A crashed background loop of the core is logged, fails /readyz and stops the service.

Each test injects a crash into one loop of a real CoreService on a real nats-server
(the loop's method is replaced by one that raises once the test pulls the trigger),
then checks what an operator sees: the log names the task, `GET /readyz` answers 503
with the reason, the service stops by itself, and `stop()` raises the crash.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from ore_core import Manager
from ore_core.bus.cluster.ownership import Ownership
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.ingress.acks import AckBatcher
from ore_core.bus.ingress.ingress import Ingress
from ore_core.bus.ingress.puller import Puller
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.manager import _SinkRunner
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stream import Stream
from ore_core.tasks import TaskCrashed
from tests.bus import raw

# The loop, the class whose method runs it, and the start of its task's name.
LOOPS: dict[str, tuple[type[Any], str, str]] = {
    "ingress ack loop": (AckBatcher, "run", "ore-ingress-ack"),
    "ingress progress loop": (Ingress, "_progress_loop", "ore-ingress-progress"),
    "ingress closed-stream loop": (Ingress, "_closed_loop", "ore-ingress-closed"),
    "lease renewal loop": (Ownership, "_renew_loop", "ore-ownership-renew"),
    "lease balancing loop": (Ownership, "_balance_loop", "ore-ownership-balance"),
    "lease watch loop": (Ownership, "_watch", "ore-ownership-watch"),
    "puller watchdog": (Puller, "_watch", "ore-puller-"),
    "pipeline send loop": (Pipeline, "_send_loop", "ore-pipeline-send"),
    "pipeline expire loop": (Pipeline, "_expire_loop", "ore-pipeline-expire"),
    "egress sink task": (_SinkRunner, "_run", "ore-sink-ore-bus-egress"),
    "stream worker": (Stream, "_work", "ore-stream-"),
}


async def http_get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of `GET path` on the loopback health endpoint."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.fixture
async def service(ore_nats_url: str) -> AsyncIterator[CoreService]:
    """A core with a health endpoint; the test stops it (a crash makes stop() raise)."""
    core = CoreService(
        Manager(MemoryStore(), EchoProcessor()),
        servers=[ore_nats_url],
        config=BusConfig(partitions=raw.PARTITIONS),
        health_port=0,
        drain_grace=raw.TIMEOUT,
    )
    yield core
    if not core.stopped:
        with pytest.raises(TaskCrashed):
            await core.stop(grace=0)


def inject_crash(monkeypatch: pytest.MonkeyPatch, owner: type[Any], method: str) -> asyncio.Event:
    """Make `owner.method` (a loop) of the first object that runs it raise once the
    returned event is set; other objects (the other pullers) run the real loop."""
    trigger = asyncio.Event()
    original = getattr(owner, method)
    chosen: list[object] = []

    async def crash(self: object, *args: object) -> None:
        if chosen and chosen[0] is not self:
            return await original(self, *args)  # type: ignore[no-any-return]
        chosen.append(self)
        await trigger.wait()
        raise RuntimeError(f"injected crash of {owner.__name__}.{method}")

    monkeypatch.setattr(owner, method, crash)
    return trigger


@pytest.mark.parametrize("loop", list(LOOPS))
async def test_a_crashed_loop_is_logged_fails_readyz_and_stops_the_service(
    loop: str,
    service: CoreService,
    ore_nats_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner, method, task_name = LOOPS[loop]
    trigger = inject_crash(monkeypatch, owner, method)
    with capture_logs() as logs:
        await service.start()
        port = service.health_port
        assert port is not None
        assert (await http_get(port, "/readyz"))[0] == 200

        trigger.set()
        # A message, so that the lazily started loops (a stream's worker) run too.
        await raw.publish(ore_nats_client, "t-crash", raw.user_message("hi", "m-1"))
        await raw.wait_for(lambda: service.crash is not None)

        status, body = await http_get(port, "/readyz")
        assert status == 503
        assert body["status"] == "unavailable"
        assert task_name in body["reason"]
        assert "injected crash" in body["reason"]
        assert service.stop_requested  # serve_forever returns without a signal
        with pytest.raises(TaskCrashed) as raised:
            await asyncio.wait_for(service.serve_forever(), raw.TIMEOUT)
    crash = raised.value.crash
    assert crash.task.startswith(task_name)
    assert isinstance(crash.error, RuntimeError)
    assert service.stopped
    crashed = [e for e in logs if e["event"] == "background task crashed"]
    assert len(crashed) == 1
    assert crashed[0]["task"] == crash.task
    assert crashed[0]["log_level"] == "error"
    assert isinstance(crashed[0]["exc_info"], RuntimeError)
    with pytest.raises(OSError):  # the health endpoint went with the service
        await http_get(port, "/readyz")


async def test_stop_of_a_core_without_a_crash_raises_nothing(
    service: CoreService, ore_nats_client: Any
) -> None:
    await service.start()
    await raw.publish(ore_nats_client, "t-fine", raw.user_message("hi", "m-1"))
    await service.stop(grace=raw.TIMEOUT)
    assert service.crash is None
