"""Conduit isolation (issue 12): conduit A's credentials reach A's threads and nothing else.

One deployment for the module, built the way an operator builds it: `ore auth`
writes the users (core, admin, conduits `alpha` and `beta`), a real nats-server runs
with that `authorization` block on a free loopback port, the core connects as `ore`,
each conduit with its own generated settings file. Conduit `beta` holds a
conversation; every probe runs as `alpha` against it and must be refused, one test
per probe (the test count is the probe count), while alpha's own conversation keeps
working and the admin can still use the whole control API.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.errors import NotFoundError

from ore_core import ApiError, ConduitClient, Manager, PermissionDenied
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.cli.auth import write_auth
from ore_core.conduit import ControlClient, NatsCredentials
from ore_core.conduit.client import message_id
from ore_core.files import Attachment, FileMissing
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from ore_core.turn import turn_from_dict

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUBJECTS = Subjects()
TIMEOUT = 10.0


@dataclass
class Deployment:
    """A secured server, its core, both conduits, an admin and beta's conversation."""

    url: str
    core: Client  # the core's own connection (user `ore`): to inspect streams
    alpha: ConduitClient
    beta: ConduitClient
    admin: ConduitClient
    beta_thread: str
    beta_secret: str
    settings: dict[str, dict[str, Any]]


def nats_table(path: Path) -> dict[str, Any]:
    return dict(tomllib.loads(path.read_text(encoding="utf-8"))["nats"])


async def connect(
    url: str, name: str, nats_settings: dict[str, Any], **extra: Any
) -> ConduitClient:
    """A client with exactly what `ore auth` wrote for it."""
    return await ConduitClient.connect(
        url,
        name=name,
        namespace=nats_settings.get("namespace"),
        secret=nats_settings.get("secret"),
        credentials=NatsCredentials(
            user=nats_settings.get("user"),
            password=nats_settings.get("password"),
            nkey_seed=nats_settings.get("nkey_seed_file"),
        ),
        request_timeout=TIMEOUT,
        **extra,
    )


async def converse(client: ConduitClient, thread: str, text: str, msg_id: str) -> list[Any]:
    """Send `text` and return the events of the thread up to its `lifecycle: done`."""
    events = []
    async with client.events(thread) as feed:
        sent = await client.send(thread, text, id=msg_id)
        assert not sent.duplicate
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                events.append(delivery.event)
                if delivery.kind == "lifecycle" and delivery.event.phase == "done":
                    return events
    raise AssertionError("feed ended before done")


def texts(events: list[Any]) -> list[str]:
    return [e.artifact.content for e in events if e.kind == "text"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployment]:
    base = tmp_path_factory.mktemp("isolation")
    files = write_auth(
        base / "auth",
        [("alpha", "alpha"), ("beta", "beta")],
        subjects=SUBJECTS,
        urls=[],
    )
    settings = {
        "core": nats_table(files.core),
        "admin": nats_table(files.admin),
        **{name: nats_table(path) for name, path in files.conduits.items()},
    }
    server_config = files.server_config.read_text(encoding="utf-8")
    async with EmbeddedNatsServer(base / "nats", config=server_config) as server:
        core_creds = settings["core"]
        core = await nats.connect(
            server.url, user=core_creds["user"], password=core_creds["password"]
        )
        async with Manager(MemoryStore(), EchoProcessor()) as manager:
            service = CoreService(
                manager,
                servers=[server.url],
                config=BusConfig(partitions=2),
                credentials=NatsCredentials(
                    user=core_creds["user"], password=core_creds["password"]
                ),
            )
            await service.start()
            alpha = await connect(server.url, "alpha", settings["alpha"])
            beta = await connect(server.url, "beta", settings["beta"])
            admin = await connect(server.url, "admin", settings["admin"], inbox_prefix="_INBOX")
            try:
                beta_thread, _ = await beta.lookup_or_create("beta.channel", "C-secret")
                reply = await converse(beta, beta_thread, "beta's secret plan", "b-1")
                assert texts(reply) == ["beta's secret plan"]
                yield Deployment(
                    server.url,
                    core,
                    alpha,
                    beta,
                    admin,
                    beta_thread,
                    str(settings["beta"]["secret"]),
                    settings,
                )
            finally:
                for client in (alpha, beta, admin):
                    await client.close()
                await service.stop(grace=0)
                await core.close()


