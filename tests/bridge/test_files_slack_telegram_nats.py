"""Files across a gateway Slack <-> Telegram <-> NATS (issue 39): one image and one 5 MB
PDF sent from each endpoint reach every other endpoint once, byte for byte, and never
come back to their origin.

The three conduits run on the engine in this process, Slack and Telegram on their
fakes, with the kit's core on a real nats-server. A Slack thread gets its ore thread
the usual way (a user writes to the bot); a Telegram chat and the NATS channel `room`
are linked to it with `answer = "none"`. What each endpoint shows of the files is
counted by sha256: what the fake Slack and the fake Telegram received as uploads, and
for NATS the references its JSON output carries, fetched from ore and checked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from ore_conduit_nats import NatsBridge
from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import FakeSlack
from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import FakeTelegram
from ore_core.artifacts import Attachment
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.conduit import ConduitClient, ControlClient
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit
from tests.bridge.gateway import PATIENCE, bridge_listening

pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(300)]

CHANNEL = "CGENERAL"  # the fake Slack's channel
CHAT = 3001  # the Telegram chat
ROOM = "room"
ENDPOINTS = ("slack", "telegram", "nats")
PDF_SIZE = 5 * 1024 * 1024
PDF = "application/pdf"


def files_of(origin: str) -> dict[str, bytes]:
    """The image and the PDF `origin` sends, different for every origin."""
    seed = hashlib.sha256(origin.encode()).digest()
    image = b"\x89PNG\r\n\x1a\n" + seed * 2048  # 64 KiB
    if origin == "telegram":
        image = b"\xff\xd8\xff\xe0" + seed * 2048  # Telegram's photos are JPEGs
    pdf = (b"%PDF-1.7\n" + seed * (PDF_SIZE // 32))[:PDF_SIZE]
    return {"image": image, "pdf": pdf}


def tally(received: list[str], endpoint: str) -> dict[str, int]:
    """delivered, lost, doubled, echoed: `received` (sha256s) against what the others sent."""
    wanted = {
        hashlib.sha256(data).hexdigest()
        for origin in ENDPOINTS
        if origin != endpoint
        for data in files_of(origin).values()
    }
    own = {hashlib.sha256(data).hexdigest() for data in files_of(endpoint).values()}
    seen = Counter(received)
    return {
        "delivered": len(set(seen) & wanted),
        "lost": len(wanted - set(seen)),
        "doubled": sum(n - 1 for n in seen.values()),
        "echoed": len(set(seen) & own),
    }


async def test_an_image_and_a_5mb_pdf_from_each_endpoint_reach_every_other_once_intact(
    ore_conduit_core: ConduitCore,
    ore_start_conduit: StartConduit,
    ore_nats_server: EmbeddedNatsServer,
    tmp_path: Path,
) -> None:
    slack = await FakeSlack().start()
    telegram = await FakeTelegram().start()
    raw = await nats.connect(ore_conduit_core.nats_url)
    nats_files = await ConduitClient.connect(ore_conduit_core.nats_url, name="nats")
    conduits: list[RunningConduit] = []
    nats_shown: list[Attachment] = []
    changed = asyncio.Event()

    async def on_room(msg: Msg) -> None:
        body = json.loads(msg.data)
        nats_shown.extend(Attachment.from_dict(ref) for ref in body.get("attachments", []))
        changed.set()

    try:
        telegram.chat(CHAT, "private")
        tg_settings = telegram.conduit_settings(str(tmp_path / "tg"), flush_interval=0.05)
        conduits += [
            await ore_start_conduit(SlackConduit, slack.conduit_settings()),
            await ore_start_conduit(TelegramConduit, tg_settings),
            await ore_start_conduit(NatsBridge, {"output": "json"}),
        ]
        await slack.wait_connected(1, PATIENCE)
        root = await slack.user_says(CHANNEL, "start")
        await slack.wait_until(lambda: len(slack.answers(CHANNEL, root.ts)) == 1, PATIENCE)
        control = ControlClient.beside(ore_conduit_core.client)
        (thread,) = (await control.call("threads.list", {"namespace": "slack"}))["threads"]
        for endpoint in (
            {"namespace": "telegram", "key": "telegram.thread", "value": f"{CHAT}:0:0"},
            {"namespace": "nats", "key": "nats.channel", "value": ROOM},
        ):
            body = {"thread": thread, "endpoint": endpoint, "answer": "none"}
            await control.call("links.add", body)
        await raw.subscribe(f"bridge.{ROOM}.out", cb=on_room)
        await bridge_listening(ore_nats_server.monitor_url)
        hello = {"text": "nats here", "id": "n-hello", "name": "bo"}
        await raw.publish(f"bridge.{ROOM}.in", json.dumps(hello).encode())
        await slack.wait_until(
            lambda: "bo (nats): nats here" in slack.rendered_thread(CHANNEL, root.ts), PATIENCE
        )

        async def from_slack() -> None:
            for kind, data in files_of("slack").items():
                name, mimetype = (
                    ("a.png", "image/png") if kind == "image" else ("a.pdf", "application/pdf")
                )
                await slack.user_shares_file(
                    CHANNEL, data, f"slack {kind}", name=name, mimetype=mimetype,
                    thread_ts=root.ts, mention=False, user="UANA",
                )  # fmt: skip

        async def from_telegram() -> None:
            sent = files_of("telegram")
            await telegram.user_sends_photo(CHAT, [sent["image"]], "telegram image")
            await telegram.user_sends_file(
                CHAT, sent["pdf"], "telegram pdf", file_name="t.pdf", mime_type="application/pdf"
            )

        async def from_nats() -> None:
            for kind, data in files_of("nats").items():
                ref = await nats_files.upload(data, "n.png" if kind == "image" else "n.pdf")
                message = {"text": f"nats {kind}", "id": f"n-{kind}", "name": "bo"}
                message["attachments"] = [ref.to_dict()]
                await raw.publish(f"bridge.{ROOM}.in", json.dumps(message).encode())

        await asyncio.gather(from_slack(), from_telegram(), from_nats())

        received: dict[str, Callable[[], list[str]]] = {
            "slack": lambda: [
                hashlib.sha256(data).hexdigest() for _, data in slack.bot_files(CHANNEL, root.ts)
            ],
            "telegram": lambda: [
                hashlib.sha256(data).hexdigest() for _, data in telegram.bot_files(CHAT)
            ],
            "nats": lambda: [a.sha256 for a in nats_shown],
        }

        async def nats_changes(predicate: Callable[[], bool], within: float) -> None:
            async with asyncio.timeout(within):
                while not predicate():
                    changed.clear()
                    await changed.wait()

        waits: dict[str, Callable[[Callable[[], bool], float], Any]] = {
            "slack": slack.wait_until,
            "telegram": telegram.wait_until,
            "nats": nats_changes,
        }
        wanted = 4  # an image and a PDF from each of the two others
        try:
            for name, wait in waits.items():
                await wait(lambda name=name: len(set(received[name]())) >= wanted, PATIENCE)
        except TimeoutError:
            pass  # the counts below say what is missing
        counts = {e: tally(received[e](), e) for e in ENDPOINTS}
        print(f"files slack <-> telegram <-> nats: {counts}")
        clean = {"delivered": wanted, "lost": 0, "doubled": 0, "echoed": 0}
        assert counts == dict.fromkeys(ENDPOINTS, clean)
        for attachment in nats_shown:  # what NATS clients fetch is what was sent
            data = await nats_files.fetch(thread, attachment)
            assert hashlib.sha256(data).hexdigest() == attachment.sha256
    finally:
        for conduit in reversed(conduits):  # before their platforms go away
            await conduit.stop()
        await nats_files.close()
        await raw.close()
        await telegram.close()
        await slack.close()
