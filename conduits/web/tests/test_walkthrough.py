"""docs/bridging.md's web walk-through with real processes: a page's thread and a NATS
channel (`ore conduit nats` as a process), linked by the operator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.msg import Msg

from ore_conduit_web.testing import TIMEOUT, Events, WebStack, properties_stored, read_events
from ore_core.testing.conduit_process import ConduitProcess

pytestmark = pytest.mark.slow

PATIENCE = 60.0  # a loaded machine starts a Python process slowly


async def test_a_page_and_a_nats_channel_see_each_other_s_messages_labelled(
    stack: WebStack, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    env = {
        "ORE_LOAD_PLUGINS": "ore-conduit-nats",
        "XDG_STATE_HOME": str(tmp_path / "nats-state"),
        "XDG_CONFIG_HOME": str(tmp_path / "nats-config"),
    }
    bridge = ConduitProcess(
        "nats", stack.nats_url, tmp_path / "nats.log", {"output": "json"}, env=env
    )
    raw = await nats.connect(stack.nats_url)
    room_out: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def on_room(msg: Msg) -> None:
        await room_out.put(json.loads(msg.data))

    try:
        thread = (await http.post("/api/threads", json={})).json()["id"]
        user = (await http.get("/api/me")).json()["user"]
        endpoint = {"namespace": "nats", "key": "nats.channel", "value": "room"}
        await raw.request(
            "ore.admin.links.add",
            json.dumps({"thread": thread, "endpoint": endpoint, "answer": "none"}).encode(),
            timeout=TIMEOUT,
        )
        async with asyncio.timeout(TIMEOUT):  # see test_bridge.LINK_SETTINGS: a core race
            await read_events(http, thread, properties_stored("ore.gateway.label"), after="0")
        await raw.subscribe("bridge.room.out", cb=on_room)
        bridge.start()
        message = {"text": "hi from NATS", "name": "Bo", "id": "n1"}

        def relayed_from_nats(events: Events) -> bool:
            return any(d.get("relay", {}).get("label") == "Bo (nats)" for _, d in events.stored())

        async def publish_until_shown() -> None:
            # The NATS conduit subscribes a moment after it starts: the same id is
            # published again until the page shows it (it is stored once).
            while True:
                await raw.publish("bridge.room.in", json.dumps(message).encode())
                try:
                    async with asyncio.timeout(1.0):
                        await read_events(http, thread, relayed_from_nats, after="0")
                    return
                except TimeoutError:
                    continue

        async with asyncio.timeout(PATIENCE):
            await publish_until_shown()
        found = (await http.get(f"/api/threads/{thread}")).json()
        assert [(v["text"], v["relay"]["label"]) for v in found["turns"]] == [
            ("hi from NATS", "Bo (nats)")
        ]
        sent = await http.post(f"/api/threads/{thread}/messages", json={"text": "hi from the page"})
        assert sent.status_code == 202, sent.text
        async with asyncio.timeout(PATIENCE):
            while True:
                reply = await room_out.get()
                if "relayed" in reply:
                    break
        assert reply["relayed"] == f"{user} (web): hi from the page"
    finally:
        await raw.close()
        await bridge.astop()
