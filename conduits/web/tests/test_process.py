"""`ore conduit web` as a real process: what it prints, what survives a kill -9."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from ore_conduit_web.testing import TIMEOUT, answered, read_events
from ore_core.testing.conduit_conformance import ConduitCore
from ore_core.testing.conduit_process import ConduitProcess

pytestmark = pytest.mark.slow

_URL = re.compile(r"ore web: open (http://\S+)")


class WebProcess:
    """The conduit process and the URL it printed last."""

    def __init__(self, core: ConduitCore, directory: Path) -> None:
        env = {
            "XDG_STATE_HOME": str(directory / "state"),
            "XDG_CONFIG_HOME": str(directory / "config"),
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
