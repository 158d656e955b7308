"""Images of a user message: validated on the event, recorded as `Image` artifacts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ore_core import EventDecodeError, Image, Manager, Role, Text, UserMessageEvent
from ore_core.events import MAX_IMAGES, decode_ingress, encode_event
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import collected, message

PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="
HTTPS = "https://example.com/cat.jpg"


def test_a_user_message_carries_data_and_http_image_urls() -> None:
    event = UserMessageEvent(content="look", images=[PNG, HTTPS])
    assert event.images == (PNG, HTTPS)


def test_images_survive_the_wire() -> None:
    event = UserMessageEvent(id="m-1", content="look", images=[PNG])
    assert decode_ingress(encode_event(event)) == event


def test_a_message_without_images_keeps_its_json() -> None:
    event = UserMessageEvent(id="m-1", content="hi")
    assert encode_event(event) == b'{"kind":"user_message","id":"m-1","content":"hi"}'


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "data:text/plain;base64,aGk=",
        "data:image/png,not-base64",
        "data:image/png;base64,not base64!",
        "ftp://example.com/a.png",
        "https://",
        "",
    ],
)
def test_an_image_url_of_another_kind_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="data:image"):
        UserMessageEvent(content="x", images=[url])


def test_more_than_the_most_images_are_refused() -> None:
    with pytest.raises(ValidationError, match="at most 8"):
        UserMessageEvent(content="x", images=[PNG] * (MAX_IMAGES + 1))


def test_a_bad_image_on_the_wire_is_a_decode_error_naming_the_field() -> None:
    data = b'{"kind":"user_message","id":"m","content":"x","images":["file:///etc/passwd"]}'
    with pytest.raises(EventDecodeError, match=r"user_message\.images\.0"):
        decode_ingress(data)


async def test_the_user_turn_has_an_image_per_url_after_its_text() -> None:
    async with Manager(MemoryStore(), ScriptedProcessor(["ok"])) as manager:
        stream = await manager.create()
        await stream.process(message("what is this?", images=[PNG, HTTPS]))
    user = next(t for t in stream.turns() if t.role == Role.USER)
    assert user.artifacts == (Text("what is this?"), Image(PNG), Image(HTTPS))


async def test_collected_messages_keep_the_images_of_each() -> None:
    later = [message("two", images=[PNG]), message("three", images=[HTTPS])]
    expected = (Text("two\n\nthree"), Image(PNG), Image(HTTPS))
    assert await collected(message("one"), *later) == expected
