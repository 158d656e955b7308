"""`ore serve` restarted three times under two running conduits: they find it each time.

A real `ore serve` (embedded nats-server), `ore conduit nats` and `ore conduit web`,
each a process of its own on the same temporary user directories (the conduits find
the core through the serve record, as a user's would). The core is stopped with
Ctrl-C and restarted on its port, killed with SIGKILL and restarted on its port, then
stopped and restarted on another port. After each start every conduit must answer
every message sent through it, once. The counts are printed (run with -s).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import pytest
from nats.errors import NoRespondersError

from tests.ore_process import ORE, kill_all

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

TIMEOUT = 60.0
MESSAGES = 3  # per conduit and start of the core
_WEB_URL = re.compile(r"ore web: open (http://\S+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Machine:
    """The processes of one user's machine (their own XDG dirs); killed by pid at the end."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ORE_")},
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "ORE_LOAD_PLUGINS": "ore-conduit-nats,ore-conduit-web",
            "ORE_LOG__FORMAT": "json",
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        self.serving: subprocess.Popen[bytes]  # the latest `ore serve`

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.home / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [str(ORE), *args], stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def record(self, serve: subprocess.Popen[bytes]) -> dict[str, object] | None:
        path = self.home / "state" / "ore" / "serve.d" / f"{serve.pid}.json"
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    async def serve(self, port: int) -> str:
        """`ore serve --port PORT`, once it recorded itself: its NATS URL."""
        serve = self.serving = self.start("serve", "serve", "--port", str(port))
        async with asyncio.timeout(TIMEOUT):
            while (record := self.record(serve)) is None:
                assert serve.poll() is None, self.log("serve")
                await asyncio.sleep(0.05)  # another process writes it: polled
        return str(record["nats_url"])

    def stop_all(self) -> None:
        kill_all(self.processes)


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[_Machine]:
    running = _Machine(tmp_path)
    yield running
    running.stop_all()


async def _ask_bridge(url: str, text: str, replies: list[str]) -> None:
    """Request `text` on `bridge.restart.in`; a request nobody received is sent again."""
    nc = await nats.connect(url)
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                try:
                    reply = await nc.request("bridge.restart.in", text.encode(), timeout=TIMEOUT)
                    replies.append(reply.data.decode())
                    return
                except NoRespondersError:  # the conduit has not reconnected yet
                    await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def _web_ready(http: httpx.AsyncClient) -> None:
    """Wait until the page's /readyz says a core answers through its NATS connection."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            if (await http.get("/readyz")).status_code == 200:
                return
            await asyncio.sleep(0.1)  # it reconnects on its own: polled


async def _web_answers(http: httpx.AsyncClient, thread_id: str) -> list[str]:
    tree = (await http.get(f"/api/threads/{thread_id}")).json()
    return [str(turn["text"]) for turn in tree["turns"] if turn["role"] == "assistant"]


async def test_conduits_follow_ore_serve_through_three_restarts(machine: _Machine) -> None:
    port, other_port = _free_port(), _free_port()
    url = await machine.serve(port)
    machine.start("nats", "conduit", "nats")
    web = machine.start("web", "conduit", "web", "--port", "0")
    async with asyncio.timeout(TIMEOUT):
        while not (found := _WEB_URL.findall(machine.log("web"))):
            assert web.poll() is None, machine.log("web")
            await asyncio.sleep(0.05)
    base, _, token = found[0].partition("/?token=")
    bridge_replies: list[str] = []
    web_threads: list[tuple[str, list[str]]] = []
    restarts = [
        (signal.SIGINT, port),
        (signal.SIGKILL, port),
        (signal.SIGTERM, other_port),  # its port taken meanwhile, say
    ]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT) as http:
        for round_ in range(len(restarts) + 1):
            sent = [f"round {round_} message {n}" for n in range(MESSAGES)]
            for text in sent:
                await _ask_bridge(url, text, bridge_replies)
            await _web_ready(http)
            thread_id = (await http.post("/api/threads", json={})).json()["id"]
            for text in sent:
                await http.post(f"/api/threads/{thread_id}/messages", json={"text": text})
            web_threads.append((thread_id, sent))
            async with asyncio.timeout(TIMEOUT):
                while True:
                    if len(await _web_answers(http, thread_id)) >= MESSAGES:
                        break
                    await asyncio.sleep(0.1)  # answered through another process: polled
            if round_ < len(restarts):
                how, next_port = restarts[round_]
                machine.serving.send_signal(how)
                await asyncio.to_thread(machine.serving.wait, TIMEOUT)
                url = await machine.serve(next_port)
        await asyncio.sleep(0.5)  # anything doubled would arrive now
        web_answers = {t: await _web_answers(http, t) for t, _ in web_threads}

    expected = [f"round {r} message {n}" for r in range(len(restarts) + 1) for n in range(MESSAGES)]
    web_expected = {t: sent for t, sent in web_threads}
    lost = {
        "nats": sum(text not in bridge_replies for text in expected),
        "web": sum(web_answers[t] != sent for t, sent in web_expected.items()),
    }
    doubled = {
        "nats": len(bridge_replies) - len(set(bridge_replies)),
        "web": sum(len(a) - len(set(a)) for a in web_answers.values()),
    }
    print(
        f"\n3 restarts of ore serve: sent {len(expected)} per conduit; answered "
        f"nats={len(bridge_replies)} web={sum(map(len, web_answers.values()))}; "
        f"lost={lost} doubled={doubled}"
    )
    assert url == f"nats://127.0.0.1:{other_port}"
    assert bridge_replies == expected
    assert web_answers == web_expected
