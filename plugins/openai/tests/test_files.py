"""What the model sees of a message's files (issue 39): images as image parts, text files
as text, anything else (or too large, or missing) as a line naming it; the text of the
message always goes. Real Manager, a real nats-server holding the files (the core's
`FileStore`, installed as the process's reader) and real HTTP to the mock model."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from ore_core import EventContext, Manager, UserMessageEvent
from ore_core.artifacts import Attachment
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.files import FilePolicy, FileStore, use_reader
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


@pytest_asyncio.fixture
async def files(ore_nats_client: Client) -> AsyncIterator[FileStore]:
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), BusConfig(partitions=1))
    store = FileStore(ore_nats_client.jetstream(), Subjects().files_bucket)
    use_reader(store)
    yield store
    use_reader(None)


async def user_content(
    server: MockOpenAIServer, attachments: list[Attachment], **config: Any
) -> Any:
    """Send one message with `attachments`; the user message's content the model got (a
    string when every part is text: the form every compatible server takes)."""
    server.script("ok")
    processor = OpenAIProcessor(
        OpenAIConfig(base_url=server.base_url, model="m", max_retries=0, timeout=5.0, **config)
    )
    async with processor, Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        event = UserMessageEvent(
            content="look", attachments=attachments, context=EventContext(provenance="test")
        )
        async with asyncio.timeout(10):
            await stream.process(event)
    return server.requests[0]["messages"][-1]["content"]


async def test_an_image_file_is_an_image_part(
    ore_mock_openai: MockOpenAIServer, files: FileStore
) -> None:
    image = await files.upload(PNG, "cat.png")
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert await user_content(ore_mock_openai, [image]) == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": url}},
    ]


async def test_a_text_file_is_its_text(ore_mock_openai: MockOpenAIServer, files: FileStore) -> None:
    log = await files.upload(b"line 1\nline 2\n", "run.log", "text/plain")
    content = await user_content(ore_mock_openai, [log])
    assert content == "look\n\nFile run.log:\n```\nline 1\nline 2\n\n```"


@pytest.mark.parametrize(
    ("name", "data", "media_type", "line"),
    [
        ("q3.pdf", b"%PDF-1.7", "application/pdf", "[file: q3.pdf (application/pdf, 8 B)]"),
        (
            "big.txt",
            b"x" * 11,
            "text/plain",
            "[file: big.txt (text/plain, 11 B); over the 10 bytes shown to the model]",
        ),
    ],
    ids=["another type", "a text file over max_text_file_bytes"],
)
async def test_a_file_the_model_is_not_shown_is_one_line_naming_it(
    ore_mock_openai: MockOpenAIServer,
    files: FileStore,
    name: str,
    data: bytes,
    media_type: str,
    line: str,
) -> None:
    files.policy = FilePolicy(allowed_types=("*/*",))
    attachment = await files.upload(data, name, media_type)
    content = await user_content(ore_mock_openai, [attachment], max_text_file_bytes=10)
    assert content == f"look\n\n{line}"


async def test_a_missing_file_is_described_and_the_message_still_goes(
    ore_mock_openai: MockOpenAIServer, files: FileStore
) -> None:
    gone = Attachment("gone.txt", "text/plain", 3, "0" * 64, Subjects().files_bucket)
    content = await user_content(ore_mock_openai, [gone])
    assert content.startswith("look\n\n[file: gone.txt (text/plain, 3 B); could not be read: ")
    assert "gone.txt is no longer stored" in content
