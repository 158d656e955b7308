"""The bridge on a linked thread (issue 29): another endpoint's messages are published
as `relayed` replies with the sender's label, its own never come back, and what came
while the bridge was down is published when it is back. Real core and nats-server."""

from __future__ import annotations

import json

from ore_conduit_nats.testing import PlainNatsClient
from ore_core import Role, TurnCompleteEvent
from ore_core.conduit import ConduitClient, ControlClient, part_key
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit

from .conftest import RunBridge

THREAD = "shared-1"
CHANNEL = "room"


async def linked(core: ConduitCore) -> ConduitClient:
    """THREAD, made by namespace `web`, linked to the bridge's channel; web's client."""
    web = core.client_for("web")
    await web.create_thread(THREAD)
    endpoint = {"namespace": "nats", "key": "nats.channel", "value": CHANNEL}
    await ControlClient.beside(core.client).call(
        "links.add", {"thread": THREAD, "endpoint": endpoint}
    )
    return web


async def recorded(web: ConduitClient, text: str, event_id: str) -> str:
    """Send `text` from the web endpoint as Ana; its user turn's id once recorded."""
    async with web.events(THREAD, kinds={"turn_complete"}) as feed:
        await web.send(THREAD, text, id=event_id, user_name="Ana")
        async for delivery in feed:
            event = delivery.event
            if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
                return event.turn.id
    raise AssertionError("the feed ended")


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


async def test_a_linked_channel_that_never_spoke_gets_the_copies(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    await run_bridge(output="json")
    await web.send(THREAD, "first words", id="w-1", user_name="Ana")
    assert (await json_out(raw))["relayed"] == "Ana (web): first words"


async def test_the_core_shows_a_linked_namespace_its_own_endpoint_key(
    ore_conduit_core: ConduitCore,
) -> None:
    await linked(ore_conduit_core)
    nats_side = ore_conduit_core.client_for("nats")
    metadata = (await nats_side.get_thread(THREAD)).metadata
    assert metadata["nats.channel"] == CHANNEL
    web_view = (await ore_conduit_core.client_for("web").get_thread(THREAD)).metadata
    assert "nats.channel" not in web_view


async def test_a_copy_is_published_with_its_message_id_and_reported_delivered(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    await run_bridge(output="json")
    turn = await recorded(web, "hi", "w-1")
    msg = await raw.next_out(CHANNEL)
    message_id = part_key(f"{THREAD}.{turn}", 0)
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == message_id
    assert "Ore-Resent" not in msg.headers
    await web.send(THREAD, "next", id="w-2", user_name="Ana")
    await raw.next_out(CHANNEL)  # the first copy was reported before this one was sent
    nats_side = ore_conduit_core.client_for("nats")
    assert await nats_side.delivery_get(THREAD, turn) == [message_id]


async def test_a_copy_reported_delivered_before_a_restart_is_not_published_again(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    turn = await recorded(web, "sent before", "w-1")
    nats_side = ore_conduit_core.client_for("nats")
    await nats_side.report_delivery(
        THREAD, sequence=1, turn=turn, status="delivered", platform_ids=["earlier"]
    )
    await run_bridge(output="json")
    await web.send(THREAD, "sent after", id="w-2", user_name="Ana")
    assert (await json_out(raw))["relayed"] == "Ana (web): sent after"


async def test_a_copy_claimed_by_a_killed_run_is_sent_again_marked_resent(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    bridge = await run_bridge(output="json")
    await bridge.stop()  # its durable cursor is saved: it reads on from there
    turn = await recorded(web, "maybe out", "w-1")
    message_id = part_key(f"{THREAD}.{turn}", 0)
    nats_side = ore_conduit_core.client_for("nats")
    claim = await nats_side.report_delivery(
        THREAD, sequence=1, turn=turn, status="sending", platform_ids=[message_id]
    )
    assert claim["recorded"] is True
    await bridge.start()
    msg = await raw.next_out(CHANNEL)
    assert msg.headers is not None
    assert (msg.headers["Nats-Msg-Id"], msg.headers["Ore-Resent"]) == (message_id, "true")
    await web.send(THREAD, "next", id="w-2", user_name="Ana")
    await raw.next_out(CHANNEL)  # the resent copy was reported before this one was sent
    assert await nats_side.delivery_get(THREAD, turn) == [message_id]


async def test_another_endpoint_s_answer_is_published_once_when_the_gateway_answers_all(
    ore_conduit_core: ConduitCore, raw: PlainNatsClient, run_bridge: RunBridge
) -> None:
    web = await linked(ore_conduit_core)
    await ControlClient.beside(ore_conduit_core.client).call(
        "links.add",
        {
            "thread": THREAD,
            "endpoint": {"namespace": "nats", "key": "nats.channel", "value": CHANNEL},
            "answer": "all",
            "exist_ok": True,
        },
    )
    await run_bridge(output="json")
    await web.send(THREAD, "hi", id="w-1", user_name="Ana")
    assert (await json_out(raw))["relayed"] == "Ana (web): hi"
    msg = await raw.next_out(CHANNEL)
    answer = (await web.turns(THREAD))[-1]
    assert json.loads(msg.data)["text"] == "echo: hi"
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == part_key(f"{THREAD}.{answer.id}", 0)
    await web.send(THREAD, "again", id="w-2", user_name="Ana")
    assert (await json_out(raw))["relayed"] == "Ana (web): again"  # nothing in between
