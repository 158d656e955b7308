"""Every `[[gateway]]` example of docs/configuration.md and docs/bridging.md, applied by a
real `ore serve` (its own XDG dirs, a config file holding the example as written) and
relaying between its endpoints, counted (issue 41 item 6).

The NATS endpoint is the real `ore conduit nats` process. Slack, Telegram and the web page
are each an SDK `ConduitClient` of that conduit's namespace sending into the gateway's
thread and reading its feed: their real conduits need tokens (or a browser) that the
examples' keys do not come with. Each endpoint that may speak (`in`, `inout`) sends
`"<namespace> <n>"`; each endpoint that is shown the thread (`out`, `inout`) is counted
against what the others sent: delivered, lost, doubled, echoed, mislabelled, out of order.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from ore_conduit_nats.testing import PlainNatsClient
from ore_core.conduit import ConduitClient, SettingsCache, classify
from ore_core.config import GatewaySettings
from tests.bridge.gateway import PATIENCE, clean, count, nats_conduit
from tests.cli.test_cli_serve import Served, read_until, start_serve  # noqa: F401 (fixture)
from tests.docs.test_docs_endpoints import gateway_blocks

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

SENT = 3  # messages from each endpoint that may speak
CONDUITS = (
    "ore-conduit-nats,ore-conduit-slack,ore-conduit-telegram,ore-conduit-web,"
    "ore-conduit-discord,ore-conduit-matrix"
)


class Endpoints:
    """What each endpoint of one gateway showed of the others, as relayed lines."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.changed = asyncio.Condition()

    async def shown(self, namespace: str, line: str) -> None:
        self.lines.setdefault(namespace, []).append(line)
        async with self.changed:
            self.changed.notify_all()

    async def until(self, condition: Callable[[], bool]) -> None:
        try:
            async with asyncio.timeout(PATIENCE), self.changed:
                await self.changed.wait_for(condition)
        except TimeoutError:
            pytest.fail(f"not every endpoint was shown every message: {self.lines}")


async def read_sdk(
    client: ConduitClient, thread_id: str, endpoints: Endpoints, ready: asyncio.Event
) -> None:
    """The relayed lines the conduit of `client`'s namespace would show."""
    settings = SettingsCache()
    settings.load(thread_id, (await client.get_thread(thread_id)).metadata)
    async with client.events(thread_id) as feed:
        ready.set()
        async for delivery in feed:
            relayed = classify(delivery, client.namespace, settings.get(thread_id))
            if relayed.action == "relayed":
                await endpoints.shown(client.namespace, relayed.shown)


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[None]]]:
    started: list[asyncio.Task[None]] = []
    yield started
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


@pytest.mark.parametrize(
    "block", gateway_blocks(), ids=lambda b: tomllib.loads(b)["gateway"][0]["name"]
)
async def test_each_gateway_example_of_the_docs_relays_between_its_endpoints_under_ore_serve(
    block: str,
    start_serve: Callable[..., Served],  # noqa: F811 (the fixture imported above)
    tasks: list[asyncio.Task[None]],
    tmp_path: Path,
) -> None:
    config = tmp_path / "ore.toml"
    config.write_text(block)
    (gateway,) = (GatewaySettings.model_validate(g) for g in tomllib.loads(block)["gateway"])
    thread_id = gateway.thread_id
    served = start_serve(config=config, env={"ORE_LOAD_PLUGINS": CONDUITS})
    url = (await read_until(served, "ore core ready: NATS "))[-1].split()[4]
    endpoints = Endpoints()
    speaks = [e.conduit for e in gateway.endpoints if e.direction in ("in", "inout")]
    listens = [e.conduit for e in gateway.endpoints if e.direction in ("out", "inout")]
    senders: dict[str, Callable[[int], object]] = {}
    async with AsyncExitStack() as stack:
        for endpoint in gateway.endpoints:
            namespace = endpoint.conduit
            if namespace == "nats":
                channel = endpoint.key.rsplit("=", 1)[-1]
                bridge = nats_conduit(url, tmp_path)
                raw = await PlainNatsClient.connect(url, patience=PATIENCE)
                stack.push_async_callback(bridge.astop)
                stack.push_async_callback(raw.close)

                async def on_out(raw: PlainNatsClient = raw, channel: str = channel) -> None:
                    while True:
                        body = json.loads((await raw.next_out(channel)).data)
                        if "relayed" in body:
                            await endpoints.shown("nats", body["relayed"])

                async def send_nats(
                    n: int, raw: PlainNatsClient = raw, channel: str = channel
                ) -> None:
                    message = {"text": f"nats {n}", "id": f"n{n}", "name": "bo"}
                    await raw.publish(channel, json.dumps(message).encode())

                bridge.start()
                await raw.wait_until_ready()
                tasks.append(asyncio.create_task(on_out()))
                senders["nats"] = send_nats
            else:
                client = await ConduitClient.connect(url, name=namespace, request_timeout=10.0)
                stack.push_async_callback(client.close)
                ready = asyncio.Event()
                tasks.append(asyncio.create_task(read_sdk(client, thread_id, endpoints, ready)))
                await asyncio.wait_for(ready.wait(), PATIENCE)

                async def send_sdk(n: int, client: ConduitClient = client) -> None:
                    text = f"{client.namespace} {n}"
                    await client.send(
                        thread_id, text, id=f"{client.namespace}-{n}", user_name="ana"
                    )

                senders[namespace] = send_sdk
        for origin in speaks:
            for n in range(SENT):
                await senders[origin](n)  # type: ignore[misc]
        expected = {origin: range(SENT) for origin in speaks}

        def tally(namespace: str) -> dict[str, int]:
            others = {origin: sent for origin, sent in expected.items() if origin != namespace}
            return count(endpoints.lines.get(namespace, []), namespace, others)

        def wanted(namespace: str) -> int:
            return SENT * sum(1 for origin in speaks if origin != namespace)

        await endpoints.until(lambda: all(tally(n)["delivered"] >= wanted(n) for n in listens))
        counts = {namespace: tally(namespace) for namespace in listens}
        assert counts == {namespace: clean(wanted(namespace)) for namespace in listens}
        assert sum(wanted(n) for n in listens) > 0  # every example relays something
    assert await served.terminate() == 0
