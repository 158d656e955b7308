"""Files on the bridge (issue 39): a reference in the JSON, never the bytes. Inbound, the
sender names files already in ore's files bucket; outbound, a relayed message with files
carries their references (a `[file: ...]` line each in text output)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import pytest

from ore_conduit_nats import MalformedMessage, Reply, encode_reply, parse_inbound
from ore_conduit_nats.testing import PlainNatsClient
from ore_core import TurnCompleteEvent
from ore_core.artifacts import Attachment
from ore_core.testing.conduit_conformance import ConduitCore

if TYPE_CHECKING:
    from conftest import RunBridge

PDF = Attachment("q3.pdf", "application/pdf", 1200, "ab" * 32, "ORE_FILES")


def body_with(*refs: object) -> bytes:
    return json.dumps({"text": "the report", "attachments": list(refs)}).encode()


def test_a_json_body_names_its_files_by_reference() -> None:
    inbound = parse_inbound(body_with(PDF.to_dict()), max_bytes=4096)
    assert inbound.attachments == (PDF,)


def test_a_bad_reference_is_refused_saying_which_field() -> None:
    with pytest.raises(MalformedMessage, match="sha256 must be 64 lower-case hex digits"):
        parse_inbound(body_with({**PDF.to_dict(), "sha256": "x"}), max_bytes=4096)


def test_a_relayed_message_carries_its_files_in_json() -> None:
    body, _ = encode_reply(Reply("relayed", "Ana (web): see", "t1", attachments=(PDF,)), "json")
    assert json.loads(body)["attachments"] == [PDF.to_dict()]


def test_a_relayed_message_names_its_files_in_text() -> None:
    body, _ = encode_reply(Reply("relayed", "Ana (web): see", "t1", attachments=(PDF,)), "text")
    assert body.decode() == (
        f"Ana (web): see\n[file: q3.pdf (application/pdf, 1.2 kB) sha256 {PDF.sha256}]"
    )


async def test_a_referenced_file_reaches_the_user_turn(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    async with ore_conduit_core.client_for("nats").events(kinds={"turn_complete"}) as feed:
        await raw.publish("support", body_with(PDF.to_dict()))
        delivery = await asyncio.wait_for(anext(aiter(feed)), 10)
    assert isinstance(delivery.event, TurnCompleteEvent)
    assert PDF in delivery.event.turn.artifacts
