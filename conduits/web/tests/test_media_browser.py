"""Files and reactions on the page (issue 39), in a real browser (Playwright, Debian's
Chromium) against the real core, whose processor is the openai plugin's talking to its
mock model server (which records every request), and a second endpoint linked to the
page's thread: an SDK client of namespace `room`, as in test_bridge.py.

Each test opens its own thread, links the room to it and reads what the room is shown.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, expect

from ore_conduit_web.testing import TIMEOUT, WebStack, properties_stored, read_events
from ore_core import EventContext, LifecycleEvent, Role, TurnCompleteEvent
from ore_core.artifacts import Attachment
from ore_core.conduit import ConduitClient, ControlClient, Delivery
from ore_core.events import ReactionEvent
from ore_core.files import FilePolicy
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)

POLICY = FilePolicy(max_size=100_000, allowed_types=("image/*", "application/pdf"))


def png(width: int = 3, height: int = 2) -> bytes:
    """A real (decodable) red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


IMAGE = png()


@pytest.fixture(scope="module")
def model_server() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(responder=lambda body: MockResponse(text="a red dot")) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, model_server: MockOpenAIServer
) -> AsyncIterator[WebStack]:
    config = OpenAIConfig(base_url=model_server.base_url, model="m", max_retries=0)
    async with OpenAIProcessor(config) as processor:
        directory = tmp_path_factory.mktemp("web-media")
        async with WebStack(
            directory, processor=processor, processor_name="openai", files=POLICY
        ) as running:
            yield running


@dataclass
class Room:
    """The second endpoint: every event of the thread it is shown, as it arrives."""

    client: ConduitClient
    thread: str
    seen: list[Delivery] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, subscribed: asyncio.Event) -> None:
        async with self.client.events(self.thread) as feed:
            subscribed.set()
            async for delivery in feed:
                if delivery.sequence is not None:
                    self.seen.append(delivery)
                    self.changed.set()

    async def until(self, found: Callable[[Any], bool], after: int = -1) -> tuple[int, Any]:
        """The first stored event past index `after` that `found` holds of (waiting for
        it), and its index."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                for index in range(after + 1, len(self.seen)):
                    if found(self.seen[index].event):
                        return index, self.seen[index].event
                self.changed.clear()
                await self.changed.wait()


@pytest_asyncio.fixture(loop_scope="module")
async def page(stack: WebStack, context: BrowserContext) -> Page:
    """A signed-in page on a new thread."""
    opened = await context.new_page()
    await opened.goto(stack.url)
    await opened.get_by_label("New chat", exact=True).click()
    await expect(opened.get_by_label("Delete thread")).to_be_visible()
    return opened


@pytest_asyncio.fixture(loop_scope="module")
async def room(stack: WebStack, page: Page) -> AsyncIterator[Room]:
    """The room, linked to the page's thread and reading it."""
    thread = page.url.rpartition("#")[2]
    client = await ConduitClient.connect(stack.nats_url, name="room", request_timeout=TIMEOUT)
    linked = Room(client, thread)
    await ControlClient.beside(client).call(
        "links.add", {"thread": thread, "endpoint": room_channel(thread), "answer": "all"}
    )
    async with stack_http(stack) as http, asyncio.timeout(TIMEOUT):
        # the link's settings are stored before anything is sent (see test_bridge.py)
        await read_events(http, thread, properties_stored("ore.gateway.label"), after="0")
    subscribed = asyncio.Event()
    reader = asyncio.create_task(linked.read(subscribed))
    await subscribed.wait()
    try:
        yield linked
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await client.close()


def room_channel(thread: str) -> dict[str, str]:
    """The room's endpoint for a thread: a channel of its own (an endpoint belongs to
    one thread)."""
    return {"namespace": "room", "key": "room.chan", "value": f"chan-{thread}"}


def stack_http(stack: WebStack) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {stack.token}"}
    return httpx.AsyncClient(base_url=stack.base, headers=headers, timeout=TIMEOUT)


async def drop(page: Page, name: str, data: bytes, media_type: str) -> None:
    """Drag a file over the page and drop it, as a file manager does."""
    transfer = await page.evaluate_handle(
        """([b64, name, type]) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type }));
            return transfer;
        }""",
        [base64.b64encode(data).decode(), name, media_type],
    )
    for kind in ("dragenter", "dragover", "drop"):
        await page.dispatch_event("#messages", kind, {"dataTransfer": transfer})


def user_turn_with_files(event: Any) -> bool:
    return (
        isinstance(event, TurnCompleteEvent)
        and event.turn.role == Role.USER
        and any(isinstance(a, Attachment) for a in event.turn.artifacts)
    )


