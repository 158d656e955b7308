"""Discord on a linked thread (bridging): another endpoint's messages are posted in the
channel under their sender's name through the channel's webhook (with the label in bold
where no webhook is configured), and a Discord user's message reaches the other endpoint
labelled. Real core and nats-server, the conduit on the engine, the fake Discord; the
other endpoint is an SDK client of namespace `stdin` (the terminal)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from ore_conduit_discord import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.testing import GENERAL, GUILD, RANDOM, FakeDiscord
from ore_core import UserMessageEvent
from ore_core.conduit import ControlClient, SettingsCache, classify
from ore_core.events import EventContext
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit

THREAD = "bridge-room"
TIMEOUT = 10.0


class Terminal:
    """What the terminal showed of relayed messages."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = asyncio.Condition()

    async def shown(self, line: str) -> None:
        self.lines.append(line)
        async with self.changed:
            self.changed.notify_all()

    async def shows(self, line: str) -> None:
        async with asyncio.timeout(TIMEOUT), self.changed:
            await self.changed.wait_for(lambda: line in self.lines)


@asynccontextmanager
async def linked(
    core: ConduitCore, start: StartConduit, state: Path, channel: str
) -> AsyncIterator[tuple[FakeDiscord, Terminal]]:
    """The fake with the conduit running, `channel` linked to a terminal thread; the
    lines the terminal shows."""
    async with FakeDiscord() as fake:
        settings = {
            "token": fake.token, "api_url": f"{fake.url}/api/v10", "state_dir": str(state),
            "identify_delay": 0, "webhooks": {GENERAL: fake.webhook_url},
        }  # fmt: skip
        await start(DiscordConduit, settings)
        await fake.wait_until(lambda: fake.gateway.readied > 0, TIMEOUT)
        client = core.client_for("stdin")
        await client.create_thread(THREAD)
        endpoint = {"namespace": "discord", "key": CHANNEL_KEY, "value": f"{GUILD}:{channel}"}
        await ControlClient.beside(client).call(
            "links.add", {"thread": THREAD, "endpoint": endpoint, "answer": "none"}
        )
        cache = SettingsCache()
        cache.load(THREAD, (await client.get_thread(THREAD)).metadata)
        terminal = Terminal()

        async def read() -> None:
            async with client.events(THREAD) as feed:
                async for delivery in feed:
                    if delivery.kind == "properties":
                        cache.update(THREAD, delivery.event)  # type: ignore[arg-type]
                        continue
                    relayed = classify(delivery, "stdin", cache.get(THREAD))
                    if relayed.action == "relayed" and relayed.reply_to:
                        await terminal.shown(f"{relayed.shown} (reply to {relayed.reply_to})")
                    elif relayed.action == "relayed":
                        await terminal.shown(relayed.shown)
                    elif relayed.action == "edited":
                        await terminal.shown(f"edited: {relayed.shown}")

        reader = asyncio.create_task(read())
        try:
            yield fake, terminal
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def terminal_says(core: ConduitCore, text: str, id: str) -> None:
    context = EventContext(provenance="stdin", user_name="cy")
    await core.client_for("stdin").send(
        THREAD, UserMessageEvent(id=id, content=text, context=context)
    )


async def test_a_copy_shows_its_sender_through_the_webhook_and_discord_reaches_the_terminal(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path, GENERAL) as (fake, terminal):
        await terminal_says(ore_conduit_core, "hi from the desk", "s-1")
        await fake.wait_until(lambda: len(fake.seen(GENERAL)) == 1, TIMEOUT)
        await fake.user_says(GENERAL, "hello desk")
        await terminal.shows("Alice (discord): hello desk")
        assert [(s.author, s.text) for s in fake.seen(GENERAL)] == [
            ("cy (stdin)", "hi from the desk"),
            ("Alice", "hello desk"),
        ]


async def test_without_a_webhook_a_copy_carries_its_label_in_bold(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path, RANDOM) as (fake, _):
        await terminal_says(ore_conduit_core, "hi from the desk", "s-1")
        await fake.wait_until(lambda: len(fake.bot_texts(RANDOM)) == 1, TIMEOUT)
        assert fake.bot_texts(RANDOM) == ["**cy (stdin):** hi from the desk"]


async def test_a_copy_longer_than_2000_characters_is_split_without_breaking_its_code_block(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with linked(ore_conduit_core, ore_start_conduit, tmp_path, GENERAL) as (fake, _):
        code = "\n".join(f"print({n})  # " + "x" * 60 for n in range(70))  # ~5,300 characters
        await terminal_says(ore_conduit_core, f"look:\n```python\n{code}\n```", "s-long")
        await fake.wait_until(lambda: len(fake.seen(GENERAL)) == 3, TIMEOUT)
        parts = [s.text for s in fake.seen(GENERAL)]
        assert all(len(part) <= 2000 for part in parts)
        assert all(part.count("```") % 2 == 0 for part in parts)  # each renders on its own
        assert parts[0].startswith("look:\n```python\n")


@pytest.mark.parametrize("channel", [GENERAL, RANDOM], ids=["webhook", "bot"])
async def test_after_a_restart_edits_deletes_and_replies_act_on_what_came_before(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path, channel: str
) -> None:
    started: list[RunningConduit] = []

    async def start(conduit: type[DiscordConduit], section: Mapping[str, object]) -> None:
        started.append(await ore_start_conduit(conduit, section))

    async with linked(ore_conduit_core, start, tmp_path, channel) as (fake, terminal):
        await terminal_says(ore_conduit_core, "before the restart", "s-1")
        await fake.wait_until(lambda: len(fake.seen(channel)) == 1, TIMEOUT)
        (copy,) = fake.seen(channel)
        asked = await fake.user_says(channel, "hello desk")
        await terminal.shows("Alice (discord): hello desk")
        (conduit,) = started
        await conduit.stop()  # its state (the session, the copies' ids in the core) kept
        readied = fake.gateway.readied
        await conduit.start()
        await fake.wait_until(lambda: fake.gateway.readied > readied, TIMEOUT)

        stdin = ore_conduit_core.client_for("stdin")
        await stdin.edit(THREAD, "s-1", "edited after the restart", id="s-1-edit", user_name="cy")
        await fake.wait_until(
            lambda: [s.text for s in fake.seen(channel) if s.id == copy.id] != [copy.text],
            TIMEOUT,
        )
        assert [s.text for s in fake.seen(channel) if s.id == copy.id] == [
            copy.text.replace("before the restart", "edited after the restart")
        ]
        await fake.user_edits(channel, asked, "hello again")
        await terminal.shows("edited: Alice (discord): hello again")
        await fake.user_says(channel, "about that", reply_to=copy.id)
        await terminal.shows(f"Alice (discord): about that (reply to {copy.id})")
        await stdin.delete(THREAD, "s-1", id="s-1-delete")
        await fake.wait_until(lambda: copy.id not in {s.id for s in fake.seen(channel)}, TIMEOUT)
        assert len(fake.seen(channel)) == 2  # Alice's two messages; the copy is gone
