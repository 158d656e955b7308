"""A bridge under faults (issue 29): a 429 storm, a NATS restart, an endpoint down.

Three real endpoints in one gateway (`tests/bridge/gateway.py`: Slack on its fake and
the NATS conduit as `ore conduit` processes, the terminal as an SDK client) on a real
nats-server, the core a CoreService in this process. Every test counts per endpoint
what it showed of the others' messages: delivered, lost, doubled, echoed to the origin,
mislabelled, out of order (all zero but delivered); printed with -s.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.bridge.gateway import ENDPOINTS, Gateway, clean, expected

pytestmark = pytest.mark.slow

N = 10  # messages per endpoint
STORM = 25  # chat.postMessage calls Slack refuses before the storm may end
DOWN = 200  # messages sent while the NATS conduit is down


def report(name: str, counts: dict[str, dict[str, int]]) -> None:
    print(f"\n{name}: {json.dumps(counts)}")


async def test_a_429_storm_on_slack_delays_only_slack_which_then_catches_up_in_order_once(
    gateway: Gateway,
) -> None:
    fake = gateway.fake
    before = gateway.slack_lines()
    refused_before = len(fake.throttled)
    fake.storm("chat.postMessage", retry_after=0.05)
    sent = expected(slack=range(N), nats=range(N), stdin=range(N))
    await gateway.send_together(slack=range(N), nats=range(1, N), stdin=range(N))

    def others_have_all_and_slack_was_refused_long() -> bool:
        return (
            gateway.has_all("nats", sent)
            and gateway.has_all("stdin", sent)
            and len(fake.throttled) - refused_before >= STORM
        )

    await gateway.until(others_have_all_and_slack_was_refused_long, sent)
    assert gateway.slack_lines() == before  # still refused: the others did not wait for it
    fake.calm("chat.postMessage")
    await gateway.until(lambda: gateway.has_all("slack", sent), sent)
    counts = gateway.counts(sent)
    report(f"429 storm ({len(fake.throttled) - refused_before} refused)", counts)
    assert counts == {"slack": clean(2 * N), "nats": clean(2 * N), "stdin": clean(2 * N)}
    retrying = "delivery to slack retrying: rate limited by Slack"

    def told(endpoint: str) -> int:
        return gateway.notices[endpoint].count(retrying)

    def delayed_from(endpoint: str) -> int:
        return sum(
            1
            for s in gateway.statuses
            if s.status == "retrying" and gateway.origin_of.get(s.turn) == endpoint
        )

    def origins_told() -> bool:  # the origin of each delayed copy shows it, no other
        return bool(gateway.statuses) and all(
            told(endpoint) == delayed_from(endpoint) for endpoint in ("nats", "stdin")
        )

    await gateway.until(origins_told, sent)
    assert sum(delayed_from(endpoint) for endpoint in ("nats", "stdin")) >= 1
    statuses = {s.status for s in gateway.statuses}
    assert statuses <= {"retrying", "delivered"}  # never failed, never dropped
    assert "retrying" in statuses  # then cleared by "delivered"


async def test_a_nats_restart_mid_relay_loses_and_doubles_nothing_on_any_endpoint(
    gateway: Gateway, ore_nats_server: EmbeddedNatsServer
) -> None:
    half = N // 2
    sent = expected(slack=range(N), nats=range(N), stdin=range(N))
    await gateway.send_together(slack=range(half), nats=range(1, half), stdin=range(half))
    await ore_nats_server.arestart()  # copies of the messages above are under way
    # Slack's and the terminal's sends are acknowledged by the core (retried until
    # then); a plain NATS publish is not, so the NATS side goes on once the bridge's
    # subscription is back.
    await asyncio.gather(
        gateway.send("slack", range(half, N)),
        gateway.send("stdin", range(half, N)),
        gateway.bridge_listening(),
    )
    await gateway.send("nats", range(half, N))
    await gateway.until(lambda: all(gateway.has_all(e, sent) for e in ENDPOINTS), sent)
    counts = gateway.counts(sent)
    report("NATS restart", counts)
    assert counts == {"slack": clean(2 * N), "nats": clean(2 * N), "stdin": clean(2 * N)}


async def test_an_endpoint_down_for_long_catches_up_on_everything_in_order_once(
    gateway: Gateway,
) -> None:
    from_slack = DOWN // 4
    sent = expected(slack=range(from_slack), nats=range(1), stdin=range(DOWN - from_slack))
    gateway.bridge.kill()  # kill -9: whatever it held in memory is gone
    await asyncio.gather(
        gateway.send("slack", range(from_slack)),
        gateway.send("stdin", range(DOWN - from_slack)),
    )
    # The others are not held up by the endpoint that is down.
    await gateway.until(
        lambda: gateway.has_all("slack", sent) and gateway.has_all("stdin", sent), sent
    )
    assert gateway.count("nats", sent)["delivered"] == 0
    gateway.bridge.start()
    await gateway.until(lambda: gateway.has_all("nats", sent), sent)
    counts = gateway.counts(sent)
    report(f"NATS conduit down for {DOWN} messages", counts)
    assert counts == {
        "slack": clean(DOWN - from_slack + 1),
        "nats": clean(DOWN),
        "stdin": clean(from_slack + 1),
    }
