"""docs/operating-nats.md: its reference section is the layout, and works as written."""

from __future__ import annotations

import json
import re

from nats.aio.client import Client

from ore_core._nats.connection import (
    MIN_SERVER_VERSION,
    TESTED_SERVER_VERSIONS,
    format_version,
)
from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.operator_doc import BEGIN, END, default_section
from ore_core.bus.server.streams import BusConfig, diff_layout
from ore_core.subjects import Subjects
from tests.paths import DOCS

DOC = DOCS / "operating-nats.md"
_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def test_the_reference_section_is_generated_from_the_layout() -> None:
    assert _section() == default_section(), (
        "docs/operating-nats.md is out of date: run "
        "`python -m ore_core.bus.server.operator_doc docs/operating-nats.md`"
    )


async def test_streams_created_from_the_documented_json_are_what_ore_expects(
    ore_nats_client: Client,
) -> None:
    blocks = [json.loads(block) for block in _JSON_BLOCK.findall(_section())]
    streams = [block for block in blocks if "subjects" in block]
    consumer = next(block for block in blocks if "durable_name" in block)
    # the page shows partition 0's consumer; "the filter names the partition"
    assert consumer["filter_subject"] == Subjects().partitioned(0)
    for stream in streams:  # as an operator's `nats stream add --config` would send it
        reply = await ore_nats_client.request(
            f"$JS.API.STREAM.CREATE.{stream['name']}", json.dumps(stream).encode(), timeout=5
        )
        assert "error" not in json.loads(reply.data), reply.data
    for partition in range(BusConfig().partition_count):
        name = f"ore-core-p{partition}"
        config = {
            **consumer,
            "durable_name": name,
            "filter_subject": Subjects().partitioned(partition),
            "description": f"ore core workers, partition {partition}",
        }
        reply = await ore_nats_client.request(
            f"$JS.API.CONSUMER.CREATE.ORE_IN.{name}",
            json.dumps({"stream_name": "ORE_IN", "config": config}).encode(),
            timeout=5,
        )
        assert "error" not in json.loads(reply.data), reply.data

    layout = build_layout(Subjects(), BusConfig())
    assert await diff_layout(ore_nats_client.jetstream(), layout) == []


def test_readme_and_protocol_state_the_supported_servers() -> None:
    root = DOC.parents[1]
    minimum = f"nats-server >= {format_version(MIN_SERVER_VERSION)} with JetStream"
    tested = ", ".join(TESTED_SERVER_VERSIONS[:-1]) + f" and {TESTED_SERVER_VERSIONS[-1]}"
    for page in (root / "README.md", root / "docs" / "protocol.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert minimum in text, page
        assert f"tested with {tested}" in text, page
