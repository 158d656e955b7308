"""CoreService end to end: raw nats-py clients that know only protocol.md talk to the core."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client

from ore_core import Role
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import GatedProcessor
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

# An echo turn: the live events as they happen (one message when queued together), then
# the turn's durable events as one stored batch.
LIVE = [("lifecycle", "submitted"), ("lifecycle", "streaming"), ("text_delta", None)]
STORED_KINDS = ["turn_complete", "text", "turn_complete", "lifecycle"]


async def http_status(port: int, path: str) -> int:
    """The status code of `GET path` on the loopback health endpoint."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def test_raw_client_receives_the_documented_events_of_an_echo_turn_in_order(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hello", "m-1"))

    events = await outbox.done("t1")

    assert [(e["kind"], e.get("phase")) for e in events] == [
        *LIVE,
        ("turn_complete", None),
        ("text", None),
        ("turn_complete", None),
        ("lifecycle", "done"),
    ]
    user, assistant = events[3]["turn"], events[5]["turn"]
    assert (user["role"], user["metadata"]) == ("user", {"event_id": "m-1"})
    assert (assistant["role"], assistant["parent_id"]) == ("assistant", user["id"])
    assert events[4]["content"] == "hello"
    assert [e["content"] for e in events if e["kind"] == "text_delta"] == ["hello"]
    assert all(e["context"] == {"provenance": "raw"} for e in events)


async def test_a_turn_is_one_live_message_and_one_stored_batch_ending_with_done(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hello", "m-1"))
    await outbox.done("t1")

    live, stored = outbox.messages["t1"]
    assert "Nats-Sequence" not in (live.headers or {})
    assert [(e["kind"], e.get("phase")) for e in raw.unpack(live.data)] == LIVE
    assert [e["kind"] for e in raw.unpack(stored.data)] == STORED_KINDS
    assert await raw.stored_messages(ore_nats_client, "t1") == [raw.unpack(stored.data)]


async def test_every_output_message_names_its_kind_and_schema_in_headers(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await outbox.done("t1")

    for msg in outbox.messages["t1"]:
        assert msg.headers is not None
        assert msg.headers["Ore-Kind"] == json.loads(msg.data)["kind"]
        assert msg.headers["Ore-Schema"] == "2"


async def test_many_threads_are_answered_concurrently_each_in_order(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    threads = [f"th-{n}" for n in range(20)]
    per_thread = 5

    async def converse(thread_id: str) -> None:
        for m in range(per_thread):
            await raw.publish(
                ore_nats_client, thread_id, raw.user_message(f"{thread_id} {m}", f"{thread_id}-{m}")
            )

    await asyncio.gather(*(converse(t) for t in threads))
    for thread_id in threads:
        events = await outbox.done(thread_id, count=per_thread)
        texts = [e["content"] for e in events if e["kind"] == "text"]
        assert texts == [f"{thread_id} {m}" for m in range(per_thread)]


async def test_stored_events_chain_nats_last_sequence_per_thread(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    for n in range(3):
        await raw.publish(ore_nats_client, "a", raw.user_message(f"a{n}", f"a-{n}"))
        await raw.publish(ore_nats_client, "b", raw.user_message(f"b{n}", f"b-{n}"))
    await outbox.done("a", count=3)
    await outbox.done("b", count=3)

    for thread_id in ("a", "b"):
        previous = 0
        for msg in outbox.stored(thread_id):
            assert msg.headers is not None
            assert int(msg.headers["Nats-Last-Sequence"]) == previous
            previous = int(msg.headers["Nats-Sequence"])


async def test_traceparent_header_reaches_every_output_event_of_the_turn(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    await raw.publish(
        ore_nats_client, "t1", raw.user_message("hi", "m-1"), headers={"traceparent": traceparent}
    )
    await outbox.done("t1")

    for msg in outbox.messages["t1"]:
        assert (msg.headers or {}).get("traceparent") == traceparent


async def test_control_api_answers_next_to_the_ingress(
    core: CoreService, ore_nats_client: Client
) -> None:
    reply = await ore_nats_client.request("ore.api.raw.health", b"{}", timeout=30)

    assert json.loads(reply.data)["status"] == "ok"


async def test_health_endpoint_is_ready_while_serving(start_core: CoreFactory) -> None:
    service = await start_core(health_port=0)
    assert service.health_port

    assert await http_status(service.health_port, "/healthz") == 200
    assert await http_status(service.health_port, "/readyz") == 200
    assert await http_status(service.health_port, "/nope") == 404


async def test_health_endpoint_reports_unavailable_while_nats_is_down(
    start_core: CoreFactory, ore_nats_server: EmbeddedNatsServer
) -> None:
    service = await start_core(health_port=0)
    port = service.health_port
    assert port

    await ore_nats_server.astop()
    try:
        await raw.wait_for(lambda: not service.nc.is_connected)
        assert await http_status(port, "/healthz") == 503
        assert await http_status(port, "/readyz") == 503
    finally:
        await ore_nats_server.astart()


async def test_stop_lets_a_running_turn_finish_and_acknowledges_it(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    processor = GatedProcessor()
    service = await start_core(processor)
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await asyncio.wait_for(processor.started.wait(), 10)

    stopping = asyncio.ensure_future(service.stop(grace=10))
    await raw.wait_for(lambda: not service.ready)
    assert not stopping.done()
    processor.release()
    await asyncio.wait_for(stopping, 10)

    assert outbox.count_done("t1") == 1
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))


async def test_stop_after_the_grace_period_leaves_the_turn_to_the_next_worker(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, store: MemoryStore
) -> None:
    processor = GatedProcessor()
    first = await start_core(processor)
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await asyncio.wait_for(processor.started.wait(), 10)

    await first.stop(grace=0.05)
    await start_core()
    await outbox.until(
        lambda: any(e["kind"] == "text" and e["content"] == "hi" for e in outbox.events("t1"))
    )

    thread = await store.get("t1")
    assert [t.role for t in thread.all_turns()] == [Role.USER, Role.ASSISTANT]
    assert processor.cancelled == 1
    # The message was not over when the first core stopped: conduits see one `done`, the
    # answer's, and no `cancelled` (a Slack conduit showed "(interrupted)" for it, then
    # skipped the real answer as a repeat).
    phases = [e["phase"] for e in outbox.events("t1") if e["kind"] == "lifecycle"]
    assert phases.count("done") == 1
    assert "cancelled" not in phases
    assert phases[-1] == "done"
