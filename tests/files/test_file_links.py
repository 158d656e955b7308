"""Signed, expiring file links (issue 39): a real core on a real nats-server signs a
link to a file of a thread the asking conduit reaches, and reads a file by a token only
while the token is its own and unexpired."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from ore_core import ConduitClient, Manager
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.errors import ApiError
from ore_core.files import Attachment
from ore_core.files.links import FileLinks
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects

pytestmark = pytest.mark.asyncio

BASE = "https://chat.example.com/files/link"
SECRET = "links-test-secret"
TIMEOUT = 20.0
PDF = b"%PDF-1.7 " + bytes(range(256)) * 800

StartCore = Callable[..., Awaitable[CoreService]]
Connect = Callable[[str], Awaitable[ConduitClient]]


@pytest_asyncio.fixture
async def core(ore_nats_url: str) -> AsyncIterator[StartCore]:
    """`await core(link_base, link_secret)`: a started core; stopped after the test."""
    started: list[CoreService] = []

    async def start(base: str = BASE, secret: str = SECRET) -> CoreService:
        config = BusConfig(partitions=1, files_link_base=base, files_link_secret=secret)
        service = CoreService(
            Manager(MemoryStore(), EchoProcessor()), servers=[ore_nats_url], config=config
        )
        await service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        await service.stop(grace=0)


@pytest_asyncio.fixture
async def clients(ore_nats_url: str) -> AsyncIterator[Connect]:
    opened: list[ConduitClient] = []

    async def connect(name: str) -> ConduitClient:
        client = await ConduitClient.connect(ore_nats_url, name=name, request_timeout=5.0)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        await client.close()


async def shared(client: ConduitClient, data: bytes = PDF) -> tuple[str, Attachment]:
    """A thread of `client` holding `data` as q3.pdf, its turn stored."""
    thread, _ = await client.lookup_or_create(f"{client.name}.room", "r1")
    attachment = await client.upload(data, "q3.pdf", "application/pdf")
    async with client.events(thread) as feed:
        await client.send(thread, "the report", attachments=[attachment])
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                if delivery.kind == "lifecycle" and delivery.event.phase == "done":
                    return thread, attachment
    raise AssertionError("the feed ended")


def token_of(url: str) -> str:
    assert url.startswith(BASE + "/")
    return url.removeprefix(BASE + "/")


async def test_a_link_reads_the_file_byte_for_byte_from_any_conduit(
    core: StartCore, clients: Connect
) -> None:
    await core()
    slack, web = await clients("slack"), await clients("web")
    thread, attachment = await shared(slack)
    url = await slack.file_link(thread, attachment)
    assert url is not None
    assert await web.fetch_link(token_of(url)) == (attachment, PDF)


async def test_without_a_link_base_a_conduit_gets_no_link(
    core: StartCore, clients: Connect
) -> None:
    await core(base="")
    slack = await clients("slack")
    thread, attachment = await shared(slack)
    assert await slack.file_link(thread, attachment) is None


async def test_a_forged_token_is_refused_403(core: StartCore, clients: Connect) -> None:
    await core()
    slack = await clients("slack")
    _, attachment = await shared(slack)
    forger = FileLinks(BASE, b"not the core's key", Subjects().files_bucket, ttl=60.0)
    with pytest.raises(ApiError, match="not valid") as refused:
        await slack.fetch_link(forger.sign(attachment))
    assert (refused.value.status, refused.value.code) == (403, "link_forged")


async def test_a_damaged_token_is_refused_403(core: StartCore, clients: Connect) -> None:
    await core()
    slack = await clients("slack")
    thread, attachment = await shared(slack)
    url = await slack.file_link(thread, attachment)
    assert url is not None
    with pytest.raises(ApiError, match="not valid") as refused:
        await slack.fetch_link(token_of(url)[:-3] + "AAA")
    assert refused.value.status == 403


async def test_an_expired_token_is_refused_403(core: StartCore, clients: Connect) -> None:
    await core()
    slack = await clients("slack")
    _, attachment = await shared(slack)
    signer = FileLinks(BASE, SECRET.encode(), Subjects().files_bucket, ttl=60.0)
    stale = signer.sign(attachment, now=time.time() - 61.0)
    with pytest.raises(ApiError, match="expired") as refused:
        await slack.fetch_link(stale)
    assert (refused.value.status, refused.value.code) == (403, "link_expired")


async def test_no_link_is_made_to_a_file_of_another_namespace_s_thread(
    core: StartCore, clients: Connect
) -> None:
    await core()
    slack, web = await clients("slack"), await clients("web")
    thread, attachment = await shared(slack)
    with pytest.raises(ApiError) as refused:
        await web.file_link(thread, attachment)
    assert refused.value.status == 404


async def test_the_generated_key_outlives_the_core_that_made_it(
    core: StartCore, clients: Connect
) -> None:
    first = await core(secret="")
    slack, web = await clients("slack"), await clients("web")
    thread, attachment = await shared(slack)
    url = await slack.file_link(thread, attachment)
    assert url is not None
    await first.stop(grace=0)
    await core(secret="")  # a restarted (or another) worker signs and checks with the same key
    assert (await web.fetch_link(token_of(url)))[1] == PDF
