"""`/metrics` of a real `ore conduit slack --health-port`: answers and relayed copies
delivered, and copies Slack refused, are counted (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_slack.testing import FakeSlack
from ore_core.conduit.control import ControlClient
from ore_core.testing.conduit_conformance import ConduitCore
from ore_core.testing.conduit_process import ConduitProcess, free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNEL = "CGENERAL"
PATIENCE = 60.0
DELIVERED = ("ore_conduit_messages_delivered_total", (("conduit", "slack"),))
FAILED = ("ore_conduit_delivery_failures_total", (("conduit", "slack"),))


async def test_metrics_count_what_reached_slack_and_what_it_refused(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    url = ore_conduit_core.nats_url
    fake = await FakeSlack().start()
    conduit = ConduitProcess.isolated(
        "slack", url, tmp_path, fake.conduit_settings(), health_port=free_port()
    )
    terminal = ore_conduit_core.client_for("stdin")
    try:
        conduit.start()
        await fake.wait_connected(1, PATIENCE)
        root = await fake.user_says(CHANNEL, "start")  # one answer
        await fake.wait_until(lambda: len(fake.answers(CHANNEL, root.ts)) == 1, PATIENCE)
        (thread,) = (
            await ControlClient.beside(terminal).call("threads.list", {"namespace": "slack"})
        )["threads"]
        endpoint = {"namespace": "stdin", "key": "id", "value": thread}
        await ControlClient.beside(terminal).call(
            "links.add", {"thread": thread, "endpoint": endpoint}
        )
        fake.fail_next("chat.postMessage", error="channel_not_found")
        await terminal.send(thread, "refused", id="s-1", user_name="cy")
        await terminal.send(thread, "copied", id="s-2", user_name="cy")
        await fake.wait_until(
            lambda: "cy (stdin): copied" in fake.rendered_thread(CHANNEL, root.ts), PATIENCE
        )

        samples = await conduit.metrics_when(lambda s: s.get(DELIVERED) == 2)
        assert samples[FAILED] == 1
    finally:
        await conduit.astop()
        await fake.close()
