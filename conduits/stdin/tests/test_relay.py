"""The terminal on a linked thread (issue 29): another endpoint's messages show with
their label, the terminal's own are never shown twice. Real core and nats-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ore_conduit_stdin.session import ChatSession
from ore_core import NoticeEvent, TurnProcessor
from ore_core.conduit import ConduitClient, ControlClient
from ore_core.session.echo import EchoProcessor

if TYPE_CHECKING:
    from conftest import RecordingView

THREAD = "shared-1"


async def link_terminal(ore_nats_url: str, stdin_client: ConduitClient) -> ConduitClient:
    """THREAD, made by namespace `web`, linked to the terminal (`stdin:id=THREAD`)."""
    web = await ConduitClient.connect(ore_nats_url, name="web", request_timeout=5.0)
    await web.create_thread(THREAD)
    endpoint = {"namespace": "stdin", "key": "id", "value": THREAD}
    await ControlClient.beside(stdin_client).call(
        "links.add", {"thread": THREAD, "endpoint": endpoint}
    )
    return web


async def test_another_endpoint_s_message_shows_with_its_label(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    stdin_client: ConduitClient,
    make_view: type[RecordingView],
) -> None:
    await start_core(EchoProcessor())
    web = await link_terminal(ore_nats_url, stdin_client)
    async with web, ChatSession(stdin_client, THREAD) as session:
        await web.send(THREAD, "hi from the web", id="w-1", user_name="Ana")
        view = make_view()
        await session.turn("hello", view)
    notices = [e.content for e in view.events if isinstance(e, NoticeEvent)]
    assert notices == ["Ana (web): hi from the web"]
    assert view.texts() == ["hello"]  # the terminal's own answer; the web's is not shown
