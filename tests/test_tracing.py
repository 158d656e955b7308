"""OpenTelemetry traces (issue 33): one message's spans across a conduit and `ore serve`.

Both processes export OTLP/HTTP to a collector the test runs on 127.0.0.1; the spans
of one message share its trace id and nest hop by hop: the conduit's publish, the
core's ingress, turn, interceptor, processor, model call, save and egress publish, and
the conduit's delivery of the stored answer.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ore_core import EventContext, Manager, UserMessageEvent, tracing
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_openai.testing import MockOpenAIServer
from tests.cli.test_cli_conduit import Process, raw, start_ore, until_answered
from tests.otlp_collector import Collector, ReceivedSpan, collector

__all__ = ["raw", "start_ore"]  # fixtures, imported for pytest

HOPS = {
    "ore.conduit.publish": "ore-conduit-nats",
    "ore.ingress": "ore-serve",
    "ore.turn": "ore-serve",
    "ore.interceptor": "ore-serve",
    "ore.processor": "ore-serve",
    "ore.model.call": "ore-serve",
    "ore.store.save": "ore-serve",
    "ore.egress.publish": "ore-serve",
    "ore.conduit.deliver": "ore-conduit-nats",
}
"""Every hop's span and the service that exports it."""

PARENTS = {
    "ore.ingress": "ore.conduit.publish",
    "ore.turn": "ore.ingress",
    "ore.interceptor": "ore.turn",
    "ore.processor": "ore.turn",
    "ore.model.call": "ore.processor",
    "ore.store.save": "ore.turn",
    "ore.egress.publish": "ore.turn",
    "ore.conduit.deliver": "ore.egress.publish",
}
"""Each hop's parent (the conduit's publish: a child of the sender's traceparent)."""

EXPORT_TIMEOUT = 60.0


def otel_env(endpoint: str) -> dict[str, str]:
    """Tracing on, exporting at once (a batch every 50 ms) to `endpoint`."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}


@pytest.fixture
def otlp() -> Iterator[Collector]:
    with collector() as running:
        yield running


def one_of_each(spans: list[ReceivedSpan], trace_id: str) -> dict[str, ReceivedSpan] | None:
    """The trace's spans by name once every hop sent one (the first of each)."""
    by_name: dict[str, ReceivedSpan] = {}
    for span in spans:
        if span.trace_id == trace_id:
            by_name.setdefault(span.name, span)
    return by_name if set(HOPS) <= set(by_name) else None


@pytest.mark.slow
async def test_one_message_is_one_trace_across_the_conduit_and_the_core(
    ore_nats_server: EmbeddedNatsServer,
    raw: Any,
    start_ore: Callable[..., Process],
    otlp: Collector,
) -> None:
    env = otel_env(otlp.endpoint)
    with MockOpenAIServer(["Hello from the model."]) as model:
        serve = start_ore(
            "serve",
            "--nats",
            ore_nats_server.url,
            ORE_LOAD_PLUGINS="ore-openai",
            ORE_OPENAI_BASE_URL=model.base_url,
            **env,
        )
        await until_answered(raw, "ore.admin.health", serve)
        bridge = start_ore("conduit", "nats", "--nats", ore_nats_server.url, **env)
        await until_answered(raw, "bridge.ready-probe.in", bridge)
        trace_id, sender_span = secrets.token_hex(16), secrets.token_hex(8)
        reply = await raw.request(
            "bridge.traced.in",
            b"hello",
            timeout=30,
            headers={"traceparent": f"00-{trace_id}-{sender_span}-01"},
        )
        assert b"Hello from the model." in reply.data
        found: list[dict[str, ReceivedSpan]] = []

        def complete(spans: list[ReceivedSpan]) -> bool:
            hops = one_of_each(spans, trace_id)
            found[:] = [hops] if hops else []
            return hops is not None

        assert await asyncio.to_thread(otlp.wait_for, complete, EXPORT_TIMEOUT), otlp.spans
    hops = found[0]
    assert {name: span.service for name, span in hops.items() if name in HOPS} == HOPS
    by_id = {span.span_id: span.name for span in hops.values()}
    assert {name: by_id.get(hops[name].parent) for name in PARENTS} == PARENTS
    assert hops["ore.conduit.publish"].parent != ""  # the bridge's span of the sender's trace


def test_tracing_is_on_only_when_an_otlp_endpoint_is_configured() -> None:
    endpoint = "http://127.0.0.1:4318"
    assert [
        tracing.configured({}),
        tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}),
        tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}),
        tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true"}),
        tracing.configured(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none"}
        ),
    ] == [False, True, True, False, False]


def test_a_configured_endpoint_without_the_extra_installed_runs_untraced() -> None:
    # Without `ore-core[otel]` the OpenTelemetry SDK cannot be imported (None in
    # sys.modules makes its import fail): ore warns once and goes on without spans.
    script = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "from ore_core import tracing\n"
        "print(tracing.configure('ore-test'), tracing.tracer)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        check=True,
    )
    *warning, outcome = result.stdout.splitlines()
    assert (outcome, "pip install 'ore-core[otel]'" in "".join(warning) + result.stderr) == (
        "False None",
        True,
    )


@pytest.fixture
def in_memory() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, into memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()


async def test_a_turn_s_work_nests_below_its_span_in_the_stream(
    in_memory: InMemorySpanExporter,
) -> None:
    trace_id = secrets.token_hex(16)
    context = EventContext(traceparent=f"00-{trace_id}-{secrets.token_hex(8)}-00")
    async with Manager(MemoryStore(), EchoProcessor()) as manager:
        stream = await manager.create()
        await stream.process(UserMessageEvent(id="m-1", content="hi", context=context))
    spans = {span.name: span for span in in_memory.get_finished_spans()}
    turn = spans["ore.turn"]
    assert (
        {f"{span.context.trace_id:032x}" for span in spans.values()},
        {name: spans[name].parent.span_id for name in ("ore.processor", "ore.store.save")},
    ) == (
        {trace_id},
        {"ore.processor": turn.context.span_id, "ore.store.save": turn.context.span_id},
    )


async def test_work_outside_a_traced_message_starts_no_trace(
    in_memory: InMemorySpanExporter,
) -> None:
    async with Manager(MemoryStore(), EchoProcessor()) as manager:
        stream = await manager.create()
        await stream.save()  # an operator's save: no message, no trace
    assert [span.name for span in in_memory.get_finished_spans()] == []
