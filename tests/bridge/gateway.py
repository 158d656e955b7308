"""A gateway of three real endpoints for the bridging fault tests, and its count.

`ore conduit slack` (on its fake Slack) and `ore conduit nats` run as real processes;
the terminal is an SDK client of namespace `stdin`; the core is whatever the test runs
(a CoreService or `ore serve` workers). One Slack thread is linked by the admin API to
the NATS channel `room` and to the terminal with `answer = none` (a pure human relay).
Each endpoint's messages are `"<origin> <n>"`; what each endpoint shows of the others'
is kept in order and counted per endpoint: delivered, lost, doubled, echoed to the
origin, mislabelled, out of order.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from nats.aio.msg import Msg

from ore_conduit_slack.testing import FakeSlack
from ore_core import NoticeEvent, TurnCompleteEvent
from ore_core.conduit import ConduitClient, ControlClient, SettingsCache, classify
from ore_core.events import DeliveryEvent
from ore_core.testing.conduit_process import ConduitProcess

CHANNEL = "CGENERAL"
ROOM = "room"
ENDPOINTS = ("slack", "nats", "stdin")
PATIENCE = 60.0  # seconds any one wait may take on a loaded machine before the test fails
_SHOWN = re.compile(r"^(?P<name>\S+) \((?P<conduit>[a-z]+)\): (?P<origin>[a-z]+) (?P<n>\d+)$")


def isolated(tmp_path: Path, plugin: str) -> dict[str, str]:
    """A conduit process's environment: its own plugin, state and config dirs."""
    return {
        "ORE_LOAD_PLUGINS": plugin,
        "XDG_STATE_HOME": str(tmp_path / plugin / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / plugin / "config"),
    }


def nats_conduit(url: str, tmp_path: Path) -> ConduitProcess:
    """`ore conduit nats` (JSON output) as a process of its own, not started yet."""
    env = isolated(tmp_path, "ore-conduit-nats")
    return ConduitProcess("nats", url, tmp_path / "nats.log", {"output": "json"}, env=env)


def slack_conduit(url: str, tmp_path: Path, settings: dict[str, Any]) -> ConduitProcess:
    """`ore conduit slack` (on a fake Slack's `settings`) as a process, not started yet."""
    env = isolated(tmp_path, "ore-conduit-slack")
    return ConduitProcess("slack", url, tmp_path / "slack.log", settings, env=env)


def count(
    lines: Iterable[str], endpoint: str, expected: Mapping[str, Iterable[int]]
) -> dict[str, int]:
    """The tally of what `endpoint` showed against what each other origin sent."""
    parsed = [m for m in map(_SHOWN.match, lines) if m is not None]
    wanted = {f"{origin} {n}" for origin, numbers in expected.items() for n in numbers}
    seen = Counter(f"{m['origin']} {m['n']}" for m in parsed if m["origin"] != endpoint)
    out_of_order = 0
    for origin in expected:
        numbers = [int(m["n"]) for m in parsed if m["origin"] == origin]
        out_of_order += sum(1 for a, b in itertools.pairwise(numbers) if b <= a)
    return {
        "delivered": len(set(seen) & wanted),
        "lost": len(wanted - set(seen)),
        "doubled": sum(n - 1 for n in seen.values()),
        "echoed": sum(1 for m in parsed if m["origin"] == endpoint),
        "mislabelled": sum(1 for m in parsed if m["conduit"] != m["origin"]),
        "out_of_order": out_of_order,
    }


def clean(delivered: int) -> dict[str, int]:
    """The tally of an endpoint that showed `delivered` messages and nothing wrong."""
    return {
        "delivered": delivered,
        "lost": 0,
        "doubled": 0,
        "echoed": 0,
        "mislabelled": 0,
        "out_of_order": 0,
    }


