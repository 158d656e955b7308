"""`ore conduit web` as a real process: what it prints, what survives a kill -9."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from ore_conduit_web.testing import TIMEOUT, Events, answered, properties_stored, read_events
from ore_core import EventContext, UserMessageEvent
from ore_core.conduit import ControlClient, SettingsCache, classify
from ore_core.testing.conduit_conformance import ConduitCore
from ore_core.testing.conduit_process import ConduitProcess

pytestmark = pytest.mark.slow

_URL = re.compile(r"ore web: open (http://\S+)")


class WebProcess:
    """The conduit process and the URL it printed last."""

    def __init__(
        self, core: ConduitCore, directory: Path, env: dict[str, str] | None = None
    ) -> None:
        env = {
            "XDG_STATE_HOME": str(directory / "state"),
            "XDG_CONFIG_HOME": str(directory / "config"),
            **(env or {}),
        }
        self.log = directory / "web.log"
        self.process = ConduitProcess("web", core.nats_url, self.log, {"port": 0}, env)
        self.printed = 0

    async def start(self) -> str:
        """Start it (again) and wait for the URL it prints; that URL."""
        self.process.start()
        async with asyncio.timeout(TIMEOUT * 6):  # a loaded machine starts Python slowly
            while True:
                found = _URL.findall(self.log.read_text() if self.log.exists() else "")
                if len(found) > self.printed:
                    self.printed = len(found)
                    return str(found[-1])
                assert self.process.process is not None
                assert self.process.process.poll() is None, self.log.read_text()
                await asyncio.sleep(0.05)  # polling the log the process writes


@pytest_asyncio.fixture
async def web(ore_conduit_core: ConduitCore, tmp_path: Path) -> AsyncIterator[WebProcess]:
    running = WebProcess(ore_conduit_core, tmp_path)
    try:
        yield running
    finally:
        await running.process.astop()


async def test_uploads_are_checked_against_the_operator_s_files_settings(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    web = WebProcess(ore_conduit_core, tmp_path, {"ORE_FILES__MAX_SIZE": "1000"})
    try:
        base, token = _split(await web.start())
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/plain"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as http:
            assert (await http.get("/api/me")).json()["files"]["max_size"] == 1000
            upload = await http.post("/api/files", params={"name": "a.txt"}, content=bytes(1001))
    finally:
        await web.process.astop()
    assert upload.status_code == 413
    assert "over the 1.0 kB limit for files" in upload.json()["error"]["message"]


def _split(url: str) -> tuple[str, str]:
    base, _, token = url.partition("/?token=")
    return base, token


async def test_it_prints_a_url_that_signs_in_and_keeps_the_token_across_runs(
    web: WebProcess, tmp_path: Path
) -> None:
    first = await web.start()
    base, token = _split(first)
    async with httpx.AsyncClient(base_url=base) as browser:
        assert (await browser.get(first.removeprefix(base))).status_code == 303
        assert (await browser.get("/api/threads")).status_code == 200
    await web.process.astop()
    assert web.process.process is not None
    assert web.process.process.returncode == 0
    assert _split(await web.start())[1] == token
    tokens = tmp_path / "state" / "ore" / "web" / "tokens.json"
    assert tokens.stat().st_mode & 0o777 == 0o600


async def test_a_page_resumes_after_a_kill_with_exactly_the_events_it_missed(
    web: WebProcess, ore_conduit_core: ConduitCore
) -> None:
    gate = ore_conduit_core.processor.gate()
    base, token = _split(await web.start())
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as http:
        thread_id = (await http.post("/api/threads", json={})).json()["id"]
        await http.post(f"/api/threads/{thread_id}/messages", json={"text": "before the kill"})
        async with asyncio.timeout(TIMEOUT):
            await gate.started.wait()
            seen = await read_events(
                http,
                thread_id,
                lambda e: any(d.get("kind") == "properties" for _, d in e.stored()),
                after="0",
            )
    last_id = seen.stored()[-1][0]
    web.process.kill()
    gate.release()  # the answer is stored while the conduit is down
    base = _split(await web.start())[0]  # the token stays; the port may change
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as http:
        async with asyncio.timeout(TIMEOUT):
            resumed = await read_events(http, thread_id, answered(), last_event_id=last_id)
            everything = await read_events(http, thread_id, answered(), after="0")
    missed = everything.stored()[everything.stored().index(seen.stored()[-1]) + 1 :]
    assert resumed.stored() == missed
    assert [d["kind"] for _, d in missed][-1] == "lifecycle"


async def test_a_bridge_survives_a_kill_of_the_web_conduit_counted_both_ways(
    web: WebProcess, ore_conduit_core: ConduitCore
) -> None:
    """A web thread linked to the endpoint `room` (an SDK client, `answer = none`): each
    side sends N messages, half before a kill -9 of the web conduit and half while it is
    down or after; the page resumes with Last-Event-ID. Each side is shown every message
    of the other exactly once, in order, labelled, and none of its own."""
    count = 8
    room = ore_conduit_core.client_for("room")
    base, token = _split(await web.start())
    headers = {"Authorization": f"Bearer {token}"}
    context = EventContext(provenance="room", user="u-bo", user_name="Bo")

    async def room_says(n: int) -> None:
        said = UserMessageEvent(id=f"r{n}", content=f"room {n}", context=context)
        await room.send(thread_id, said)

    def relayed(events: Events) -> list[dict[str, Any]]:
        return [d for _, d in events.stored() if d.get("relay", {}).get("action") == "relayed"]

    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as http:
        thread_id = (await http.post("/api/threads", json={})).json()["id"]
        user = (await http.get("/api/me")).json()["user"]
        endpoint = {"namespace": "room", "key": "room.chan", "value": "lobby"}
        link = {"thread": thread_id, "endpoint": endpoint, "answer": "none"}
        await ControlClient.beside(ore_conduit_core.client).call("links.add", link)
        async with asyncio.timeout(TIMEOUT):  # see test_bridge.LINK_SETTINGS: a core race
            await read_events(http, thread_id, properties_stored("ore.gateway.label"), after="0")
        on_room: list[str] = []
        async with room.events(thread_id) as feed:

            async def read_room() -> None:
                settings = SettingsCache()
                settings.load(thread_id, (await room.get_thread(thread_id)).metadata)
                async for delivery in feed:
                    if delivery.sequence is not None:
                        shown = classify(delivery, "room", settings.get(thread_id))
                        if shown.action == "relayed":
                            on_room.append(shown.shown)
                        if len(on_room) == count:
                            return

            reader = asyncio.create_task(read_room())
            for n in range(count // 2):
                await room_says(n)
                sent = await http.post(
                    f"/api/threads/{thread_id}/messages",
                    json={"text": f"web {n}", "client_id": f"w{n}"},
                )
                assert sent.status_code == 202, sent.text
            async with asyncio.timeout(TIMEOUT):
                seen = await read_events(
                    http, thread_id, lambda e: len(relayed(e)) == count // 2, after="0"
                )
            web.process.kill()
            for n in range(count // 2, count):
                await room_says(n)  # stored while the web conduit is down
            base = _split(await web.start())[0]
            async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as again:
                for n in range(count // 2, count):
                    sent = await again.post(
                        f"/api/threads/{thread_id}/messages",
                        json={"text": f"web {n}", "client_id": f"w{n}"},
                    )
                    assert sent.status_code == 202, sent.text
                async with asyncio.timeout(TIMEOUT):
                    resumed = await read_events(
                        again,
                        thread_id,
                        lambda e: len(relayed(e)) == count - count // 2,
                        last_event_id=seen.stored()[-1][0],
                    )
                    await reader
    on_web = [
        (d["relay"]["label"], d["turn"]["artifacts"][0]["data"]["content"])
        for d in relayed(seen) + relayed(resumed)
    ]
    assert on_web == [("Bo (room)", f"room {n}") for n in range(count)]
    assert on_room == [f"{user} (web): web {n}" for n in range(count)]