# -- probes: each must be refused -------------------------------------------------------


async def refused_subscription(client: ConduitClient, subject: str) -> None:
    """Subscribe to `subject` as `client`; the server must refuse it."""
    loop = asyncio.get_running_loop()
    refusal: asyncio.Future[PermissionDenied] = loop.create_future()

    def on_refused(error: PermissionDenied) -> None:
        if not refusal.done():
            refusal.set_result(error)

    unwatch = client.permissions.watch_subscription(subject, on_refused)
    received: list[bytes] = []

    async def on_message(msg: Any) -> None:
        received.append(msg.data)

    try:
        sub = await client.nc.subscribe(subject, cb=on_message)
        await client.nc.flush()
        error = await asyncio.wait_for(refusal, TIMEOUT)
        await sub.unsubscribe()
    finally:
        unwatch()
    assert error.action == "subscribe to"
    assert received == []


async def refused_request(client: ConduitClient, subject: str, data: bytes = b"") -> None:
    """Request on `subject` as `client`; the server must refuse the publish at once."""
    with pytest.raises(PermissionDenied) as denied:
        await client.permissions.guard(subject, client.nc.request(subject, data, timeout=TIMEOUT))
    assert denied.value.subject == subject


SUBSCRIPTIONS = {
    "beta's live output": lambda d: SUBJECTS.output("beta", d.beta_thread),
    "beta's whole namespace": lambda d: "ore.out.beta.>",
    "every output": lambda d: "ore.out.>",
    "stored events": lambda d: "ore.ev.>",
    "beta's ingress": lambda d: "ore.in.beta.>",
    "the shared inbox": lambda d: "_INBOX.>",
    "beta's inbox": lambda d: "_INBOX_beta.>",
    "every control-API request": lambda d: "ore.api.>",
    "beta's control-API requests": lambda d: "ore.api.beta.>",
    "admin requests": lambda d: "ore.admin.>",
    "dead letters": lambda d: "ore.dlq.>",
    "JetStream advisories": lambda d: "$JS.EVENT.>",
    "uploads as they are written": lambda d: "$O.ORE_FILES.>",
    "everything": lambda d: ">",
}


@pytest.mark.parametrize("subject_of", SUBSCRIPTIONS.values(), ids=SUBSCRIPTIONS.keys())
async def test_alpha_may_not_subscribe_to(
    deployment: Deployment, subject_of: Callable[[Deployment], str]
) -> None:
    await refused_subscription(deployment.alpha, subject_of(deployment))


def _direct_get(d: Deployment) -> tuple[str, bytes]:
    return "$JS.API.DIRECT.GET.ORE_EVENTS", json.dumps(
        {"last_by_subj": SUBJECTS.events("beta", d.beta_thread)}
    ).encode()


