"""The bridge on a linked thread (issue 29): another endpoint's messages are published
as `relayed` replies with the sender's label, its own never come back, and what came
while the bridge was down is published when it is back. Real core and nats-server."""

from __future__ import annotations

import json

from ore_conduit_nats.testing import PlainNatsClient
from ore_core.conduit import ConduitClient
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit

from .conftest import RunBridge

THREAD = "shared-1"
CHANNEL = "room"


async def linked(core: ConduitCore) -> ConduitClient:
    """THREAD, made by namespace `web`, linked to the bridge's channel; web's client."""
    web = core.client_for("web")
    await web.create_thread(THREAD)
    endpoint = {"namespace": "nats", "key": "nats.channel", "value": CHANNEL}
    await core.client.admin_call("links.add", {"thread": THREAD, "endpoint": endpoint})
    return web


async def json_out(raw: PlainNatsClient) -> dict[str, str]:
    body: dict[str, str] = json.loads((await raw.next_out(CHANNEL)).data)
    return body


async def joined(raw: PlainNatsClient) -> None:
    """The bridge's own first message on the channel, answered (it reached the thread)."""
    await raw.post_user_message(CHANNEL, "hello from nats", "n-1")
    assert (await json_out(raw))["text"] == "echo: hello from nats"


async def test_another_endpoint_s_message_is_relayed_with_its_label(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    await run_bridge(output="json")
    await joined(raw)
    await web.send(THREAD, "hi from the web", id="w-1", user_name="Ana")
    assert await json_out(raw) == {
        "relayed": "Ana (web): hi from the web",
        "thread_id": THREAD,
        "in_reply_to": None,
    }


async def test_the_bridge_s_own_message_and_others_answers_are_not_published(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    await run_bridge(output="json")
    await joined(raw)
    await web.send(THREAD, "one", id="w-1", user_name="Ana")
    await raw.post_user_message(CHANNEL, "two", "n-2")
    outs = [await json_out(raw) for _ in range(2)]
    assert outs == [
        {"relayed": "Ana (web): one", "thread_id": THREAD, "in_reply_to": None},
        {"text": "echo: two", "thread_id": THREAD, "in_reply_to": "n-2"},
    ]


async def test_what_was_relayed_while_the_bridge_was_down_comes_when_it_is_back(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    bridge: RunningConduit = await run_bridge(output="json")
    await joined(raw)
    await bridge.stop()
    for n in range(3):
        await web.send(THREAD, f"while down {n}", id=f"w-{n}", user_name="Ana")
    await bridge.start()
    got = [(await json_out(raw))["relayed"] for _ in range(3)]
    assert got == [f"Ana (web): while down {n}" for n in range(3)]
