"""The terminal on a linked thread (issue 29): another endpoint's messages show with
their label, the terminal's own are never shown twice. Real core and nats-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
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


async def test_a_file_another_endpoint_sends_is_saved_and_its_path_shown(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    stdin_client: ConduitClient,
    make_view: type[RecordingView],
    tmp_path: Path,
) -> None:
    await start_core(EchoProcessor())
    web = await link_terminal(ore_nats_url, stdin_client)
    data = b"%PDF-1.7 the report" * 1000
    async with web, ChatSession(stdin_client, THREAD, files_dir=tmp_path) as session:
        report = await web.upload(data, "q3.pdf")
        await web.send(THREAD, "the report", id="w-2", user_name="Ana", attachments=[report])
        view = make_view()
        await session.turn("thanks", view)
    notices = [e.content for e in view.events if isinstance(e, NoticeEvent)]
    saved = tmp_path / "q3.pdf"
    assert notices == [
        "Ana (web): the report",
        f"file q3.pdf (application/pdf, 19.0 kB) saved to {saved}",
    ]
    assert saved.read_bytes() == data
