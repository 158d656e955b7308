"""The control API (protocol.md "Control API"), called through ConduitClient and raw NATS."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER
from structlog.testing import capture_logs

from ore_core import ApiError, ConduitClient, Manager, PropertiesEvent, Role, Text, jsonutil
from ore_core.bus.api.control_api import ControlAPI
from ore_core.conduit.control import ControlClient
from ore_core.errors import ThreadCorrupt
from ore_core.ids import is_valid_thread_id
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore
from ore_core.subjects import Subjects
from ore_core.testing.processors import GatedProcessor
from tests.conduit.conftest import VERSION
from tests.session.support import collect, message

pytestmark = pytest.mark.usefixtures("control_api")

NS = "test"  # the `client` fixture's namespace
OWNED = {"ore.namespace": NS}  # metadata of a thread created in it
ADMIN_ONLY = {"threads.delete"}


def endpoint_subject(subjects: Subjects, endpoint: str) -> str:
    """`P.api.test.<endpoint>`, or `P.admin.<endpoint>` for the operator-only methods."""
    if endpoint in ADMIN_ONLY:
        return subjects.admin(endpoint)
    return subjects.api(NS, endpoint)


async def raw(nc: Client, subject: str, data: bytes) -> tuple[dict[str, str], object]:
    """Headers and decoded JSON body of the reply to a raw request."""
    reply = await nc.request(subject, data, timeout=30)
    return dict(reply.headers or {}), jsonutil.loads(reply.data)


async def api_error(call: Awaitable[object]) -> ApiError:
    """The ApiError `call` raises."""
    with pytest.raises(ApiError) as caught:
        await call
    return caught.value


# -- create / get -------------------------------------------------------------------


async def test_create_with_an_id_makes_an_empty_thread_with_its_metadata(
    client: ConduitClient,
) -> None:
    assert await client.create_thread("t-1", {"title": "hello"}) == "t-1"
    info = await client.get_thread("t-1")
    assert (info.id, info.current_tip, info.metadata, info.turns, info.namespace) == (
        "t-1",
        "",
        {"title": "hello", "ore.namespace": NS},
        0,
        NS,
    )


async def test_create_without_an_id_generates_a_valid_one(client: ConduitClient) -> None:
    assert is_valid_thread_id(await client.create_thread())


async def test_create_of_an_existing_id_is_a_409_conflict(client: ConduitClient) -> None:
    await client.create_thread("t-1")
    error = await api_error(client.create_thread("t-1"))
    assert (error.status, error.code) == (409, "conflict")
    assert "t-1" in error.message


async def test_get_reports_the_tip_and_the_number_of_turns(
    client: ConduitClient, manager: Manager
) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    await stream.process(message("hi"))
    info = await client.get_thread("t-1")
    assert info.turns == 2
    assert info.current_tip == stream.turns()[-1].id


async def test_unknown_thread_is_a_404_with_headers_and_json_body(
    ore_nats_client: Client, subjects: Subjects
) -> None:
    headers, body = await raw(ore_nats_client, subjects.api(NS, "threads.get"), b'{"id":"missing"}')
    assert headers[ERROR_CODE_HEADER] == "404"
    assert "missing" in headers[ERROR_HEADER]
    assert body == {"error": {"code": "not_found", "message": headers[ERROR_HEADER]}}


async def test_unknown_thread_raises_api_error_in_the_client(client: ConduitClient) -> None:
    error = await api_error(client.get_thread("missing"))
    assert (error.status, error.code) == (404, "not_found")
    assert "missing" in str(error)


# -- bad requests ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "data", "mentions"),
    [
        ("threads.get", b"not json", "json"),
        ("threads.get", b"[1, 2]", "object"),
        ("threads.get", b"{}", "id"),
        ("threads.get", b'{"id": "a b"}', "invalid thread id"),
        ("threads.get", b'{"id": "../etc"}', "invalid thread id"),
        ("threads.get", b'{"id": 7}', "id"),
        ("threads.create", b'{"thread_id": "t"}', "thread_id"),
        ("threads.list", b'{"limit": 0}', "limit"),
        ("threads.list", b'{"limit": 1001}', "limit"),
        ("threads.lookup", b'{"key": "", "value": "v"}', "key"),
        ("threads.meta.set", b'{"id": "t", "key": "k", "value": 1}', "value"),
    ],
)
async def test_a_malformed_request_is_a_400_naming_the_problem(
    ore_nats_client: Client, subjects: Subjects, endpoint: str, data: bytes, mentions: str
) -> None:
    headers, body = await raw(ore_nats_client, endpoint_subject(subjects, endpoint), data)
    assert headers[ERROR_CODE_HEADER] == "400"
    assert isinstance(body, dict)
    assert body["error"]["code"] == "bad_request"
    assert mentions in body["error"]["message"].lower()


async def test_an_empty_request_body_counts_as_an_empty_object(
    ore_nats_client: Client, subjects: Subjects
) -> None:
    headers, body = await raw(ore_nats_client, subjects.api(NS, "health"), b"")
    assert ERROR_CODE_HEADER not in headers
    assert body == {"status": "ok", "version": VERSION, "streams": 0}


async def test_a_request_over_the_size_limit_is_a_413(
    ore_nats_client: Client, manager: Manager
) -> None:
    small = Subjects("small")
    async with ControlAPI(ore_nats_client, manager, small, version=VERSION, max_request_bytes=64):
        headers, body = await raw(
            ore_nats_client,
            small.api(NS, "threads.create"),
            jsonutil.dumps({"metadata": {"k": "v" * 64}}),
        )
    assert headers[ERROR_CODE_HEADER] == "413"
    assert body["error"]["code"] == "too_large"  # type: ignore[index]


async def test_a_store_failure_is_a_logged_500_reply_not_a_timeout(
    client: ConduitClient, manager: Manager
) -> None:
    await manager.store.close()
    with capture_logs() as logs:
        error = await api_error(client.get_thread("t-1"))
    assert (error.status, error.code) == (500, "internal")
    [logged] = [entry for entry in logs if entry["log_level"] == "error"]
    assert logged["subject"] == "ore.api.test.threads.get"


# -- list -----------------------------------------------------------------------------


async def test_list_pages_through_every_thread_in_order(client: ConduitClient) -> None:
    for thread_id in ["c", "a", "e", "b", "d"]:
        await client.create_thread(thread_id)
    pages, after = [], None
    while True:
        page = await client.list_threads(after=after, limit=2)
        pages.append(page.threads)
        if page.next is None:
            break
        after = page.next
    assert pages == [["a", "b"], ["c", "d"], ["e"]]


async def test_list_of_an_exact_page_says_no_next_page(client: ConduitClient) -> None:
    await client.create_thread("a")
    page = await client.list_threads(limit=1)
    assert (page.threads, page.next) == (["a"], None)


# -- lookup ---------------------------------------------------------------------------


async def test_lookup_creates_once_then_finds_the_same_thread(client: ConduitClient) -> None:
    first = await client.lookup_or_create("test.thread", "C1-17", {"title": "x"})
    second = await client.lookup_or_create("test.thread", "C1-17", {"title": "ignored"})
    assert first[1] is True
    assert second == (first[0], False)
    info = await client.get_thread(first[0])
    assert info.metadata == {"test.thread": "C1-17", "title": "x", "ore.namespace": NS}


async def test_lookup_keys_start_with_the_namespace(client: ConduitClient) -> None:
    error = await api_error(client.lookup_or_create("slack.thread", "C1"))
    assert (error.status, error.code) == (400, "bad_request")
    assert "start with 'test.'" in error.message


@pytest.mark.usefixtures("streams")
async def test_threads_of_another_namespace_are_not_found_listed_or_read(
    client: ConduitClient, manager: Manager
) -> None:
    other = await manager.create_with_id("t-other", {"ore.namespace": "other"})
    await other.process(message("hi"))
    await client.create_thread("t-mine")
    error = await api_error(client.get_thread("t-other"))
    assert (error.status, error.message) == (404, "thread t-other not found in namespace test")
    assert (await client.list_threads()).threads == ["t-mine"]
    assert await client.read_events("t-other") == {"events": [], "next": None}


async def test_a_conduit_may_not_give_a_thread_another_namespace(client: ConduitClient) -> None:
    error = await api_error(client.create_thread("t-1", {"ore.namespace": "other"}))
    assert error.status == 400
    assert "ore.namespace" in error.message


async def test_the_namespace_of_a_thread_never_changes(client: ConduitClient) -> None:
    await client.create_thread("t-1")
    error = await api_error(client.set_metadata("t-1", "ore.namespace", "other"))
    assert (error.status, error.code) == (400, "bad_request")
    assert "never changes" in error.message


@pytest.fixture
async def two_workers(tmp_path: Path, ore_nats_url: str) -> AsyncIterator[list[ControlAPI]]:
    """Two ControlAPIs, each with its own connection, Manager and store on one database."""
    path = tmp_path / "threads.db"
    apis: list[ControlAPI] = []
    try:
        for worker in ("w1", "w2"):
            nc = await nats.connect(ore_nats_url)
            manager = Manager(SQLiteStore(path), EchoProcessor())
            api = ControlAPI(
                nc, manager, Subjects("race"), version=VERSION, instance_metadata={"worker": worker}
            )
            await api.start()
            apis.append(api)
        yield apis
    finally:
        for api in apis:
            await api.stop()
            await api._manager.aclose()
            await api._manager.store.close()
            await api._nc.close()


async def test_racing_lookups_on_two_workers_get_one_thread(
    two_workers: list[ControlAPI], ore_nats_url: str
) -> None:
    async with await ConduitClient.connect(ore_nats_url, name="racer", prefix="race") as racer:
        results = await asyncio.gather(*(racer.lookup_or_create("racer.k", "v") for _ in range(24)))
    assert len({thread_id for thread_id, _ in results}) == 1
    assert [created for _, created in results].count(True) == 1
    served = [api._service.stats().endpoints for api in two_workers]  # type: ignore[union-attr]
    lookups = [next(e.num_requests for e in eps if e.name == "threads_lookup") for eps in served]
    assert all(count > 0 for count in lookups), "both workers must have answered lookups"


async def test_errors_do_not_show_clients_where_the_server_keeps_its_store(
    two_workers: list[ControlAPI], ore_nats_url: str, tmp_path: Path
) -> None:
    async with await ConduitClient.connect(ore_nats_url, name="peek", prefix="race") as client:
        missing = await api_error(client.get_thread("missing"))
        await client.create_thread("t-1")
        taken = await api_error(client.create_thread("t-1"))
    for error in (missing, taken):
        assert str(tmp_path) not in error.message
        assert "t-1" in error.message or "missing" in error.message
    assert missing.message == "thread missing not found in namespace peek"


async def test_a_corrupt_thread_is_a_corrupt_thread_error_without_the_servers_file(
    two_workers: list[ControlAPI], ore_nats_url: str, tmp_path: Path
) -> None:
    outside = SQLiteStore(tmp_path / "threads.db")
    try:
        thread = await outside.create("t-1", {"ore.namespace": "peek"})
        thread.append(Role.USER, Text("x"))
        await outside.save(thread)
    finally:
        await outside.close()
    with sqlite3.connect(tmp_path / "threads.db") as db:
        db.execute("UPDATE turns SET json = 'not json' WHERE thread_id = 't-1'")
    async with await ConduitClient.connect(ore_nats_url, name="peek", prefix="race") as client:
        with capture_logs() as logs:
            error = await api_error(client.get_thread("t-1"))
    assert (error.status, error.code) == (500, "corrupt_thread")
    assert error.message == ThreadCorrupt.public_message()
    [logged] = [entry for entry in logs if entry["log_level"] == "error"]
    assert str(tmp_path / "threads.db") in logged["error"]  # the operator learns where


# -- fork / delete / turns ------------------------------------------------------------


async def test_fork_moves_the_tip_so_the_next_reply_branches(
    client: ConduitClient, manager: Manager
) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    await stream.process(message("one"))
    first_user = stream.turns()[0]
    assert await client.fork("t-1", first_user.id) == first_user.id
    await stream.process(message("two"))
    path = await client.turns("t-1")
    assert [turn.parent_id for turn in path][:2] == ["", first_user.id]
    assert (await client.get_thread("t-1")).turns == 4


async def test_fork_of_a_stored_thread_is_saved(client: ConduitClient, manager: Manager) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    await stream.process(message("one"))
    await manager.close("t-1")
    user_turn = (await manager.store.get("t-1")).turns()[0]
    await client.fork("t-1", user_turn.id)
    assert (await manager.store.get("t-1")).current_tip == user_turn.id


async def test_fork_at_no_turn_makes_the_next_message_a_new_root(
    client: ConduitClient, manager: Manager
) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    await stream.process(message("one"))
    assert await client.fork("t-1", "") == ""
    await stream.process(message("instead"))
    path = await client.turns("t-1")
    assert [turn.parent_id for turn in path] == ["", path[0].id]
    assert (await client.get_thread("t-1")).turns == 4


async def test_fork_to_an_unknown_turn_is_a_404(client: ConduitClient) -> None:
    await client.create_thread("t-1")
    error = await api_error(client.fork("t-1", "nope"))
    assert error.status == 404
    assert "nope" in error.message


async def test_fork_while_a_reply_is_written_is_a_409(
    ore_nats_client: Client, subjects: Subjects, client: ConduitClient
) -> None:
    gate = GatedProcessor()
    async with Manager(MemoryStore(), gate) as busy_manager:
        busy = Subjects("busy")
        async with ControlAPI(ore_nats_client, busy_manager, busy, version=VERSION):
            stream = await busy_manager.create_with_id("t-1")
            stream.submit(message("hi"))
            await asyncio.wait_for(gate.started.wait(), 30)
            headers, _ = await raw(
                ore_nats_client, busy.admin("threads.fork"), b'{"id":"t-1","turn_id":"x"}'
            )
            gate.release()
    assert headers[ERROR_CODE_HEADER] == "409"


async def test_delete_removes_the_thread_and_reports_whether_it_existed(
    client: ConduitClient,
) -> None:
    await client.create_thread("t-1")
    assert await ControlClient.beside(client).delete_thread("t-1") is True
    assert await ControlClient.beside(client).delete_thread("t-1") is False
    assert (await api_error(client.get_thread("t-1"))).status == 404


async def test_turns_is_the_active_path_oldest_first(
    client: ConduitClient, manager: Manager
) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    await stream.process(message("hello"))
    turns = await client.turns("t-1")
    assert [turn.role for turn in turns] == [Role.USER, Role.ASSISTANT]
    assert [turn.id for turn in turns] == [turn.id for turn in stream.turns()]


# -- metadata -------------------------------------------------------------------------


async def test_meta_set_on_an_active_thread_announces_a_properties_event(
    client: ConduitClient, manager: Manager
) -> None:
    stream = await manager.create_with_id("t-1", OWNED)
    subscription = stream.subscribe("properties")
    assert await client.set_metadata("t-1", "title", "Plans") == {"title": "Plans", **OWNED}
    [event] = await collect(subscription, until=lambda e: True)
    assert isinstance(event, PropertiesEvent)
    assert [(op.op, op.key, op.value) for op in event.operations or ()] == [
        ("set", "title", "Plans")
    ]


async def test_meta_set_on_a_stored_thread_is_saved(
    client: ConduitClient, manager: Manager
) -> None:
    await manager.create_with_id("t-1", OWNED)
    await manager.close("t-1")
    await client.set_metadata("t-1", "title", "Plans")
    assert (await manager.store.get("t-1")).meta().get("title") == "Plans"


async def test_meta_delete_removes_the_key(client: ConduitClient) -> None:
    await client.create_thread("t-1", {"a": "1", "b": "2"})
    assert await client.delete_metadata("t-1", "a") == {"b": "2", **OWNED}
    assert (await client.get_thread("t-1")).metadata == {"b": "2", **OWNED}


async def test_meta_set_on_an_unknown_thread_is_a_404(client: ConduitClient) -> None:
    assert (await api_error(client.set_metadata("missing", "k", "v"))).status == 404


# -- health and discovery -------------------------------------------------------------


async def test_health_counts_active_streams(client: ConduitClient, manager: Manager) -> None:
    await manager.create()
    assert await client.health() == {"status": "ok", "version": VERSION, "streams": 1}


async def test_srv_ping_is_answered_by_the_ore_service(ore_nats_client: Client) -> None:
    reply = await ore_nats_client.request("$SRV.PING.ore", b"", timeout=30)
    ping = jsonutil.loads(reply.data)
    assert (ping["name"], ping["version"], ping["metadata"]) == ("ore", VERSION, {"worker": "w1"})


async def test_srv_info_lists_every_endpoint_subject(
    ore_nats_client: Client, control_api: ControlAPI
) -> None:
    reply = await ore_nats_client.request("$SRV.INFO.ore", b"", timeout=30)
    info = jsonutil.loads(reply.data)
    assert {e["name"]: e["subject"] for e in info["endpoints"]} == control_api.endpoints
    assert "ore.admin.threads.meta.delete" in control_api.endpoints.values()
    assert "ore.api.*.events.read" in control_api.endpoints.values()
