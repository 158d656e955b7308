"""`/metrics` of a real `ore conduit telegram --health-port`: answers and relayed copies
delivered, and copies Telegram refused, are counted (issue 33), and nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_telegram.testing import FakeTelegram
from ore_core.conduit.control import ControlClient
from ore_core.testing.conduit_conformance import ConduitCore
from ore_core.testing.conduit_process import ConduitProcess, free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHAT = 5151
LINKED = 5252
THREAD = "metrics-room"
PATIENCE = 60.0
DELIVERED = ("ore_conduit_messages_delivered_total", (("conduit", "telegram"),))
FAILED = ("ore_conduit_delivery_failures_total", (("conduit", "telegram"),))


async def test_metrics_count_what_reached_telegram_and_what_it_refused(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    url = ore_conduit_core.nats_url
    fake = await FakeTelegram().start()
    settings = fake.conduit_settings(str(tmp_path / "state"), chat_per_second=50, poll_timeout=5)
    conduit = ConduitProcess.isolated("telegram", url, tmp_path, settings, health_port=free_port())
    terminal = ore_conduit_core.client_for("stdin")
    try:
        conduit.start()
        await fake.wait_until(lambda: fake.polls > 0, PATIENCE)
        for n in range(3):  # three answers
            await fake.user_says(CHAT, f"question {n}")
        await fake.wait_until(lambda: len(fake.bot_texts(CHAT)) == 3, PATIENCE)

        await terminal.create_thread(THREAD)
        endpoint = {"namespace": "telegram", "key": "telegram.thread", "value": f"{LINKED}:0:0"}
        link = {"thread": THREAD, "endpoint": endpoint, "answer": "none"}
        await ControlClient.beside(terminal).call("links.add", link)
        async with terminal.events(THREAD, kinds={"turn_complete"}) as feed:
            await fake.user_says(LINKED, "here")  # the linked chat's first message
            await anext(aiter(feed))  # recorded (no answer): the conduit knows the chat
        fake.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked")
        await terminal.send(THREAD, "refused", id="s-1", user_name="cy")
        await terminal.send(THREAD, "copied", id="s-2", user_name="cy")
        await fake.wait_until(lambda: fake.bot_texts(LINKED) == ["cy (stdin): copied"], PATIENCE)
        # A second refusal closes the count: the thread's events are handled in order, so
        # once it is counted every delivery before it is too.
        fake.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked")
        await terminal.send(THREAD, "refused too", id="s-3", user_name="cy")
        samples = await conduit.metrics_when(lambda s: s.get(FAILED) == 2)
        # Three answers and one copy; the unanswered "here" (a relay without answers)
        # showed nothing and is no delivery.
        assert samples[DELIVERED] == 4
    finally:
        await conduit.astop()
        await fake.close()