async def test_a_dropped_image_reaches_the_model_the_page_and_the_other_endpoint(
    page: Page, room: Room, model_server: MockOpenAIServer, screenshots: Path
) -> None:
    await drop(page, "dot.png", IMAGE, "image/png")
    await expect(page.locator("#attachments li.ready")).to_contain_text("dot.png")
    box = page.get_by_label("Message", exact=True)
    await box.fill("what is this?")
    await box.press("Enter")
    await expect(page.locator("article.assistant").last).to_contain_text("a red dot")

    url = "data:image/png;base64," + base64.b64encode(IMAGE).decode()
    asked = model_server.requests[-1]["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": url}} in asked
    assert {"type": "text", "text": "what is this?"} in asked

    image = page.locator("article.user img[alt='dot.png']")
    await expect(image).to_be_visible()
    assert await image.evaluate("(img) => img.naturalWidth") == 3
    await expect(page.locator("#attachments")).to_be_hidden()
    await page.screenshot(path=screenshots / "dropped-image.png")

    _, stored = await room.until(user_turn_with_files)
    turn = stored.turn
    (file,) = [a for a in turn.artifacts if isinstance(a, Attachment)]
    assert (file.name, file.media_type, file.sha256) == (
        "dot.png",
        "image/png",
        hashlib.sha256(IMAGE).hexdigest(),
    )
    assert await room.client.fetch(room.thread, file) == IMAGE


async def test_a_reaction_set_on_the_page_reaches_the_other_endpoint_without_a_model_turn(
    page: Page, room: Room, model_server: MockOpenAIServer, stack: WebStack
) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill("hello")
    await box.press("Enter")
    answer = page.locator("article.assistant").last
    await expect(answer).to_contain_text("a red dot")
    asked = len(model_server.requests)

    await answer.get_by_label("Add reaction").click()
    await answer.get_by_label("React with 🎉").click()
    await expect(answer.locator("button.reaction")).to_have_text("🎉 1")
    await expect(answer.locator("button.reaction")).to_have_attribute("aria-pressed", "true")

    user = (await page.evaluate("fetch('/api/me').then((r) => r.json())"))["user"]
    reacted, reaction = await room.until(lambda e: isinstance(e, ReactionEvent))
    assert (reaction.emoji, reaction.reactors, reaction.remove) == ("🎉", (f"web:{user}",), False)
    # the core has handled the reaction (its `done`): had it started a turn, the model
    # would have been asked before that
    await room.until(lambda e: isinstance(e, LifecycleEvent) and e.phase == "done", reacted)
    assert len(model_server.requests) == asked


async def test_a_reaction_made_elsewhere_shows_and_the_page_can_take_its_own_back(
    page: Page, room: Room
) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill("hello")
    await box.press("Enter")
    question = page.locator("article.user").last
    await expect(page.locator("article.assistant").last).to_contain_text("a red dot")
    turn_id = await question.get_attribute("data-turn")
    assert turn_id
    context = EventContext(provenance="room", user="u-bo", user_name="Bo")
    await room.client.react(room.thread, turn_id, "👍", context=context)
    chip = question.locator("button.reaction")
    await expect(chip).to_have_text("👍 1")
    await expect(chip).to_have_attribute("aria-pressed", "false")
    await chip.click()  # react too
    await expect(chip).to_have_text("👍 2")
    await chip.click()  # and take it back
    await expect(chip).to_have_text("👍 1")
    await expect(chip).to_have_attribute("aria-pressed", "false")


async def test_a_file_from_the_other_endpoint_is_a_download_link_on_the_page(
    page: Page, room: Room
) -> None:
    pdf = b"%PDF-1.4\n" + bytes(range(256)) * 8
    attachment = await room.client.upload(pdf, "q3 report.pdf", "application/pdf")
    await room.client.send(
        room.thread, "the report", attachments=[attachment], user="u-bo", user_name="Bo"
    )
    link = page.get_by_role("link", name="q3 report.pdf")
    await expect(link).to_be_visible()
    async with page.expect_download() as waiting:
        await link.click()
    download = await waiting.value
    assert download.suggested_filename == "q3 report.pdf"
    saved = await download.path()
    assert await asyncio.to_thread(Path(saved).read_bytes) == pdf


async def test_the_paperclip_refuses_a_file_over_the_limit_on_the_page(
    page: Page, stack: WebStack
) -> None:
    async with page.expect_file_chooser() as opened:
        await page.get_by_label("Attach files").click()
    chooser = await opened.value
    await chooser.set_files(
        [
            {"name": "huge.png", "mimeType": "image/png", "buffer": bytes(100_001)},
            {"name": "tool.zip", "mimeType": "application/zip", "buffer": b"PK"},
        ]
    )
    problem = page.get_by_role("alert")
    await expect(problem).to_contain_text(
        "huge.png is 100.0 kB, over the 100.0 kB limit for files."
    )
    await expect(problem).to_contain_text("tool.zip: files of type application/zip are not allowed")
    await expect(page.locator("#attachments")).to_be_hidden()
