"""A compacted thread on the page (issue 42): the summary turn that starts the active path
is one collapsible line, "earlier conversation summarised (N turns)", that opens to the
summary; live, after a reload, and gone after `/uncompact`.

The core runs the compaction step with the scripted model's summary (Markdown with HTML
in it, which must stay text); `/compact` compacts now, so no test waits for a window to
fill. One stack and one browser serve the module; each test has its own thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, expect

from ore_conduit_web.testing import TIMEOUT, WebStack, answered, read_events
from ore_core.config import CompactionSettings

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)

SETTINGS = CompactionSettings(enabled=False, keep_last=2, pin_first=False)
EXCHANGES = 3  # answered questions before `/compact`: 4 of their 6 turns are summarised
LINE = "earlier conversation summarised (4 turns)"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path_factory.mktemp("web-compaction"), compaction=SETTINGS) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def http(stack: WebStack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers, timeout=TIMEOUT) as client:
        yield client


async def conversation(http: httpx.AsyncClient) -> str:
    """A thread with `EXCHANGES` answered questions; its id."""
    thread_id = str((await http.post("/api/threads", json={})).json()["id"])
    for n in range(1, EXCHANGES + 1):
        text = f"E2E_REPLY:a{n}"
        sent = await http.post(f"/api/threads/{thread_id}/messages", json={"text": text})
        assert sent.status_code == 202
        await read_events(http, thread_id, answered(n), after="0")
    return thread_id


async def compact(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    """Send `/compact` to a thread of `conversation` and wait for the core to have handled
    it (each answer ended with one `done`, the command adds one); the tree."""
    sent = await http.post(f"/api/threads/{thread_id}/messages", json={"text": "/compact"})
    assert sent.status_code == 202
    await read_events(http, thread_id, answered(EXCHANGES + 1), after="0")
    return await tree(http, thread_id)


async def tree(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    reply = await http.get(f"/api/threads/{thread_id}")
    assert reply.status_code == 200
    return dict(reply.json())


def shown(found: dict[str, Any]) -> list[dict[str, Any]]:
    """The views of the tree's active path, in order."""
    views = {view["id"]: view for view in found["turns"]}
    return [views[turn_id] for turn_id in found["path"]]


async def test_the_tree_marks_the_summary_turn_with_the_turns_it_replaced_and_the_summary(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await conversation(http)
    path = shown(await compact(http, thread_id))
    assert path[0]["role"] == "system"
    assert path[0]["compaction"] == {"turns": 4, "summary": stack.model.summary}
    assert [view["text"] for view in path[1:]] == ["E2E_REPLY:a3", "a3"]
    assert [view["compaction"] for view in path[1:]] == [None, None]


async def test_after_uncompact_the_tree_has_no_compaction_and_the_whole_path(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await conversation(http)
    await compact(http, thread_id)
    sent = await http.post(f"/api/threads/{thread_id}/messages", json={"text": "/uncompact"})
    assert sent.status_code == 202
    await read_events(http, thread_id, answered(EXCHANGES + 2), after="0")
    path = shown(await tree(http, thread_id))
    assert [view["compaction"] for view in path] == [None] * 2 * EXCHANGES
    assert [view["text"] for view in path][-2:] == ["E2E_REPLY:a3", "a3"]


@pytest_asyncio.fixture(loop_scope="module")
async def page(stack: WebStack, http: httpx.AsyncClient, context: BrowserContext) -> Page:
    """A signed-in page on a thread of `EXCHANGES` answered questions."""
    thread_id = await conversation(http)
    opened = await context.new_page()
    await opened.goto(f"{stack.url}#{thread_id}")
    await expect(opened.locator("article.assistant")).to_have_count(EXCHANGES)
    return opened


async def say(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill(text)
    await box.press("Enter")


async def test_a_compaction_is_one_line_that_opens_to_the_summary_live_and_after_a_reload(
    page: Page,
) -> None:
    await say(page, "/compact")
    line = page.locator("details.compaction")
    await expect(line.locator("summary")).to_have_text(LINE)
    await expect(page.locator("article.assistant .body")).to_have_text(["a3"])
    await expect(line.locator(".body")).to_be_hidden()
    await page.reload()
    await expect(line.locator("summary")).to_have_text(LINE)
    await line.get_by_text(LINE).click()
    await expect(line.locator(".body strong")).to_have_text("ship it")
    await expect(line.locator(".body")).to_contain_text('<img src=x onerror="window.injected = 1">')
    assert await page.evaluate("window.injected") is None
    await expect(page.locator("article.system")).to_have_count(0)


async def test_the_command_is_not_left_pending_and_its_notice_is_shown(page: Page) -> None:
    await say(page, "/compact")
    await expect(page.locator("details.compaction")).to_have_count(1)
    notice = page.get_by_role("status").filter(has_text="/uncompact restores them")
    await expect(notice).to_be_visible()
    await expect(page.locator("article.pending")).to_have_count(0)
    await expect(page.locator("article.streaming")).to_have_count(0)


async def test_uncompact_takes_the_line_away_and_says_so(page: Page) -> None:
    await say(page, "/compact")
    await expect(page.locator("details.compaction")).to_have_count(1)
    await say(page, "/uncompact")
    await expect(page.get_by_role("status")).to_have_text(
        "Restored the 4 summarised turns (the summary stays in the thread's history)."
    )
    await expect(page.locator("details.compaction")).to_have_count(0)
    await expect(page.locator("article.assistant .body")).to_have_text(["a1", "a2", "a3"])
