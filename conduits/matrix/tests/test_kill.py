"""`ore conduit matrix` killed (kill -9) while answers are being sent: nothing doubled.

Six rooms converse at once, each sending its next message once the previous one is
answered, 36 messages in all, with the real core (in process) and the fake homeserver.
The conduit process is killed once, mid-stream: while the homeserver holds the answer
to a send it carried out (the window in which a platform without keys doubles), and
started again. Every post's
transaction id is the engine's key and the session (access token) is kept, so a post
the homeserver made before the kill and the restarted conduit makes again is the same
event: lost, doubled and out of order are counted per room and must all be 0.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ore_conduit_matrix.testing import FakeMatrix
from ore_core.testing.conduit_conformance import ECHO_PREFIX, ConduitCore
from ore_core.testing.conduit_process import ConduitProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

ROOMS = 6
MESSAGES = 6  # per room
KILL_AFTER = 12  # answers shown before the kill
PATIENCE = 60.0


async def converse(hs: FakeMatrix, room: str, sent: list[str]) -> None:
    for number in range(MESSAGES):
        text = f"{room} m{number}"
        await hs.user_says(room, text)
        sent.append(text)
        await hs.wait_until(
            lambda text=text: f"{ECHO_PREFIX}{text}" in hs.bot_texts(room), PATIENCE
        )


async def test_a_conduit_killed_mid_stream_doubles_and_loses_nothing(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    hs = await FakeMatrix().start()
    settings = hs.conduit_settings(str(tmp_path / "matrix-state"))
    conduit = ConduitProcess.isolated("matrix", ore_conduit_core.nats_url, tmp_path, settings)
    rooms = [await hs.create_room() for _ in range(ROOMS)]
    sent: dict[str, list[str]] = {room: [] for room in rooms}
    try:
        conduit.start()
        await hs.wait_until(lambda: hs.waiting > 0, PATIENCE)
        load = asyncio.gather(*(converse(hs, room, sent[room]) for room in rooms))
        await hs.wait_until(lambda: sum(len(hs.bot_texts(r)) for r in rooms) >= KILL_AFTER)
        hs.hold_next("send")  # made by the homeserver, its event id never heard of
        await hs.wait_until(lambda: hs.holding == 1)
        conduit.kill()
        hs.let_go()
        conduit.start()
        await asyncio.wait_for(load, PATIENCE)
    finally:
        await conduit.astop()
        await hs.close()
    lost = doubled = disorder = 0
    for room in rooms:
        wanted = [f"{ECHO_PREFIX}{text}" for text in sent[room]]
        shown = hs.bot_texts(room)
        lost += sum(1 for w in wanted if w not in shown)
        doubled += len(shown) - len(set(shown)) + sum(1 for s in shown if s not in wanted)
        disorder += shown != wanted
    print(
        f"sent {sum(map(len, sent.values()))} lost {lost} doubled {doubled} out of order {disorder}"
    )
    assert (lost, doubled, disorder) == (0, 0, 0), conduit.log.read_text()[-3000:]
    assert conduit.starts == 2
