"""The issue's long run: 200 messages in 40 rooms, one answer each, while the conduit and
the core are killed (kill -9) again and again.

`ore serve` (SQLite store, echo after a short delay) and `ore conduit matrix` are real
processes; the fake homeserver and NATS keep running. Users in 40 rooms write 5
messages each, the next once the previous one is answered, all rooms at once. After
70 answers shown the conduit is killed by its pid and started again, after 140 the core;
the conduit is killed while the homeserver holds the answer to a
send it carried out (the restart sends it again with the same transaction id, which
the homeserver answers with the event it made). Counted over all rooms: sent, answered,
lost, doubled, out of order; printed (`-s` shows them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_matrix.testing import FakeMatrix
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.testing.conduit_process import ConduitProcess
from ore_core.testing.long_run import LongRun
from ore_core.testing.serve_process import ServeProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

ROOMS = 40
MESSAGES = 5  # per room
KILL_EVERY = 70  # answers shown between two kills
WITHIN = 120.0  # seconds any one wait may take on a loaded machine


@pytest.mark.timeout(600)
async def test_200_messages_under_kill_9_of_conduit_and_core_are_answered_once_in_order(
    ore_nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    serve = ServeProcess(ore_nats_server.url, tmp_path / "serve")
    hs = await FakeMatrix().start()
    settings = hs.conduit_settings(str(tmp_path / "matrix-state"))
    conduit = ConduitProcess.isolated("matrix", ore_nats_server.url, tmp_path, settings)

    async def kill_the_conduit_at_a_send() -> None:
        holding = hs.holding
        hs.hold_next("send")
        await hs.wait_until(lambda: hs.holding > holding, WITHIN)
        conduit.kill()
        hs.let_go()
        syncs = hs.syncs
        await conduit.start_ready(lambda: hs.syncs > syncs, hs.wait_until)

    async def kill_the_core() -> None:
        serve.restart()

    run = LongRun(
        say=hs.user_says,
        shown=hs.bot_texts,
        wait_until=hs.wait_until,
        answer=serve.answer,
        conversations=[await hs.create_room() for _ in range(ROOMS)],
        messages=MESSAGES,
        patience=WITHIN,
    )
    plan = [kill_the_conduit_at_a_send, kill_the_core]
    try:
        serve.start()
        await conduit.start_ready(lambda: hs.waiting > 0, hs.wait_until)
        counts = await run.run([(KILL_EVERY * (n + 1), f) for n, f in enumerate(plan)])
    finally:
        await conduit.astop()
        await serve.astop()
        await hs.close()
    print(f"matrix, kill -9 of the conduit and of ore serve: {counts}")
    assert (conduit.starts, serve.starts) == (2, 2)
    assert counts == {
        "sent": ROOMS * MESSAGES,
        "answered": ROOMS * MESSAGES,
        "lost": 0,
        "doubled": 0,
        "out_of_order": 0,
    }, (run.unanswered, run.differences(), conduit.log.read_text()[-3000:])
