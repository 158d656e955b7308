"""docs/protocol.md is true: its JSON examples round-trip, its API table is what is served,
and its 30-line client works against a real core."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from typing import Any

import pytest

from ore_core import Manager
from ore_core._nats.codec import (
    BAD_JSON,
    BAD_NAMESPACE,
    BAD_SCHEMA,
    BAD_THREAD_ID,
    IDENTITY,
    TOO_LARGE,
    UNKNOWN_THREAD,
)
from ore_core.bus.api.control_api import ERROR_CODES, ControlAPI
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.events import (
    decode_batch,
    decode_ingress,
    decode_output,
    decode_output_value,
    encode_batch,
    encode_event,
)
from tests.paths import DOCS

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

PROTOCOL = (DOCS / "protocol.md").read_text(encoding="utf-8")
INGRESS_KINDS = {"user_message", "interrupt", "delete", "edit", "regenerate", "react"}
DLQ_FIELDS = {"reason", "detail", "subject", "namespace", "thread_id", "data", "time"}
DLQ_REASONS = {
    BAD_JSON,
    BAD_SCHEMA,
    BAD_THREAD_ID,
    BAD_NAMESPACE,
    IDENTITY,
    UNKNOWN_THREAD,
    TOO_LARGE,
}


def json_examples() -> list[str]:
    """Every JSON object of the page's ```json blocks (one object per line)."""
    blocks = re.findall(r"```json\n(.*?)```", PROTOCOL, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


EXAMPLES = json_examples()
EVENTS = [line for line in EXAMPLES if "kind" in json.loads(line)]


def test_the_page_has_examples_of_every_shape() -> None:
    shapes = {next(iter(json.loads(line))) for line in EXAMPLES}
    assert {"kind", "error", "reason"} <= shapes
    assert len(EVENTS) >= 15


@pytest.mark.parametrize("line", EVENTS)
def test_every_event_example_decodes_and_reencodes_to_the_same_json(line: str) -> None:
    value = json.loads(line)
    if value["kind"] == "batch":
        events = decode_batch(line)
        assert len(events) == len(value["events"])
        assert encode_batch([encode_event(event) for event in events]) == compact(value)
        return
    if value["kind"] in INGRESS_KINDS:
        assert encode_event(decode_ingress(line)) == compact(value)
        return
    event = decode_output(line)
    assert encode_event(event) == compact(value)
    assert decode_output_value(value) == event  # how a feed decodes a parsed batch


@pytest.mark.parametrize("line", [line for line in EXAMPLES if line not in EVENTS])
def test_every_other_example_is_an_api_error_or_a_dead_letter_record(line: str) -> None:
    value = json.loads(line)
    if "error" in value:
        assert set(value) == {"error"}
        assert set(value["error"]) == {"code", "message"}
        assert value["error"]["code"] in ERROR_CODES.values()
    else:
        assert set(value) == DLQ_FIELDS
        assert value["reason"] in DLQ_REASONS


def documented_api_subjects() -> set[str]:
    """The table's subjects as the core subscribes them (`P.api.NS.m` -> `ore.api.*.m`)."""
    section = PROTOCOL.split("## Control API", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\| `P\.((?:api\.NS|admin)\.[a-z.]+)` \|", section, re.M)
    return {"ore." + path.replace("api.NS.", "api.*.") for path in paths}


def test_the_api_table_lists_exactly_the_served_endpoints(control_api: ControlAPI) -> None:
    assert documented_api_subjects() == set(control_api.endpoints.values())


def documented_client() -> str:
    section = PROTOCOL.split("## A complete client in 30 lines", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


async def test_the_documented_client_gets_its_reply_from_a_real_core(
    ore_nats_url: str, manager: Manager
) -> None:
    code = documented_client()
    assert "nats://127.0.0.1:4222" in code
    service = CoreService(manager, servers=[ore_nats_url], config=BusConfig(partitions=2))
    await service.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code.replace("nats://127.0.0.1:4222", ore_nats_url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        await service.stop(grace=0)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode() == "hello"


async def test_the_documented_client_exits_with_one_line_when_no_server_is_there() -> None:
    code = documented_client()
    give_up = 'inbox_prefix="_INBOX_raw"), 5)'  # it gives up after 5 s...
    assert give_up in code
    code = code.replace(give_up, give_up.replace("5)", "1)"))  # ...here after 1 s: the same way
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{probe.getsockname()[1]}"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code.replace("nats://127.0.0.1:4222", url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 1
    assert stderr.decode().splitlines() == [
        f"no NATS server at {url}: start `ore serve`, or use the URL it printed"
    ]
