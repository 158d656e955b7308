"""Files across kill -9 of a conduit between the upload and the relay (issue 39).

A gateway NATS <-> Discord <-> Telegram: the NATS bridge runs on the engine in this
process, Discord and Telegram as `ore conduit` processes on their fakes, with the kit's
core on a real nats-server. A NATS channel gets its ore thread the usual way (a client
writes to it); a Discord channel and a Telegram chat are linked to it with `answer =
"none"`. Three faults, each in its own gateway:

- the receiving Discord conduit killed while Discord holds the answer to the post of a
  file's copy (carried out: the restart posts it again with the same nonce);
- the receiving Telegram conduit killed while Telegram holds the `sendDocument` of a
  file's copy, carried out after the kill (Telegram has no idempotency key and no way
  to find a file it took: the restart posts the copy, its text and its file, again, as
  docs/bridging.md says; nothing lost, each item at most twice);
- the sending Discord conduit killed after it took the first of a message's two files
  into ore and while Discord holds the download of the second: the message is not
  acknowledged, so the resumed gateway session hands it over again.

Each endpoint's view is counted by sha256 and text: sent, delivered, lost, doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ore_conduit_discord import CHANNEL_KEY
from ore_conduit_discord.testing import GUILD, RANDOM, FakeDiscord
from ore_conduit_nats import NatsBridge
from ore_conduit_nats.testing import PlainNatsClient
from ore_conduit_telegram.testing import FakeTelegram
from ore_core import ConduitClient
from ore_core.conduit import ControlClient
from ore_core.files import Attachment
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.conduit_process import ConduitProcess
from ore_core.turn import Role
from tests.bridge.files import files_from, sha
from tests.bridge.gateway import PATIENCE

pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(300)]

CHANNEL = "gw"  # the NATS bridge's channel
CHAT = 3001  # the Telegram chat


def count(sent: list[tuple[str, str]], shown: list[tuple[str, str]]) -> dict[str, int]:
    """Items (kind, text or sha256) sent against those an endpoint shows."""
    seen = Counter(shown)
    return {
        "sent": len(sent),
        "delivered": sum(1 for item in sent if seen[item] >= 1),
        "lost": sum(1 for item in sent if seen[item] == 0),
        "doubled": sum(seen[item] - 1 for item in sent if seen[item] > 1),
    }


def texts_shown(texts: list[str], sent: list[str]) -> list[tuple[str, str]]:
    """("text", t) for each message showing a sent text `t` (a copy carries a label)."""
    return [("text", t) for shown in texts for t in sent if t in shown]


@dataclass
class KillGateway:
    """The three endpoints of one linked thread, Discord and Telegram as processes."""

    core: ConduitCore
    discord: FakeDiscord
    telegram: FakeTelegram
    raw: PlainNatsClient
    nats: ConduitClient
    tmp_path: Path
    thread: str = ""
    discord_conduit: ConduitProcess | None = None
    telegram_conduit: ConduitProcess | None = None
    nats_said: list[str] = field(default_factory=list)
    nats_files: list[tuple[str, str]] = field(default_factory=list)
    nats_changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start_discord(self) -> None:
        """Start (again) the Discord conduit; back once its gateway session is up."""
        assert self.discord_conduit is not None
        readied = self.discord.gateway.readied
        await self.discord_conduit.start_ready(
            lambda: self.discord.gateway.readied > readied, self.discord.wait_until
        )

    async def start_telegram(self) -> None:
        """Start (again) the Telegram conduit; back once it polls for updates."""
        assert self.telegram_conduit is not None
        polls = self.telegram.polls
        await self.telegram_conduit.start_ready(
            lambda: self.telegram.polls > polls, self.telegram.wait_until
        )

    async def read_nats(self) -> None:
        """What the NATS bridge shows: each text (a copy's under `relayed`), each
        reference fetched (its sha256)."""
        while True:
            body = json.loads((await self.raw.next_out(CHANNEL)).data)
            for reference in body.get("attachments", []):
                attachment = Attachment.from_dict(reference)
                data = await self.nats.fetch(self.thread, attachment)
                self.nats_files.append(("file", sha(data)))
            self.nats_said.append(body.get("relayed") or body.get("text", ""))  # files first
            self.nats_changed.set()

    async def nats_until(self, predicate: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not predicate():
                self.nats_changed.clear()
                await self.nats_changed.wait()

    def nats_shown(self, texts: list[str]) -> list[tuple[str, str]]:
        return self.nats_files + texts_shown(self.nats_said, texts)

    def discord_shown(self, texts: list[str]) -> list[tuple[str, str]]:
        files = [("file", sha(data)) for _, data in self.discord.files_of(RANDOM)]
        return files + texts_shown(self.discord.bot_texts(RANDOM), texts)

    def telegram_shown(self, texts: list[str]) -> list[tuple[str, str]]:
        files = [("file", sha(data)) for _, data in self.telegram.bot_files(CHAT)]
        return files + texts_shown(self.telegram.bot_texts(CHAT), texts)

    async def reported(self, namespace: str, text: str) -> None:
        """Until `namespace` has reported the copy of the turn saying `text` delivered:
        whatever it posts of that copy is posted by then."""
        thread = await self.core.thread_holding(text)
        (turn,) = [
            t
            for t in thread.turns()
            if t.role == Role.USER and any(getattr(a, "content", "") == text for a in t.artifacts)
        ]
        client = self.core.client_for(namespace)
        async with asyncio.timeout(PATIENCE):
            # The core's record has no change to wait on from here: asked until it holds.
            while not await client.delivery_get(thread.id, turn.id):  # noqa: ASYNC110
                await asyncio.sleep(0.05)

    async def send_from_nats(self, text: str, name: str) -> list[tuple[str, str]]:
        """`text` with the NATS origin's file `name`, uploaded to ore once: the items."""
        media_type, data = files_from("nats")[name]
        attachment = await self.nats.upload(data, name, media_type)
        body = {"text": text, "id": text, "attachments": [attachment.to_dict()]}
        await self.raw.publish(CHANNEL, json.dumps(body).encode())
        return [("text", text), ("file", sha(data))]


@asynccontextmanager
async def kill_gateway(
    core: ConduitCore, start_conduit: StartConduit, tmp_path: Path
) -> AsyncIterator[KillGateway]:
    """A started `KillGateway`, its thread linked, every part of it stopped after."""
    telegram = await FakeTelegram().start()
    raw = await PlainNatsClient.connect(core.nats_url, patience=PATIENCE)
    nats = await ConduitClient.connect(core.nats_url, name="nats")
    reader: asyncio.Task[None] | None = None
    async with FakeDiscord() as discord:
        gw = KillGateway(core, discord, telegram, raw, nats, tmp_path)
        discord_settings = {
            "token": discord.token,
            "api_url": f"{discord.url}/api/v10",
            "state_dir": str(tmp_path / "discord-state"),
            "identify_delay": 0,
        }
        telegram.chat(CHAT, "private")
        tg_settings = telegram.conduit_settings(str(tmp_path / "tg-state"), flush_interval=0.05)
        gw.discord_conduit = ConduitProcess.isolated(
            "discord", core.nats_url, tmp_path, discord_settings
        )
        gw.telegram_conduit = ConduitProcess.isolated(
            "telegram", core.nats_url, tmp_path, tg_settings
        )
        try:
            await start_conduit(NatsBridge, {"output": "json"})
            await asyncio.wait_for(raw.wait_until_ready(), PATIENCE)
            await gw.start_discord()
            await gw.start_telegram()
            await raw.publish(CHANNEL, b'{"text": "start", "id": "start"}')
            await raw.next_out(CHANNEL)  # its answer: the thread exists
            gw.thread, _ = await nats.lookup_or_create("nats.channel", CHANNEL)
            control = ControlClient.beside(core.client)
            for endpoint in (
                {"namespace": "discord", "key": CHANNEL_KEY, "value": f"{GUILD}:{RANDOM}"},
                {"namespace": "telegram", "key": "telegram.thread", "value": f"{CHAT}:0:0"},
            ):
                await control.call(
                    "links.add", {"thread": gw.thread, "endpoint": endpoint, "answer": "none"}
                )
            # Discord catches up on the thread: its copy of "start" comes first, not held.
            await discord.wait_until(lambda: bool(gw.discord_shown(["start"])), PATIENCE)
            reader = asyncio.create_task(gw.read_nats())
            yield gw
        finally:
            if reader is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            discord.let_go()
            telegram.let_go()
            for conduit in (gw.discord_conduit, gw.telegram_conduit):
                await conduit.astop()
            await nats.close()
            await raw.close()
            await telegram.close()


CLEAN = {"lost": 0, "doubled": 0}


async def test_a_discord_conduit_killed_while_posting_a_file_copy_shows_it_once(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with kill_gateway(ore_conduit_core, ore_start_conduit, tmp_path) as gw:
        assert gw.discord_conduit is not None
        held = gw.discord.held
        gw.discord.hold_next("post")
        sent = await gw.send_from_nats("nats sends a pdf", "nats.pdf")
        await gw.discord.wait_until(lambda: gw.discord.held > held, PATIENCE)
        gw.discord_conduit.kill()  # Discord made the message; the conduit never learns it
        gw.discord.let_go()
        await gw.start_discord()
        texts = ["nats sends a pdf"]
        with contextlib.suppress(TimeoutError):  # the counts below say what is missing
            for namespace in ("discord", "telegram"):
                await gw.reported(namespace, texts[0])
        counts = {
            "discord": count(sent, gw.discord_shown(texts)),
            "telegram": count(sent, gw.telegram_shown(texts)),
        }
    print(f"discord killed at a file copy's post: {counts}")
    assert counts == dict.fromkeys(counts, {"sent": 2, "delivered": 2} | CLEAN)


async def test_a_telegram_conduit_killed_while_sending_a_file_copy_shows_it_once(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with kill_gateway(ore_conduit_core, ore_start_conduit, tmp_path) as gw:
        assert gw.telegram_conduit is not None
        holding = gw.telegram.holding
        gw.telegram.hold_next("sendDocument")
        sent = await gw.send_from_nats("nats sends a pdf", "nats.pdf")
        await gw.telegram.wait_until(lambda: gw.telegram.holding > holding, PATIENCE)
        gw.telegram_conduit.kill()  # Telegram carries the send out after the conduit died
        gw.telegram.let_go()
        await gw.start_telegram()
        texts = ["nats sends a pdf"]
        with contextlib.suppress(TimeoutError):  # the counts below say what is missing
            for namespace in ("discord", "telegram"):
                await gw.reported(namespace, texts[0])
        counts = {
            "discord": count(sent, gw.discord_shown(texts)),
            "telegram": count(sent, gw.telegram_shown(texts)),
        }
    print(f"telegram killed at a file copy's sendDocument: {counts}")
    assert counts["discord"] == {"sent": 2, "delivered": 2} | CLEAN
    # Telegram has no idempotency key and no way to find a file it took: the copy under
    # way at the kill, its text and its file, is posted again (docs/bridging.md). Lost:
    # none; each item at most twice.
    assert counts["telegram"]["lost"] == 0
    assert counts["telegram"]["doubled"] <= len(sent), counts


async def test_a_discord_conduit_killed_between_its_upload_and_its_message_relays_it_once(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with kill_gateway(ore_conduit_core, ore_start_conduit, tmp_path) as gw:
        assert gw.discord_conduit is not None
        held = gw.discord.held
        gw.discord.hold_next("download", after=1)  # the first file is taken into ore
        files = files_from("discord")
        text = "discord sends two files"
        await gw.discord.user_says(RANDOM, text, files=[(n, t, d) for n, (t, d) in files.items()])
        await gw.discord.wait_until(lambda: gw.discord.held > held, PATIENCE)
        gw.discord_conduit.kill()  # its message is not acknowledged: resumed, it comes again
        gw.discord.let_go()
        await gw.start_discord()
        sent = [("text", text)] + [("file", sha(d)) for _, d in files.values()]
        with contextlib.suppress(TimeoutError):  # the counts below say what is missing
            shown = gw.telegram_shown
            await gw.telegram.wait_until(lambda: ("text", text) in shown([text]), PATIENCE)
            await gw.reported("telegram", text)
            await gw.nats_until(lambda: ("text", text) in gw.nats_shown([text]), PATIENCE)
            await gw.reported("nats", text)
        counts = {
            "telegram": count(sent, gw.telegram_shown([text])),
            "nats": count(sent, gw.nats_shown([text])),
        }
    print(f"discord killed between its upload and its message: {counts}")
    assert counts == dict.fromkeys(counts, {"sent": 3, "delivered": 3} | CLEAN)