JETSTREAM_API = {
    "read one stored event (MSG.GET)": lambda d: (
        "$JS.API.STREAM.MSG.GET.ORE_EVENTS",
        json.dumps({"last_by_subj": SUBJECTS.events("beta", d.beta_thread)}).encode(),
    ),
    "read one stored event (DIRECT.GET)": _direct_get,
    "direct get by subject": lambda d: (
        f"$JS.API.DIRECT.GET.ORE_EVENTS.{SUBJECTS.events('beta', d.beta_thread)}",
        b"",
    ),
    "a consumer on beta's events": lambda d: (
        f"$JS.API.CONSUMER.CREATE.ORE_EVENTS.spy.{SUBJECTS.events('beta', d.beta_thread)}",
        b"{}",
    ),
    "a durable consumer on ORE_EVENTS": lambda d: (
        "$JS.API.CONSUMER.DURABLE.CREATE.ORE_EVENTS.spy",
        b"{}",
    ),
    "a consumer on ORE_IN": lambda d: ("$JS.API.CONSUMER.CREATE.ORE_IN.spy", b"{}"),
    "pull the core's ingress consumer": lambda d: (
        "$JS.API.CONSUMER.MSG.NEXT.ORE_IN.ore-core-p0",
        b'{"batch":1}',
    ),
    "stream info": lambda d: ("$JS.API.STREAM.INFO.ORE_EVENTS", b""),
    "list streams": lambda d: ("$JS.API.STREAM.LIST", b""),
    "purge ORE_EVENTS": lambda d: ("$JS.API.STREAM.PURGE.ORE_EVENTS", b""),
    "purge beta's events": lambda d: (
        "$JS.API.STREAM.PURGE.ORE_EVENTS",
        json.dumps({"filter": SUBJECTS.events("beta", d.beta_thread)}).encode(),
    ),
    "delete ORE_IN": lambda d: ("$JS.API.STREAM.DELETE.ORE_IN", b""),
    "delete a stored event": lambda d: ("$JS.API.STREAM.MSG.DELETE.ORE_EVENTS", b'{"seq":1}'),
    "delete the core's consumer": lambda d: (
        "$JS.API.CONSUMER.DELETE.ORE_IN.ore-core-p0",
        b"",
    ),
    "read the cursor bucket": lambda d: ("$JS.API.DIRECT.GET.KV_ORE_CURSORS", b"{}"),
    "read the store's thread bucket": lambda d: ("$JS.API.DIRECT.GET.KV_ORE_THREADS", b"{}"),
    "read beta's journal": lambda d: (
        f"$JS.API.DIRECT.GET.ORE_JOURNAL.{SUBJECTS.journal(d.beta_thread)}",
        b"",
    ),
    "purge the store's journal": lambda d: ("$JS.API.STREAM.PURGE.ORE_JOURNAL", b""),
    "service discovery": lambda d: ("$SRV.INFO.ore", b""),
    "list the files (stream info by subject)": lambda d: (
        "$JS.API.STREAM.INFO.OBJ_ORE_FILES",
        b'{"subjects_filter":"$O.ORE_FILES.M.>"}',
    ),
    "read a file's description by sequence": lambda d: (
        "$JS.API.STREAM.MSG.GET.OBJ_ORE_FILES",
        b'{"seq":1}',
    ),
    "direct get of the files by sequence": lambda d: (
        "$JS.API.DIRECT.GET.OBJ_ORE_FILES",
        b'{"seq":1}',
    ),
    "a consumer on every file's description": lambda d: (
        "$JS.API.CONSUMER.CREATE.OBJ_ORE_FILES.spy.$O.ORE_FILES.M.>",
        b"{}",
    ),
    "a consumer on every chunk": lambda d: (
        "$JS.API.CONSUMER.CREATE.OBJ_ORE_FILES.spy.$O.ORE_FILES.C.>",
        b"{}",
    ),
    "an unnamed consumer on the files": lambda d: ("$JS.API.CONSUMER.CREATE.OBJ_ORE_FILES", b"{}"),
    "purge the files": lambda d: ("$JS.API.STREAM.PURGE.OBJ_ORE_FILES", b""),
    "delete a file's message": lambda d: (
        "$JS.API.STREAM.MSG.DELETE.OBJ_ORE_FILES",
        b'{"seq":1}',
    ),
    "delete the files bucket": lambda d: ("$JS.API.STREAM.DELETE.OBJ_ORE_FILES", b""),
}


