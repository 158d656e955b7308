"""A burst of 100 messages into one room under the homeserver's rate limits.

A user writes 100 messages into one room at once; the core (the kit's, echo) answers
each in turn and the conduit (in process, on the fake homeserver) shows every answer.
Five times during the burst the homeserver answers a send (a post or an edit) with 429
`M_LIMIT_EXCEEDED` and a `retry_after_ms`. Counted: every message answered once, in
order; the rate limits the fake served; the sends made while one said to wait (0: the
conduit waited what the homeserver said).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_matrix import MatrixConduit
from ore_conduit_matrix.testing import FakeMatrix
from ore_core.testing.conduit_conformance import ECHO_PREFIX, StartConduit
from ore_core.testing.long_run import BurstRun

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

MESSAGES = 100
RETRY_AFTER_MS = 300  # each scripted rate limit asks for this wait
LIMITS = (10, 30, 50, 70, 90)  # after this many answers, the next send is limited
WITHIN = 60.0


async def test_a_burst_of_100_under_429s_is_answered_once_in_order_waiting_as_told(
    ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    hs = await FakeMatrix().start()
    try:
        run = BurstRun(
            say=hs.user_says,
            shown=hs.bot_texts,
            wait_until=hs.wait_until,
            answer=lambda text: ECHO_PREFIX + text,
            conversations=[await hs.create_room()],
            messages=MESSAGES,
            patience=WITHIN,
        )
        conduit = await ore_start_conduit(
            MatrixConduit, hs.conduit_settings(str(tmp_path / "state"))
        )
        await hs.wait_until(lambda: hs.waiting > 0, WITHIN)

        async def limit() -> None:
            hs.fail_next("send", retry_after_ms=RETRY_AFTER_MS)

        await run.run([(after, limit) for after in LIMITS])
        await conduit.stop()
    finally:
        await hs.close()
    counts = run.counts()
    print(f"matrix burst: {counts}, 429s served {hs.limited}, sends too early {hs.early}")
    assert counts == {
        "sent": MESSAGES,
        "answered": MESSAGES,
        "lost": 0,
        "doubled": 0,
        "out_of_order": 0,
    }
    assert (hs.limited, hs.early) == (len(LIMITS), 0)
