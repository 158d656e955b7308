"""A bridged thread compacted automatically (issue 42), counted per endpoint.

The gateway of `tests/bridge/gateway.py` (Slack on its fake and the NATS conduit as
`ore conduit` processes, the terminal an SDK client) on a real nats-server; the core a
CoreService whose compaction step asks the mock model (`ore_openai.testing`) for the
summary, with a small context window so the relayed messages outgrow it. Every endpoint
shows the one line per compaction once and every other endpoint's messages once; an
edit of a message before the boundary is recorded as docs/bridging.md says for an older
message of a linked thread (in place, nothing answered, the conversation stays).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest

from ore_core import Manager
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.config import CompactionSettings
from ore_core.session.compaction import SUMMARY_MARK
from ore_core.session.compactor import Compactor
from ore_core.session.stores.memory import MemoryStore
from ore_core.turn import turn_text
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse
from tests.bridge.gateway import ENDPOINTS, Gateway, clean, expected

pytestmark = pytest.mark.slow

N = 8  # messages per endpoint: enough to pass the window's threshold
LINE = "earlier conversation summarised"


@pytest.fixture
def model() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(responder=lambda body: MockResponse("s")) as server:
        yield server


@pytest.fixture
async def core(
    ore_nats_server: EmbeddedNatsServer, model: MockOpenAIServer
) -> AsyncIterator[CoreService]:
    processor = OpenAIProcessor(
        OpenAIConfig(base_url=model.base_url, model="mock-model", max_retries=0)
    )
    settings = CompactionSettings(context_window=300, keep_last=4, pin_first=False)
    manager = Manager(MemoryStore(), processor, interceptors=[Compactor(settings)])
    service = CoreService(
        manager, servers=[ore_nats_server.url], config=BusConfig(partitions=2), reconnect_wait=0.05
    )
    async with processor:
        await service.start()
        yield service
        await service.stop(grace=0)


def lines_shown(gateway: Gateway, endpoint: str) -> int:
    """How many times `endpoint` showed the compaction line."""
    shown = gateway.slack_lines() if endpoint == "slack" else gateway.notices[endpoint]
    return sum(LINE in line for line in shown)


async def compactions(core: CoreService, gateway: Gateway) -> int:
    thread = core.manager.get(gateway.thread).state()
    return sum(SUMMARY_MARK in turn.extra for turn in thread.all_turns())


async def test_a_compaction_shows_one_line_on_every_endpoint_and_relays_nothing_twice(
    core: CoreService, gateway: Gateway
) -> None:
    sent = expected(slack=range(1, N + 1), nats=range(1, N + 1), stdin=range(1, N + 1))
    for n in range(1, N + 1):
        for origin in ENDPOINTS:
            await gateway.send(origin, [n])
    await gateway.until(lambda: all(gateway.has_all(e, sent) for e in ENDPOINTS), sent)
    made = await compactions(core, gateway)
    assert made >= 1
    try:
        await gateway.until(lambda: all(lines_shown(gateway, e) >= made for e in ENDPOINTS), sent)
    except BaseException:
        print(
            "DEBUG",
            made,
            {e: lines_shown(gateway, e) for e in ENDPOINTS},
            gateway.notices,
            gateway.slack_lines()[-6:],
        )
        raise
    shown = {e: lines_shown(gateway, e) for e in ENDPOINTS}
    print(f"\ncompactions {made}; lines shown: {json.dumps(shown)}")
    print(f"counts: {json.dumps(gateway.counts(sent))}")
    assert shown == dict.fromkeys(ENDPOINTS, made)
    assert gateway.counts(sent) == {e: clean(2 * N) for e in ENDPOINTS}


async def test_an_edit_of_a_summarised_message_is_revised_in_place_off_the_compacted_path(
    core: CoreService, gateway: Gateway
) -> None:
    sent = expected(stdin=range(1, 3 * N + 1))
    await gateway.send("stdin", range(1, 3 * N + 1))
    await gateway.until(lambda: gateway.has_all("slack", sent), sent)
    stream = core.manager.get(gateway.thread)
    assert await compactions(core, gateway) >= 1
    tip = stream.state().current_tip
    assert gateway.terminal is not None
    await gateway.terminal.edit(gateway.thread, "s1", "stdin 1 (edited)", user_name="cy")
    await gateway.until(
        lambda: any(turn_text(t) == "stdin 1 (edited)" for t in stream.state().all_turns()), sent
    )
    assert stream.state().current_tip == tip
    assert "stdin 1 (edited)" not in [turn_text(t) for t in stream.turns()]