@pytest.mark.parametrize("request_of", JETSTREAM_API.values(), ids=JETSTREAM_API.keys())
async def test_alpha_may_not_use_the_jetstream_api_for(
    deployment: Deployment, request_of: Callable[[Deployment], tuple[str, bytes]]
) -> None:
    subject, data = request_of(deployment)
    await refused_request(deployment.alpha, subject, data)


WRITES = {
    "a user message on beta's subject": lambda d: (
        SUBJECTS.inbound("beta", d.beta_thread),
        json.dumps({"kind": "user_message", "id": "a-1", "content": "hi"}).encode(),
    ),
    "an interrupt on beta's subject": lambda d: (
        SUBJECTS.inbound("beta", d.beta_thread),
        json.dumps({"kind": "interrupt", "id": "a-2"}).encode(),
    ),
    "a forged stored event for beta": lambda d: (SUBJECTS.events("beta", d.beta_thread), b"{}"),
    "a forged stored event for itself": lambda d: (SUBJECTS.events("alpha", "t-a"), b"{}"),
    "forged live output for beta": lambda d: (SUBJECTS.output("beta", d.beta_thread), b"{}"),
    "a dead letter": lambda d: (SUBJECTS.dlq("bad_json"), b"{}"),
    "beta's control API": lambda d: (
        SUBJECTS.api("beta", "events.read"),
        json.dumps({"thread": d.beta_thread}).encode(),
    ),
    "the journal": lambda d: (SUBJECTS.journal(d.beta_thread), b"{}"),
    "the store's thread bucket": lambda d: (f"$KV.ORE_THREADS.t.{d.beta_thread}", b"{}"),
}


@pytest.mark.parametrize("write_of", WRITES.values(), ids=WRITES.keys())
async def test_alpha_may_not_publish(
    deployment: Deployment, write_of: Callable[[Deployment], tuple[str, bytes]]
) -> None:
    subject, data = write_of(deployment)
    alpha = deployment.alpha
    with pytest.raises(PermissionDenied):
        await alpha.permissions.guard(
            subject, alpha.nc.jetstream().publish(subject, data, timeout=TIMEOUT)
        )


ADMIN_CALLS: dict[str, Callable[[ConduitClient, str], Awaitable[object]]] = {
    "threads.delete": lambda c, t: ControlClient.beside(c).delete_thread(t),
    "threads.turns (any namespace)": lambda c, t: ControlClient.beside(c).call(
        "threads.turns", {"id": t}
    ),
    "threads.meta.set (any namespace)": lambda c, t: ControlClient.beside(c).call(
        "threads.meta.set", {"id": t, "key": "title", "value": "pwned"}
    ),
    "threads.meta.delete (any namespace)": lambda c, t: ControlClient.beside(c).call(
        "threads.meta.delete", {"id": t, "key": "beta.channel"}
    ),
    "threads.fork (any namespace)": lambda c, t: ControlClient.beside(c).call(
        "threads.fork", {"id": t, "turn_id": ""}
    ),
    "threads.get (any namespace)": lambda c, t: ControlClient.beside(c).get_thread(t),
    "threads.list (every namespace)": lambda c, t: ControlClient.beside(c).call("threads.list", {}),
    "threads.create (in beta)": lambda c, t: ControlClient.beside(c).call(
        "threads.create", {"namespace": "beta"}
    ),
    "links.add (link itself to beta's thread)": lambda c, t: ControlClient.beside(c).call(
        "links.add",
        {"thread": t, "endpoint": {"namespace": "alpha", "key": "alpha.room", "value": "x"}},
    ),
    "links.list": lambda c, t: ControlClient.beside(c).call("links.list", {}),
    "links.remove": lambda c, t: ControlClient.beside(c).call(
        "links.remove", {"endpoint": {"namespace": "beta", "key": "beta.channel", "value": "x"}}
    ),
}


