"""After a restart of the conduit, edits, deletes and replies act on what came before.

A room is linked to a terminal thread (an SDK client of namespace `stdin`, no answers);
the terminal's message is copied into the room and Alice writes in the room; then the
conduit is stopped and started again (its state directory and the core's delivery
records kept). The terminal's edit then edits the copy made before the restart (an
m.replace of its event) and its delete redacts it; Alice's edit of her message from
before the restart reaches the terminal as an edit, and her reply to the old copy as a
reply to it. Real core and nats-server, the conduit on the engine, the fake homeserver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from ore_conduit_matrix import CONVERSATION_KEY, MatrixConduit
from ore_conduit_matrix.testing import FakeMatrix
from ore_core import UserMessageEvent
from ore_core.conduit import ControlClient, SettingsCache, classify
from ore_core.events import EventContext
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit

pytestmark = pytest.mark.asyncio

THREAD = "bridge-room"
TIMEOUT = 10.0


async def test_after_a_restart_edits_deletes_and_replies_act_on_what_came_before(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    hs = await FakeMatrix().start()
    stdin = ore_conduit_core.client_for("stdin")
    lines: list[str] = []
    changed = asyncio.Condition()

    async def read() -> None:
        cache = SettingsCache()
        cache.load(THREAD, (await stdin.get_thread(THREAD)).metadata)
        async with stdin.events(THREAD) as feed:
            async for delivery in feed:
                if delivery.kind == "properties":
                    cache.update(THREAD, delivery.event)  # type: ignore[arg-type]
                    continue
                relayed = classify(delivery, "stdin", cache.get(THREAD))
                if relayed.action in ("relayed", "edited"):
                    reply = f" (reply to {relayed.reply_to})" if relayed.reply_to else ""
                    lines.append(f"{relayed.action} {relayed.shown}{reply}")
                    async with changed:
                        changed.notify_all()

    async def terminal_shows(line: str) -> None:
        async with asyncio.timeout(TIMEOUT), changed:
            await changed.wait_for(lambda: line in lines)

    async def room_shows(predicate: Callable[[], bool]) -> None:
        await hs.wait_until(predicate, TIMEOUT)

    reader: asyncio.Task[None] | None = None
    try:
        room = await hs.create_room()
        conduit = await ore_start_conduit(
            MatrixConduit, hs.conduit_settings(str(tmp_path / "state"))
        )
        await stdin.create_thread(THREAD)
        endpoint = {"namespace": "matrix", "key": CONVERSATION_KEY, "value": room}
        await ControlClient.beside(stdin).call(
            "links.add", {"thread": THREAD, "endpoint": endpoint, "answer": "none"}
        )
        reader = asyncio.create_task(read())
        context = EventContext(provenance="stdin", user_name="cy")
        await stdin.send(
            THREAD, UserMessageEvent(id="s-1", content="before the restart", context=context)
        )
        await room_shows(lambda: len(hs.bot_texts(room)) == 1)
        (copy,) = [s for s in hs.view(room) if s.sender != "@alice:fake.local"]
        asked = await hs.user_says(room, "hello desk")
        await terminal_shows("relayed Alice (matrix): hello desk")

        await conduit.stop()
        await conduit.start()  # the same state directory: the same session and token

        await stdin.edit(THREAD, "s-1", "edited after the restart", id="s-1-e", user_name="cy")
        await room_shows(lambda: "edited after the restart" in " ".join(hs.bot_texts(room)))
        assert [(s.event_id, s.edits) for s in hs.view(room) if s.sender == copy.sender] == [
            (copy.event_id, 1)
        ]
        await hs.user_edits(room, asked, "hello again")
        await terminal_shows("edited Alice (matrix): hello again")
        await hs.user_says(room, "about that", reply_to=copy.event_id)
        await terminal_shows(f"relayed Alice (matrix): about that (reply to {copy.event_id})")
        await stdin.delete(THREAD, "s-1", id="s-1-d")
        await room_shows(lambda: hs.bot_texts(room) == [])
        assert [e.event_id for e in hs.events_of(room) if e.redacted_by] == [copy.event_id]
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        await hs.close()