@dataclass
class Gateway:
    """The three endpoints of one linked thread (see the module docstring)."""

    url: str
    tmp_path: Path
    monitor_url: str  # the nats-server's monitoring endpoint
    fake: FakeSlack = field(default_factory=FakeSlack)
    lines: dict[str, list[str]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    notices: dict[str, list[str]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    origin_of: dict[str, str] = field(default_factory=dict)  # user turn -> its namespace
    statuses: list[DeliveryEvent] = field(default_factory=list)  # all, as stored
    thread: str = ""
    root_ts: str = ""

    def __post_init__(self) -> None:
        self.changed = asyncio.Condition()
        self.slack = slack_conduit(self.url, self.tmp_path, {})
        self.bridge = nats_conduit(self.url, self.tmp_path)
        self._tasks: list[asyncio.Task[None]] = []
        self.raw: nats.NATS | None = None
        self.terminal: ConduitClient | None = None

    # -- setting up ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the conduits, make the Slack thread and link the other two to it."""
        await self.fake.start()
        self.slack.settings = self.fake.conduit_settings()
        self.raw = await nats.connect(self.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
        self.terminal = await ConduitClient.connect(
            self.url, name="stdin", request_timeout=10.0, reconnect_wait=0.05
        )
        self.slack.start()
        self.bridge.start()
        await self.fake.wait_connected(1, PATIENCE)
        root = await self.fake.user_says(CHANNEL, "start")
        self.root_ts = root.ts
        await self.fake.wait_until(lambda: len(self.fake.answers(CHANNEL, root.ts)) == 1, PATIENCE)
        listed = await ControlClient.beside(self.terminal).call(
            "threads.list", {"namespace": "slack"}
        )
        (self.thread,) = listed["threads"]
        for link in (
            {"namespace": "nats", "key": "nats.channel", "value": ROOM},
            {"namespace": "stdin", "key": "id", "value": self.thread},
        ):
            body = {"thread": self.thread, "endpoint": link, "answer": "none"}
            await ControlClient.beside(self.terminal).call("links.add", body)
        await self.raw.subscribe(f"bridge.{ROOM}.out", cb=self._on_room)
        ready = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._read_terminal(ready)))
        await ready.wait()
        # The NATS conduit learns the channel's thread from its own first message (sent
        # once it listens: a plain publish before that reaches nobody).
        await self.bridge_listening()
        await self.send_nats(0)
        await self.fake.wait_until(lambda: "bo (nats): nats 0" in self.slack_lines(), PATIENCE)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.terminal is not None:
            await self.terminal.close()
        if self.raw is not None:
            await self.raw.close()
        await self.bridge.astop()
        await self.slack.astop()
        await self.fake.close()

    # -- what the endpoints show ---------------------------------------------------

    async def _shown(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _on_room(self, msg: Msg) -> None:
        body = json.loads(msg.data)
        if "relayed" in body:
            self.lines["nats"].append(body["relayed"])
        elif "notice" in body:
            self.notices["nats"].append(body["notice"])
        await self._shown()

    async def _read_terminal(self, ready: asyncio.Event) -> None:
        assert self.terminal is not None
        settings = SettingsCache()
        settings.load(self.thread, (await self.terminal.get_thread(self.thread)).metadata)
        async with self.terminal.events(self.thread) as feed:
            ready.set()
            async for delivery in feed:
                event = delivery.event
                if isinstance(event, TurnCompleteEvent) and delivery.sequence is not None:
                    self.origin_of[event.turn.id] = event.context.provenance
                if isinstance(event, DeliveryEvent):
                    self.statuses.append(event)
                relayed = classify(delivery, "stdin", settings.get(self.thread))
                if relayed.action == "relayed":
                    self.lines["stdin"].append(relayed.shown)
                elif relayed.action == "delivery":
                    self.notices["stdin"].append(relayed.text)
                elif relayed.action == "answer" and isinstance(event, NoticeEvent):
                    self.notices["stdin"].append(event.content)  # thread-wide (`app`)
                await self._shown()

    def slack_lines(self) -> list[str]:
        """The bot messages of the Slack thread, in Slack's order."""
        return self.fake.rendered_thread(CHANNEL, self.root_ts)

    def shown(self, endpoint: str) -> list[str]:
        return self.slack_lines() if endpoint == "slack" else self.lines[endpoint]

    def count(self, endpoint: str, expected: Mapping[str, Iterable[int]]) -> dict[str, int]:
        others = {o: n for o, n in expected.items() if o != endpoint}
        return count(self.shown(endpoint), endpoint, others)

    def counts(self, expected: Mapping[str, Iterable[int]]) -> dict[str, dict[str, int]]:
        return {e: self.count(e, expected) for e in ENDPOINTS}

    def has_all(self, endpoint: str, expected: Mapping[str, Iterable[int]]) -> bool:
        wanted = sum(len(list(n)) for o, n in expected.items() if o != endpoint)
        return self.count(endpoint, expected)["delivered"] >= wanted

    async def until(self, condition: Callable[[], bool], sent: Mapping[str, Iterable[int]]) -> None:
        """Wait until `condition()` holds, checked whenever an endpoint shows something;
        fail with the counts of `sent` when it does not within PATIENCE."""
        try:
            async with asyncio.timeout(PATIENCE):
                while not condition():
                    async with self.changed:
                        try:
                            await asyncio.wait_for(self.changed.wait(), 0.5)
                        except TimeoutError:
                            pass  # Slack shows what it posts in the fake: look again
        except TimeoutError:
            missing = {e: self.missing(e, sent) for e in ENDPOINTS}
            pytest.fail(
                f"not within {PATIENCE:g} s; shown: {json.dumps(self.counts(sent))}; "
                f"missing: {missing}"
            )

    def missing(self, endpoint: str, sent: Mapping[str, Iterable[int]]) -> list[str]:
        """The messages of other origins `endpoint` has not shown."""
        shown = {m.group("origin", "n") for m in map(_SHOWN.match, self.shown(endpoint)) if m}
        return [
            f"{origin} {n}"
            for origin, numbers in sent.items()
            if origin != endpoint
            for n in numbers
            if (origin, str(n)) not in shown
        ]

    async def bridge_listening(self) -> None:
        """Wait until the NATS conduit's input subscription is on the server (after a
        start or a reconnect): a plain publish before that reaches nobody."""
        await bridge_listening(self.monitor_url)

    # -- sending -------------------------------------------------------------------

    async def send_nats(self, n: int) -> None:
        assert self.raw is not None
        message = {"text": f"nats {n}", "id": f"n{n}", "name": "bo"}
        await self.raw.publish(f"bridge.{ROOM}.in", json.dumps(message).encode())
        await self.raw.flush()

    async def send_slack(self, n: int) -> None:
        await self.fake.user_says(CHANNEL, f"slack {n}", thread_ts=self.root_ts, user="UANA")

    async def send_terminal(self, n: int) -> None:
        assert self.terminal is not None
        await self.terminal.send(self.thread, f"stdin {n}", id=f"s{n}", user_name="cy")

    async def send(self, origin: str, numbers: Iterable[int]) -> None:
        """Send `numbers` from `origin`, one after the other."""
        step: Callable[[int], Any] = {
            "slack": self.send_slack,
            "nats": self.send_nats,
            "stdin": self.send_terminal,
        }[origin]
        for n in numbers:
            await step(n)

    async def send_together(self, **numbers: Iterable[int]) -> None:
        """`send_together(slack=range(5), nats=...)`: every origin sends at once."""
        await asyncio.gather(*(self.send(origin, sent) for origin, sent in numbers.items()))


def expected(**numbers: Iterable[int]) -> dict[str, list[int]]:
    """`expected(slack=range(5), ...)`: what each origin sent, as lists."""
    return {origin: list(sent) for origin, sent in numbers.items()}


async def bridge_listening(monitor_url: str, subject: str = "bridge.*.in") -> None:
    """Wait until some connection of the nats-server at `monitor_url` subscribes to
    `subject` (the NATS conduit's input): a plain publish before that reaches nobody."""
    async with aiohttp.ClientSession() as session, asyncio.timeout(PATIENCE):
        while True:
            async with session.get(f"{monitor_url}/connz?subs=1") as response:
                connz = await response.json(content_type=None)
            if any(subject in (c.get("subscriptions_list") or []) for c in connz["connections"]):
                return
            await asyncio.sleep(0.05)  # polled: the server has no event for it