@pytest.mark.parametrize("call", ADMIN_CALLS.values(), ids=ADMIN_CALLS.keys())
async def test_alpha_may_not_call_the_admin_api(
    deployment: Deployment, call: Callable[[ConduitClient, str], Awaitable[object]]
) -> None:
    with pytest.raises(PermissionDenied, match=r"ore\.admin\."):
        await call(deployment.alpha, deployment.beta_thread)


# -- probes the core answers: a foreign thread looks exactly like an unknown one -------


async def test_alpha_cannot_get_beta_s_thread_it_is_unknown(deployment: Deployment) -> None:
    with pytest.raises(ApiError) as foreign:
        await deployment.alpha.get_thread(deployment.beta_thread)
    with pytest.raises(ApiError) as unknown:
        await deployment.alpha.get_thread("no-such-thread")
    assert (foreign.value.status, foreign.value.code) == (unknown.value.status, "not_found")
    assert foreign.value.message.replace(deployment.beta_thread, "T") == (
        unknown.value.message.replace("no-such-thread", "T")
    )


OWN_THREAD_CALLS: dict[str, Callable[[ConduitClient, str], Awaitable[object]]] = {
    "threads.turns": lambda c, t: c.turns(t),
    "threads.fork": lambda c, t: c.fork(t, ""),
    "threads.meta.set": lambda c, t: c.set_metadata(t, "title", "pwned"),
    "threads.meta.delete": lambda c, t: c.delete_metadata(t, "beta.channel"),
}


@pytest.mark.parametrize("call", OWN_THREAD_CALLS.values(), ids=OWN_THREAD_CALLS.keys())
async def test_alpha_s_own_thread_methods_do_not_reach_beta_s_thread(
    deployment: Deployment, call: Callable[[ConduitClient, str], Awaitable[object]]
) -> None:
    with pytest.raises(ApiError) as foreign:
        await call(deployment.alpha, deployment.beta_thread)
    assert (foreign.value.status, foreign.value.message) == (
        404,
        f"thread {deployment.beta_thread} not found in namespace alpha",
    )
    info = await ControlClient.beside(deployment.admin).get_thread(deployment.beta_thread)
    assert "title" not in info.metadata
    assert info.metadata["beta.channel"] == "C-secret"


async def test_alpha_reads_no_events_of_beta_s_thread_through_its_api(
    deployment: Deployment,
) -> None:
    foreign = await deployment.alpha.read_events(deployment.beta_thread)
    unknown = await deployment.alpha.read_events("no-such-thread")
    assert foreign == unknown == {"events": [], "next": None}
    assert (await deployment.alpha.read_events(deployment.beta_thread, limit=0))["last"] == 0


async def test_alpha_does_not_list_beta_s_threads(deployment: Deployment) -> None:
    page = await deployment.alpha.list_threads()
    assert deployment.beta_thread not in page.threads


async def test_alpha_cannot_look_up_or_take_beta_s_lookup_keys(deployment: Deployment) -> None:
    with pytest.raises(ApiError) as refused:
        await deployment.alpha.lookup_or_create("beta.channel", "C-secret")
    assert refused.value.status == 400
    assert "start with 'alpha.'" in refused.value.message


async def test_alpha_cannot_create_a_thread_in_beta_s_namespace(deployment: Deployment) -> None:
    with pytest.raises(ApiError) as refused:
        await deployment.alpha.create_thread(metadata={"ore.namespace": "beta"})
    assert refused.value.status == 400


async def test_alpha_cannot_create_a_thread_with_beta_s_thread_id(deployment: Deployment) -> None:
    with pytest.raises(ApiError) as refused:
        await deployment.alpha.create_thread(deployment.beta_thread)
    assert refused.value.status == 409  # the id is taken; nothing of beta's is shown
    assert refused.value.message == (
        f"thread id {deployment.beta_thread} cannot be used in namespace alpha: pick another"
    )
    assert "exists" not in str(refused.value)


