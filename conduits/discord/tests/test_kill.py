"""kill -9 of `ore conduit discord` at the instant of a send: no message lost, none shown
twice, none out of order.

The conduit runs as its own process against the fake Discord and an in-process core
(echo answers). Users in three channels write a message each per round; twice, the
fake carries out the conduit's next post and holds its answer, and the conduit is
killed (SIGKILL, by pid) while it waits: Discord made the message, the conduit never
learned its id. After the restart the engine posts that part again with the same nonce
(derived from the ledger), which Discord answers with the message it made. Messages
written while the conduit is down arrive through the resumed gateway session. Counted
per channel: sent, answered, lost, doubled, out of order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_discord.testing import FakeDiscord
from ore_core.testing.conduit_conformance import ECHO_PREFIX, ConduitCore
from ore_core.testing.conduit_process import ConduitProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNELS = 3
ROUNDS = 10
KILL_AT = (3, 7)  # the rounds whose first post the conduit is killed in
WITHIN = 60.0  # seconds any one wait for answers may take on a loaded machine


def audit(fake: FakeDiscord, sent: dict[str, list[str]]) -> dict[str, int]:
    counts = {"sent": 0, "answered": 0, "lost": 0, "doubled": 0, "out_of_order": 0}
    for channel, texts in sent.items():
        wanted = [ECHO_PREFIX + text for text in texts]
        shown = fake.bot_texts(channel)
        counts["sent"] += len(wanted)
        counts["answered"] += sum(1 for w in wanted if w in shown)
        counts["lost"] += sum(1 for w in wanted if w not in shown)
        counts["doubled"] += sum(shown.count(w) - 1 for w in wanted if w in shown)
        firsts = [shown.index(w) for w in wanted if w in shown]
        counts["out_of_order"] += firsts != sorted(firsts)
    return counts


@pytest.mark.timeout(600)  # three starts and ten rounds, on a machine that may be loaded
async def test_a_conduit_killed_at_a_send_shows_every_answer_once(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    async with FakeDiscord() as fake:
        settings = {
            "token": fake.token,
            "api_url": f"{fake.url}/api/v10",
            "state_dir": str(tmp_path / "discord-state"),
            "identify_delay": 0,
        }
        conduit = ConduitProcess.isolated("discord", ore_conduit_core.nats_url, tmp_path, settings)
        channels = [fake.add_channel() for _ in range(CHANNELS)]
        sent: dict[str, list[str]] = {channel: [] for channel in channels}

        async def started() -> None:
            readied = fake.gateway.readied
            await conduit.start_ready(lambda: fake.gateway.readied > readied, fake.wait_until)

        def answered() -> bool:
            return all(ECHO_PREFIX + t in fake.bot_texts(c) for c, ts in sent.items() for t in ts)

        try:
            await started()
            for number in range(ROUNDS):
                held = fake.held
                if number in KILL_AT:
                    fake.hold_next("post")
                for channel in channels:
                    text = f"{channel[-4:]} m{number}"
                    sent[channel].append(text)
                    await fake.user_says(channel, text)
                if number in KILL_AT:
                    await fake.wait_until(lambda held=held: fake.held > held, WITHIN)
                    conduit.kill()
                    fake.let_go()
                    await started()
                try:
                    await fake.wait_until(lambda: answered(), WITHIN)
                except TimeoutError:
                    break
        finally:
            await conduit.astop()
        counts = audit(fake, sent)
        print(f"discord kill -9 x{len(KILL_AT)}: {counts}")
        assert counts == {
            "sent": CHANNELS * ROUNDS,
            "answered": CHANNELS * ROUNDS,
            "lost": 0,
            "doubled": 0,
            "out_of_order": 0,
        }, conduit.log.read_text()[-3000:]
