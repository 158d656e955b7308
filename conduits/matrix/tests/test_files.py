"""Matrix's files (issue 39): a user's `m.image` / `m.file` is downloaded from the
media repo and taken into ore (its caption is the text); a relayed message's files are
uploaded to the media repo and posted as `m.image` / `m.file` events with `info`, each
under a transaction id of its own; a file ore does not take, or a download cut midway,
is one notice in the room while the text still goes. Real core and nats-server, the
conduit on the engine, the fake homeserver with its media repo."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path

from ore_conduit_matrix import CONVERSATION_KEY, MatrixConduit
from ore_conduit_matrix.testing import FakeMatrix
from ore_core import ConduitClient, TurnCompleteEvent
from ore_core.conduit import ControlClient
from ore_core.files import Attachment
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.turn import Role

THREAD = "files-room"
TIMEOUT = 20.0
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64
PDF = b"%PDF-1.7 " + bytes(range(256)) * 20_000  # 5.1 MB


@asynccontextmanager
async def linked(
    core: ConduitCore, start: StartConduit, state: Path
) -> AsyncIterator[tuple[FakeMatrix, str, ConduitClient]]:
    """The homeserver with the conduit running and syncing, a room linked to a thread
    of `web`; the room's id."""
    hs = await FakeMatrix().start()
    web = await ConduitClient.connect(core.nats_url, name="web")  # its own inbox
    try:
        room = await hs.create_room()
        await start(MatrixConduit, hs.conduit_settings(str(state)))
        await web.create_thread(THREAD)
        endpoint = {"namespace": "matrix", "key": CONVERSATION_KEY, "value": room}
        await ControlClient.beside(web).call(
            "links.add", {"thread": THREAD, "endpoint": endpoint, "answer": "none"}
        )
        await hs.wait_until(lambda: hs.waiting > 0, TIMEOUT)  # past its first sync
        yield hs, room, web
    finally:
        await web.close()
        await hs.close()


async def user_turn(web: ConduitClient, action: Awaitable[object]) -> TurnCompleteEvent:
    """Run `action` while reading the thread; the first user turn stored."""
    async with web.events(THREAD, kinds={"turn_complete"}) as feed:
        await action
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                event = delivery.event
                if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
                    return event
    raise AssertionError("the feed ended")


def files_of(event: TurnCompleteEvent) -> list[Attachment]:
    return [a for a in event.turn.artifacts if isinstance(a, Attachment)]


async def test_a_user_s_image_and_file_reach_ore_byte_for_byte(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (hs, room, web):
        png = await user_turn(web, hs.user_sends_file(room, "a.png", "image/png", PNG))
        pdf = await user_turn(web, hs.user_sends_file(room, "q3.pdf", "application/pdf", PDF))
        assert [a.name for a in files_of(png)] == ["a.png"]
        assert await web.fetch(THREAD, files_of(png)[0]) == PNG
        assert await web.fetch(THREAD, files_of(pdf)[0]) == PDF


async def test_a_file_ore_does_not_take_is_one_notice_in_the_room(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (hs, room, web):
        sent = hs.user_sends_file(room, "setup.exe", "application/x-msdownload", b"MZ" * 99)
        event = await user_turn(web, sent)
        assert files_of(event) == []
        await hs.wait_until(lambda: len(hs.bot_texts(room)) == 1, TIMEOUT)
        (notice,) = hs.bot_texts(room)
        assert "setup.exe: files of type application/x-msdownload are not allowed" in notice


async def test_a_download_cut_midway_is_one_notice_and_the_conduit_goes_on(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (hs, room, web):
        hs.cut_downloads = 1
        cut = await user_turn(web, hs.user_sends_file(room, "q3.pdf", "application/pdf", PDF))
        assert files_of(cut) == []
        await hs.wait_until(lambda: len(hs.bot_texts(room)) == 1, TIMEOUT)
        assert "q3.pdf" in hs.bot_texts(room)[0]
        again = await user_turn(web, hs.user_sends_file(room, "q3.pdf", "application/pdf", PDF))
        assert [a.name for a in files_of(again)] == ["q3.pdf"]


async def test_a_relayed_message_s_files_are_posted_as_media_events(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (hs, room, web):
        png = await web.upload(PNG, "a.png", "image/png")
        pdf = await web.upload(PDF, "q3.pdf", "application/pdf")
        await web.send(THREAD, "see", user_name="Ana", attachments=[png, pdf])
        await hs.wait_until(lambda: len(hs.files_of(room)) == 2, TIMEOUT)
        assert {n: hashlib.sha256(d).hexdigest() for n, d in hs.files_of(room)} == {
            "a.png": png.sha256,
            "q3.pdf": pdf.sha256,
        }
        kinds = [e.content["msgtype"] for e in hs.events_of(room) if "url" in e.content]
        assert kinds == ["m.image", "m.file"]
        pdf_event = next(e for e in hs.events_of(room) if e.content.get("body") == "q3.pdf")
        assert pdf_event.content["info"] == {"mimetype": "application/pdf", "size": len(PDF)}
