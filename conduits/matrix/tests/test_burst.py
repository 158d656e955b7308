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
from ore_core.testing.long_run import audit

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
        room = await hs.create_room()
        conduit = await ore_start_conduit(
            MatrixConduit, hs.conduit_settings(str(tmp_path / "state"))
        )
        await hs.wait_until(lambda: hs.waiting > 0, WITHIN)
        texts = [f"burst {n}" for n in range(MESSAGES)]

        def answered() -> int:
            shown = set(hs.bot_texts(room))
            return sum(1 for text in texts if ECHO_PREFIX + text in shown)

        for text in texts:
            await hs.user_says(room, text)
        for after in LIMITS:
            await hs.wait_until(lambda after=after: answered() >= after, WITHIN)
            hs.fail_next("send", retry_after_ms=RETRY_AFTER_MS)
        await hs.wait_until(lambda: answered() == MESSAGES, WITHIN)
        await conduit.stop()
    finally:
        await hs.close()
    counts = audit({room: texts}, hs.bot_texts, lambda text: ECHO_PREFIX + text)
    print(f"matrix burst: {counts}, 429s served {hs.limited}, sends too early {hs.early}")
    assert counts == {
        "sent": MESSAGES,
        "answered": MESSAGES,
        "lost": 0,
        "doubled": 0,
        "out_of_order": 0,
    }
    assert (hs.limited, hs.early) == (len(LIMITS), 0)