async def test_alpha_reads_its_own_cursor_never_beta_s(deployment: Deployment) -> None:
    async with deployment.beta.events(durable="beta-bot"):
        pass  # beta's durable now has a cursor
    reply = await deployment.alpha._call("cursors.get", {"name": "beta-bot"})
    assert reply["sequence"] is None


async def dead_letter(core: Client, reason: str) -> dict[str, Any]:
    js = core.jetstream()
    async with asyncio.timeout(TIMEOUT):
        while True:
            try:
                msg = await js.get_last_msg("ORE_DLQ", SUBJECTS.dlq(reason))
                return dict(json.loads(msg.data or b"{}"))
            except NotFoundError:
                await asyncio.sleep(0.05)


async def rejected(
    client: ConduitClient, thread: str, send: Callable[[], Awaitable[object]]
) -> Any:
    """Run `send` and return the `error` event it gets on the sender's own subject."""
    async with client.events(thread) as feed:
        await send()
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                if delivery.kind == "error":
                    return delivery.event
    raise AssertionError("no error event")


async def test_a_user_message_to_beta_s_thread_on_alpha_s_subject_is_an_unknown_thread(
    deployment: Deployment,
) -> None:
    d = deployment
    before = (await ControlClient.beside(d.admin).get_thread(d.beta_thread)).turns
    error = await rejected(
        d.alpha, d.beta_thread, lambda: d.alpha.send(d.beta_thread, "let me in", id="a-in")
    )
    assert error.code == "unknown_thread"
    assert f"thread {d.beta_thread} does not exist in namespace alpha" in error.message
    record = await dead_letter(d.core, "unknown_thread")
    assert record["subject"] == SUBJECTS.inbound("alpha", d.beta_thread)
    assert (await ControlClient.beside(d.admin).get_thread(d.beta_thread)).turns == before


async def test_an_interrupt_to_beta_s_thread_on_alpha_s_subject_is_an_unknown_thread(
    deployment: Deployment,
) -> None:
    d = deployment
    error = await rejected(d.alpha, d.beta_thread, lambda: d.alpha.interrupt(d.beta_thread))
    unknown = await rejected(d.alpha, "never-made", lambda: d.alpha.interrupt("never-made"))
    assert error.code == unknown.code == "unknown_thread"
    assert error.message.replace(d.beta_thread, "T") == unknown.message.replace("never-made", "T")


async def test_a_payload_claiming_beta_s_identity_is_rejected(deployment: Deployment) -> None:
    d = deployment
    forged = json.dumps(
        {
            "kind": "user_message",
            "id": "a-forged",
            "content": "I am beta",
            "context": {"provenance": "beta", "user": "U-beta"},
        }
    ).encode()
    subject = SUBJECTS.inbound("alpha", "alpha-forge")
    error = await rejected(
        d.alpha, "alpha-forge", lambda: d.alpha.nc.jetstream().publish(subject, forged)
    )
    assert error.code == "identity"
    assert "does not match the namespace 'alpha'" in error.message
    record = await dead_letter(d.core, "identity")
    assert record["namespace"] == "alpha"


async def test_alpha_cannot_squat_beta_s_message_ids(deployment: Deployment) -> None:
    d = deployment
    js = d.alpha.nc.jetstream()
    squat = json.dumps({"kind": "user_message", "id": "b-2", "content": "squat"}).encode()
    # Every id alpha can compute for beta's next message: plain, thread-scoped, keyed
    # with alpha's own secret. Published first, on the only subject alpha may use.
    for guess in (
        "b-2",
        f"{d.beta_thread}:b-2",
        message_id("beta", d.beta_thread, "b-2", d.settings["alpha"]["secret"]),
    ):
        await js.publish(
            SUBJECTS.inbound("alpha", "alpha-squat"), squat, headers={"Nats-Msg-Id": guess}
        )
    reply = await converse(d.beta, d.beta_thread, "beta's second message", "b-2")
    assert texts(reply) == ["beta's second message"]


