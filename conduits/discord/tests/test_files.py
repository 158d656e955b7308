"""Discord's files (issue 39): a user's attachments are downloaded from their URL and
taken into ore (the text no longer carries their URLs); a relayed message's files are
posted as a multipart upload under the part's nonce, or as a link/notice line when
over Discord's 10 MiB; a file ore does not take, or a download cut midway, is one
notice in the channel while the text still goes. Real core and nats-server, the
conduit on the engine, the fake Discord serving attachments and taking uploads."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ore_conduit_discord import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.rest import DiscordRest
from ore_conduit_discord.testing import GUILD, RANDOM, FakeDiscord
from ore_core import ConduitClient, TurnCompleteEvent
from ore_core.conduit import ControlClient, Part
from ore_core.files import Attachment
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.turn import Role

THREAD = "files-room"
TIMEOUT = 20.0
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64
PDF = b"%PDF-1.7 " + bytes(range(256)) * 20_000  # 5.1 MB


@asynccontextmanager
async def linked(
    core: ConduitCore, start: StartConduit, state: Path, channel: str = RANDOM
) -> AsyncIterator[tuple[FakeDiscord, ConduitClient]]:
    """The fake with the conduit running, `channel` linked to a thread of `web`."""
    async with FakeDiscord() as fake:
        settings = {
            "token": fake.token, "api_url": f"{fake.url}/api/v10", "state_dir": str(state),
            "identify_delay": 0,
        }  # fmt: skip
        await start(DiscordConduit, settings)
        await fake.wait_until(lambda: fake.gateway.readied > 0, TIMEOUT)
        web = await ConduitClient.connect(core.nats_url, name="web")  # its own inbox
        await web.create_thread(THREAD)
        endpoint = {"namespace": "discord", "key": CHANNEL_KEY, "value": f"{GUILD}:{channel}"}
        await ControlClient.beside(web).call(
            "links.add", {"thread": THREAD, "endpoint": endpoint, "answer": "none"}
        )
        try:
            yield fake, web
        finally:
            await web.close()


async def user_turn(web: ConduitClient, action: object) -> TurnCompleteEvent:
    """Run `action` (a coroutine) while reading the thread; the first user turn stored."""
    async with web.events(THREAD, kinds={"turn_complete"}) as feed:
        await action  # type: ignore[misc]
        async with asyncio.timeout(TIMEOUT):
            async for delivery in feed:
                event = delivery.event
                if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
                    return event
    raise AssertionError("the feed ended")


def files_of(event: TurnCompleteEvent) -> list[Attachment]:
    return [a for a in event.turn.artifacts if isinstance(a, Attachment)]


async def test_a_user_s_attachments_reach_ore_as_files_not_urls(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (fake, web):
        files = [("a.png", "image/png", PNG), ("q3.pdf", "application/pdf", PDF)]
        event = await user_turn(web, fake.user_says(RANDOM, "look", files=files))
        assert event.turn.artifacts[0].content == "look"  # type: ignore[union-attr]
        got = {a.name: await web.fetch(THREAD, a) for a in files_of(event)}
        assert got == {"a.png": PNG, "q3.pdf": PDF}


async def test_a_file_ore_does_not_take_is_one_notice_and_the_text_still_goes(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (fake, web):
        files = [
            ("setup.exe", "application/x-msdownload", b"MZ" * 100),
            ("a.png", "image/png", PNG),
        ]
        event = await user_turn(web, fake.user_says(RANDOM, "run this", files=files))
        assert [a.name for a in files_of(event)] == ["a.png"]
        await fake.wait_until(lambda: len(fake.bot_texts(RANDOM)) == 1, TIMEOUT)
        (notice,) = fake.bot_texts(RANDOM)
        assert "setup.exe: files of type application/x-msdownload are not allowed" in notice
        assert notice.endswith("the message went without it")


async def test_a_download_cut_midway_is_one_notice_and_the_conduit_goes_on(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (fake, web):
        fake.drop_next("download")
        files = [("q3.pdf", "application/pdf", PDF)]
        event = await user_turn(web, fake.user_says(RANDOM, "the report", files=files))
        assert files_of(event) == []
        await fake.wait_until(lambda: len(fake.bot_texts(RANDOM)) == 1, TIMEOUT)
        assert "q3.pdf" in fake.bot_texts(RANDOM)[0]
        again = await user_turn(web, fake.user_says(RANDOM, "again", files=files))
        assert [a.name for a in files_of(again)] == ["q3.pdf"]


async def test_a_relayed_message_s_files_are_uploaded_byte_for_byte(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (fake, web):
        png = await web.upload(PNG, "a.png", "image/png")
        pdf = await web.upload(PDF, "q3.pdf", "application/pdf")
        await web.send(THREAD, "see", user_name="Ana", attachments=[png, pdf])
        await fake.wait_until(lambda: len(fake.files_of(RANDOM)) == 2, TIMEOUT)
        assert fake.bot_texts(RANDOM) == ["**Ana (web):** see"]
        assert {n: hashlib.sha256(d).hexdigest() for n, d in fake.files_of(RANDOM)} == {
            "a.png": png.sha256,
            "q3.pdf": pdf.sha256,
        }


async def test_a_file_over_discord_s_limit_shows_as_a_line_naming_it(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path) as (fake, web):
        big = await web.upload(b"%PDF" + b"x" * 11 * 1024**2, "big.pdf", "application/pdf")
        await web.send(THREAD, "huge", user_name="Ana", attachments=[big])
        await fake.wait_until(lambda: len(fake.bot_texts(RANDOM)) == 1, TIMEOUT)
        assert fake.files_of(RANDOM) == []
        assert fake.bot_texts(RANDOM) == [
            "**Ana (web):** huge\n📎 big.pdf (application/pdf, 11.5 MB) (not shown here)"
        ]


async def test_a_post_with_files_repeated_under_its_nonce_is_made_once() -> None:
    async with FakeDiscord() as fake:
        rest = DiscordRest(f"{fake.url}/api/v10", fake.token)
        await rest.start()
        try:
            png = Attachment("a.png", "image/png", len(PNG), hashlib.sha256(PNG).hexdigest(), "B")
            first = await rest.post(RANDOM, Part("see"), "nonce-1", [(png, PNG)])
            second = await rest.post(RANDOM, Part("see"), "nonce-1", [(png, PNG)])
        finally:
            await rest.close()
        assert first == second
        assert fake.files_of(RANDOM) == [("a.png", PNG)]
