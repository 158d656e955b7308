"""Three conduits in one bridge (issue 29), counted per endpoint.

`ore conduit slack` (on its fake Slack) and `ore conduit nats` run as real processes,
the terminal is an SDK client of namespace `stdin`; the core is a real CoreService on
the test's nats-server. One Slack thread is linked (by the admin API, `answer = none`:
a pure human relay) to the NATS channel `room` and to the terminal. Each endpoint sends
N messages; each endpoint must show every other endpoint's messages exactly once, in
the order they were sent, labelled, and none of its own. Counted per endpoint: sent,
delivered, lost, doubled, echoed to the origin, out of order (all zero but sent and
delivered); printed with -s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from ore_conduit_nats.testing import PlainNatsClient
from ore_conduit_slack.testing import FakeSlack
from ore_core import Manager
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.conduit import ConduitClient, ControlClient, SettingsCache, classify
from ore_core.config import load_settings
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.bridge.gateway import (
    CHANNEL,
    ENDPOINTS,
    PATIENCE,
    ROOM,
    bridge_listening,
    clean,
    count,
    nats_conduit,
    slack_conduit,
)

pytestmark = pytest.mark.slow

N = 10  # messages per endpoint


@dataclass
class Shown:
    """What one endpoint displayed of relayed messages, in order."""

    lines: list[str] = field(default_factory=list)

    def counts(self, endpoint: str) -> dict[str, int]:
        others = {origin: range(N) for origin in ENDPOINTS if origin != endpoint}
        return count(self.lines, endpoint, others)


@dataclass
class RoomOut:
    """What `bridge.room.out` carried: live (every publish) and as a JetStream stream
    capturing it keeps it (`Nats-Msg-Id` de-duplicated, as a consumer that must not see
    a copy twice reads it)."""

    live: list[Msg] = field(default_factory=list)
    stream: str = "ROOM_OUT"

    def relayed(self) -> list[str]:
        return [text for msg in self.live if (text := _relayed(msg)) is not None]

    def resent(self) -> int:
        """Copies published again after a kill, marked so (same `Nats-Msg-Id`)."""
        return sum(1 for msg in self.live if (msg.headers or {}).get("Ore-Resent") == "true")

    def unmarked_doubles(self) -> int:
        """A copy published twice without the second saying it may be a resend."""
        first: set[str] = set()
        doubles = 0
        for msg in self.live:
            text = _relayed(msg)
            if text is None:
                continue
            if text in first and (msg.headers or {}).get("Ore-Resent") != "true":
                doubles += 1
            first.add(text)
        return doubles

    kept: list[str] = field(default_factory=list)
    """The relayed copies the stream stored, in its order (an ordered consumer's)."""


def _relayed(msg: Msg) -> str | None:
    body = json.loads(msg.data)
    return body.get("relayed") if isinstance(body, dict) else None


KILL_AT = 4  # `kill_nats`: the NATS conduit is killed at its 4th claim (or copy)


@pytest.mark.parametrize("fault", ["none", "kill_slack", "kill_nats"])
async def test_three_endpoints_each_show_the_others_once_in_order_and_never_their_own(
    core: CoreService, ore_nats_server: EmbeddedNatsServer, tmp_path: Path, fault: str
) -> None:
    """With `kill_slack`, the Slack conduit is killed (kill -9) while it posts copies,
    the terminal and NATS go on sending, and it catches up when started again. With
    `kill_nats`, the NATS conduit is killed (kill -9) the moment it claims its 4th copy
    (`sending`: it may or may not have published it, it has not reported it; without
    claims, the moment the 4th copy is out), the terminal goes on, and it catches up
    when started again; the NATS side is counted as a JetStream stream keeps `bridge.room.out`, and
    every copy it got twice live must be marked `Ore-Resent`."""
    url = ore_nats_server.url
    changed = asyncio.Condition()  # notified whenever the NATS side or the terminal shows

    async def shown_now() -> None:
        async with changed:
            changed.notify_all()

    async def until(condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(PATIENCE), changed:
            await changed.wait_for(condition)

    fake = await FakeSlack().start()
    slack = slack_conduit(url, tmp_path, fake.conduit_settings())
    bridge = nats_conduit(url, tmp_path)
    raw = await nats.connect(url)
    terminal = await ConduitClient.connect(url, name="stdin", request_timeout=10.0)
    shown = {endpoint: Shown() for endpoint in ENDPOINTS}
    try:
        slack.start()
        bridge.start()
        await fake.wait_connected(1, PATIENCE)
        root = await fake.user_says(CHANNEL, "start")
        await fake.wait_until(lambda: len(fake.answers(CHANNEL, root.ts)) == 1, PATIENCE)
        (thread,) = (
            await ControlClient.beside(terminal).call("threads.list", {"namespace": "slack"})
        )["threads"]
        for link in (
            {"namespace": "nats", "key": "nats.channel", "value": ROOM},
            {"namespace": "stdin", "key": "id", "value": thread},
        ):
            body = {"thread": thread, "endpoint": link, "answer": "none"}
            await ControlClient.beside(terminal).call("links.add", body)

        room = RoomOut()
        killed = asyncio.Event()
        js = raw.jetstream()
        await js.add_stream(name=room.stream, subjects=[f"bridge.{ROOM}.out"])

        claims = 0

        def kill_nats() -> None:
            if fault == "kill_nats" and not killed.is_set():
                bridge.kill()
                killed.set()

        async def on_room(msg: Msg) -> None:
            room.live.append(msg)
            shown["nats"].lines = room.relayed()
            if len(shown["nats"].lines) == KILL_AT:
                kill_nats()  # right after a publish: before the conduit reported it
            await shown_now()

        async def on_report(msg: Msg) -> None:
            nonlocal claims
            claims += json.loads(msg.data)["status"] == "sending"
            if claims == KILL_AT:
                kill_nats()  # a copy claimed, maybe published, certainly not reported

        async def on_kept(msg: Msg) -> None:
            text = _relayed(msg)
            if text is not None:
                room.kept.append(text)
                await shown_now()

        await raw.subscribe(f"bridge.{ROOM}.out", cb=on_room)
        await raw.subscribe("ore.api.nats.deliveries.report", cb=on_report)
        await js.subscribe(f"bridge.{ROOM}.out", cb=on_kept, ordered_consumer=True)
        settings = SettingsCache()
        settings.load(thread, (await terminal.get_thread(thread)).metadata)

        async def read_terminal() -> None:
            async with terminal.events(thread) as feed:
                async for delivery in feed:
                    relayed = classify(delivery, "stdin", settings.get(thread))
                    if relayed.action == "relayed":
                        shown["stdin"].lines.append(relayed.shown)
                        await shown_now()

        reader = asyncio.create_task(read_terminal())

        async def send_nats(n: int) -> None:
            message = {"text": f"nats {n}", "id": f"n{n}", "name": "bo"}
            await raw.publish(f"bridge.{ROOM}.in", json.dumps(message).encode())
            await raw.flush()

        # Sent once the NATS conduit listens: a plain publish before that reaches nobody
        # (on a loaded machine the conduit can start after Slack answered).
        await bridge_listening(ore_nats_server.monitor_url)
        await send_nats(0)
        await fake.wait_until(
            lambda: "bo (nats): nats 0" in fake.rendered_thread(CHANNEL, root.ts), PATIENCE
        )

        async def from_slack() -> None:
            for n in range(N):
                await fake.user_says(CHANNEL, f"slack {n}", thread_ts=root.ts, user="UANA")

        async def from_nats() -> None:
            for n in range(1, N):
                await send_nats(n)

        async def from_terminal(numbers: range) -> None:
            for n in numbers:
                await terminal.send(thread, f"stdin {n}", id=f"s{n}", user_name="cy")

        if fault == "kill_nats":  # plain NATS input is not kept while the conduit is down
            await from_nats()
            last = f"bo (nats): nats {N - 1}"
            await fake.wait_until(lambda: last in fake.rendered_thread(CHANNEL, root.ts), PATIENCE)
            await asyncio.gather(from_slack(), from_terminal(range(N // 2)))
            async with asyncio.timeout(PATIENCE):
                await killed.wait()
        else:
            await asyncio.gather(from_slack(), from_nats(), from_terminal(range(N // 2)))
        if fault == "kill_slack":
            slack.kill()  # copies of the messages above are being posted now
        await from_terminal(range(N // 2, N))
        if fault == "kill_slack":
            slack.start()
            await fake.wait_connected(2, PATIENCE)
        if fault == "kill_nats":
            bridge.start()

        def slack_lines() -> list[str]:
            return fake.rendered_thread(CHANNEL, root.ts)

        def complete(endpoint: str) -> bool:
            if endpoint == "slack":
                shown["slack"].lines = slack_lines()
            return shown[endpoint].counts(endpoint)["delivered"] == 2 * N

        await fake.wait_until(lambda: complete("slack"), PATIENCE)

        def kept() -> bool:
            return Shown(room.kept).counts("nats")["delivered"] == 2 * N

        await until(lambda: complete("nats") and complete("stdin") and kept())
        reader.cancel()
        live_nats = shown["nats"].counts("nats")
        shown["nats"].lines = room.kept
        counts = {e: shown[e].counts(e) for e in ENDPOINTS}
        print(json.dumps(counts, indent=1))
        print(f"nats live: {live_nats}, resent={room.resent()}")
        assert room.unmarked_doubles() == 0
        for endpoint, tally in counts.items():
            assert tally == clean(2 * N), endpoint
    finally:
        await terminal.close()
        await raw.close()
        await bridge.astop()
        await slack.astop()
        await fake.close()


GATEWAY_TOML = """
[[gateway]]
name = "room"
answer = "none"

[[gateway.endpoints]]
conduit = "stdin"
key = "id=gateway-room"

[[gateway.endpoints]]
conduit = "nats"
key = "room"
"""


async def test_a_gateway_of_ore_toml_relays_to_a_nats_channel_that_never_spoke(
    ore_nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """The NATS conduit learns the channel of the gateway's thread from the core (its
    endpoint key in `threads.get`), so the terminal's first words reach `bridge.room.out`
    though nothing was ever sent on the channel."""
    url = ore_nats_server.url
    (tmp_path / "ore.toml").write_text(GATEWAY_TOML)
    settings = load_settings(tmp_path / "ore.toml")
    service = CoreService(
        Manager(MemoryStore(), EchoProcessor()),
        servers=[url],
        config=BusConfig(partitions=2),
        reconnect_wait=0.05,
        gateways=settings.gateway,
        conversation_keys={"nats": "nats.channel", "stdin": "id"}.get,
    )
    await service.start()
    bridge = nats_conduit(url, tmp_path)
    raw = await PlainNatsClient.connect(url, patience=PATIENCE)
    terminal = await ConduitClient.connect(url, name="stdin", request_timeout=10.0)
    try:
        bridge.start()
        await raw.wait_until_ready()
        await terminal.send("gateway-room", "first words", id="s1", user_name="cy")
        body = json.loads((await raw.next_out(ROOM)).data)
        assert body["relayed"] == "cy (stdin): first words"
    finally:
        await terminal.close()
        await raw.close()
        await bridge.astop()
        await service.stop(grace=0)