# -- what still works -------------------------------------------------------------------


async def test_alpha_s_own_conversation_keeps_working(deployment: Deployment) -> None:
    alpha = deployment.alpha
    thread, created = await alpha.lookup_or_create("alpha.channel", "C-1")
    assert created
    assert texts(await converse(alpha, thread, "hello from alpha", "a-ok-1")) == [
        "hello from alpha"
    ]
    assert (await alpha.get_thread(thread)).namespace == "alpha"
    assert thread in (await alpha.list_threads()).threads
    page = await alpha.read_events(thread)
    assert [e["thread"] for e in page["events"]] == [thread] * len(page["events"])
    stored = [  # each stored message is a batch: the durable events of one turn
        event["kind"] for entry in page["events"] for event in entry["event"]["events"]
    ]
    assert all(entry["kind"] == "batch" for entry in page["events"])
    assert "text" in stored
    # A durable feed is kept by the core: what arrives while alpha is away comes later.
    async with alpha.events(thread, durable="alpha-bot"):
        pass
    await converse(alpha, thread, "while the durable was closed", "a-ok-2")
    async with alpha.events(thread, durable="alpha-bot", kinds={"text"}) as feed:
        delivery = await asyncio.wait_for(anext(feed), TIMEOUT)
    assert texts([delivery.event]) == ["while the durable was closed"]


async def test_the_admin_can_use_the_whole_control_api(deployment: Deployment) -> None:
    d = deployment
    admin, thread = d.admin, d.beta_thread
    info = await ControlClient.beside(admin).get_thread(thread)
    assert info.namespace == "beta"
    turns = [
        turn_from_dict(t)
        for t in (await ControlClient.beside(admin).call("threads.turns", {"id": thread}))["turns"]
    ]
    assert [t.role.value for t in turns][:2] == ["user", "assistant"]
    meta_set = {"id": thread, "key": "title", "value": "plan"}
    assert (await ControlClient.beside(admin).call("threads.meta.set", meta_set))["metadata"][
        "title"
    ] == "plan"
    meta_delete = {"id": thread, "key": "title"}
    assert (
        "title"
        not in (await ControlClient.beside(admin).call("threads.meta.delete", meta_delete))[
            "metadata"
        ]
    )
    fork = {"id": thread, "turn_id": turns[0].id}
    assert (await ControlClient.beside(admin).call("threads.fork", fork))["current_tip"] == turns[
        0
    ].id
    listed = await ControlClient.beside(admin).call("threads.list", {"limit": 1000})
    assert thread in listed["threads"]
    assert (await ControlClient.beside(admin).call("threads.list", {"namespace": "alpha"}))[
        "threads"
    ]
    made = await ControlClient.beside(admin).call(
        "threads.create", {"namespace": "beta", "id": "by-admin"}
    )
    assert made["id"] == "by-admin"
    assert (await d.beta.get_thread("by-admin")).namespace == "beta"
    found = await ControlClient.beside(admin).call(
        "threads.lookup", {"key": "beta.channel", "value": "C-secret"}
    )
    assert found == {"id": thread, "created": False}
    with pytest.raises(ApiError, match="never changes"):
        await ControlClient.beside(admin).call(
            "threads.meta.set", {"id": thread, "key": "ore.namespace", "value": "alpha"}
        )
    # Admins may also call any namespace's conduit API (a support tool reading beta's events).
    beta_view = ConduitClient(admin.nc, name="admin", namespace="beta")
    assert (await beta_view.read_events(thread))["events"]
    assert (await ControlClient.beside(admin).call("health", {}))["status"] == "ok"
    assert await ControlClient.beside(admin).delete_thread("by-admin") is True


# -- links (issue 29): an operator's link reaches one thread, nothing more ------------


async def test_alpha_has_no_method_that_writes_links(deployment: Deployment) -> None:
    body = {
        "thread": deployment.beta_thread,
        "endpoint": {"namespace": "alpha", "key": "alpha.room", "value": "x"},
    }
    nc = deployment.alpha.nc
    for method in ("links.add", "links.remove"):  # nothing answers: no such method
        with pytest.raises(NoRespondersError):
            await nc.request(SUBJECTS.api("alpha", method), json.dumps(body).encode())


async def test_a_linked_alpha_reaches_the_linked_thread_and_still_not_beta_s_other_one(
    deployment: Deployment,
) -> None:
    d = deployment
    await ControlClient.beside(d.admin).call(
        "threads.create", {"namespace": "beta", "id": "beta-shared"}
    )
    room = {"namespace": "alpha", "key": "alpha.room", "value": "R-shared"}
    await ControlClient.beside(d.admin).call(
        "links.add", {"thread": "beta-shared", "endpoint": room}
    )
    try:
        found, created = await d.alpha.lookup_or_create("alpha.room", "R-shared")
        assert (found, created) == ("beta-shared", False)
        assert (await d.alpha.get_thread("beta-shared")).namespace == "beta"
        with pytest.raises(ApiError) as foreign:
            await d.alpha.get_thread(d.beta_thread)
        assert foreign.value.code == "not_found"
        assert (await d.alpha.read_events(d.beta_thread))["events"] == []
        error = await rejected(
            d.alpha, d.beta_thread, lambda: d.alpha.send(d.beta_thread, "via link?", id="a-l1")
        )
        assert error.code == "unknown_thread"
    finally:
        await ControlClient.beside(d.admin).call("links.remove", {"endpoint": room})


# -- files (issue 39): a conduit writes its uploads and reads through the core ------------


async def send_file(client: ConduitClient, thread: str, data: bytes, name: str) -> Attachment:
    """Upload `data` as `client` and send it in `thread`; wait for its turn."""
    attachment = await client.upload(data, name, "text/plain")
    async with client.events(thread) as feed:
        await client.send(thread, f"here is {name}", attachments=[attachment])
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                if delivery.kind == "lifecycle" and delivery.event.phase == "done":
                    return attachment
    raise AssertionError("feed ended before done")


async def test_alpha_uploads_and_fetches_a_file_of_its_own_thread(
    deployment: Deployment,
) -> None:
    alpha = deployment.alpha
    thread, _ = await alpha.lookup_or_create("alpha.files", "own")
    attachment = await send_file(alpha, thread, b"alpha's notes " * 20_000, "notes.txt")
    assert await alpha.fetch(thread, attachment) == b"alpha's notes " * 20_000


async def test_alpha_cannot_fetch_a_file_of_beta_s_thread(deployment: Deployment) -> None:
    secret = await send_file(deployment.beta, deployment.beta_thread, b"beta's plan", "plan.txt")
    alpha = deployment.alpha
    with pytest.raises(FileMissing, match="not found in namespace alpha"):
        await alpha.fetch(deployment.beta_thread, secret)
    thread, _ = await alpha.lookup_or_create("alpha.files", "borrow")
    with pytest.raises(FileMissing, match="no file"):
        await alpha.fetch(thread, secret)


async def test_alpha_cannot_have_a_file_sent_to_beta_s_inbox(deployment: Deployment) -> None:
    alpha = deployment.alpha
    thread, _ = await alpha.lookup_or_create("alpha.files", "inbox")
    attachment = await send_file(alpha, thread, b"to beta?", "x.txt")
    body = {"thread": thread, "sha256": attachment.sha256, "inbox": "_INBOX_beta.x"}
    reply = await alpha.nc.request(
        SUBJECTS.api("alpha", "files.read"), json.dumps(body).encode(), timeout=TIMEOUT
    )
    assert json.loads(reply.data)["error"]["code"] == "bad_inbox"
