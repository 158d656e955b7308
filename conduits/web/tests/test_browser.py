"""The chat page in a real browser: Playwright driving Debian's Chromium.

One stack (nats-server, core with the scripted model, conduit) and one browser serve the
whole module; each test opens its own browser context (cookies, storage) and thread.
The browser, its contexts and the screenshot directory are conftest.py's fixtures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, expect

from ore_conduit_web.testing import TIMEOUT, WebStack, properties_stored, read_events
from ore_core import EventContext, UserMessageEvent
from ore_core.conduit import ConduitClient, ControlClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path_factory.mktemp("web-stack")) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def page(stack: WebStack, context: BrowserContext) -> Page:
    """A signed-in page on a new thread."""
    opened = await context.new_page()
    await opened.goto(stack.url)
    await opened.get_by_label("New chat", exact=True).click()
    await expect(opened.get_by_label("Delete thread")).to_be_visible()
    return opened


async def say(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill(text)
    await box.press("Enter")


async def test_an_answer_streams_in_as_markdown_with_highlighted_code(
    page: Page, screenshots: Path
) -> None:
    await say(
        page, "E2E_REPLY:Here is **bold** and code:\n\n```python\ndef f():\n    return 1\n```"
    )
    answer = page.locator("article.assistant").last
    await expect(answer.locator("strong")).to_have_text("bold")
    await expect(answer.locator("pre.code .tok-kw").first).to_have_text("def")
    await expect(page.locator("article.user").last).to_contain_text("E2E_REPLY:Here is")
    await page.screenshot(path=screenshots / "answer.png")


async def test_the_copy_button_copies_a_code_block(page: Page) -> None:
    # Headless Chromium has no system clipboard: record what the page writes to it.
    await page.evaluate(
        "() => { window.copied = [];"
        " navigator.clipboard.writeText = async (t) => { copied.push(t); }; }"
    )
    await say(page, "E2E_REPLY:```\nprint(42)\n```")
    copy = page.get_by_label("Copy code")
    await copy.click()
    await expect(copy).to_have_text("Copied")
    assert await page.evaluate("window.copied") == ["print(42)"]


async def test_stop_interrupts_the_model_in_the_core(
    stack: WebStack, page: Page, screenshots: Path
) -> None:
    stack.model.hold_again()
    before = stack.model.cancelled
    await say(page, "E2E_SLOW_REPLY:abcdefghijkl")
    await expect(page.locator("article.assistant.streaming")).to_contain_text("abcdef")
    await page.screenshot(path=screenshots / "streaming.png")
    await page.get_by_label("Stop generating").click()
    await expect(page.get_by_text("Stopped.")).to_be_visible()
    assert stack.model.cancelled == before + 1
    await expect(page.get_by_label("Stop generating")).to_be_hidden()


async def test_escape_stops_and_shift_enter_adds_a_line(stack: WebStack, page: Page) -> None:
    stack.model.hold_again()
    box = page.get_by_label("Message", exact=True)
    await box.fill("E2E_SLOW_REPLY:one")
    await box.press("Shift+Enter")
    await box.type("two")
    assert await box.input_value() == "E2E_SLOW_REPLY:one\ntwo"
    await box.press("Enter")
    await expect(page.locator("article.assistant.streaming")).to_be_visible()
    before = stack.model.cancelled
    await page.keyboard.press("Escape")
    await expect(page.get_by_text("Stopped.")).to_be_visible()
    assert stack.model.cancelled == before + 1


async def test_an_edit_branches_and_the_arrows_switch_versions(
    page: Page, screenshots: Path
) -> None:
    await say(page, "E2E_REPLY:first answer")
    await expect(page.locator("article.assistant .body")).to_have_text(["first answer"])
    await expect(page.locator("article.assistant .tools")).to_have_text(["CopyRegenerate"])
    await page.get_by_label("Edit message").click()
    await page.get_by_label("Edit message", exact=True).fill("E2E_REPLY:second answer")
    await page.get_by_label("Save and answer").click()
    await expect(page.locator("article.assistant .body")).to_have_text(["second answer"])
    question = page.locator("article.user").first
    await expect(question.get_by_role("status")).to_have_text("2 / 2")
    await page.screenshot(path=screenshots / "edited.png")
    await question.get_by_label("Previous sibling message").click()
    await expect(page.locator("article.assistant .body")).to_have_text(["first answer"])
    await expect(page.locator("article.user").first.get_by_role("status")).to_have_text("1 / 2")


async def test_an_edit_saved_without_an_answer_shows_the_question_alone(
    page: Page, screenshots: Path
) -> None:
    await say(page, "E2E_REPLY:an answer")
    await expect(page.locator("article.assistant .body")).to_have_text(["an answer"])
    await page.get_by_label("Edit message").click()
    await page.get_by_label("Edit message", exact=True).fill("E2E_REPLY:kept as typed")
    await page.get_by_label("Save edit without an answer").click()
    question = page.locator("article.user").first
    await expect(question.get_by_role("status")).to_have_text("2 / 2")
    await expect(question).to_contain_text("E2E_REPLY:kept as typed")
    await expect(page.locator("article.assistant")).to_have_count(0)
    await page.screenshot(path=screenshots / "edit-saved.png")


async def test_regenerate_shows_a_sibling_answer(page: Page) -> None:
    await say(page, "E2E_COUNTED_REPLY:pick")
    await expect(page.locator("article.assistant .body")).to_have_text(["pick #1"])
    await page.get_by_label("Regenerate answer").click()
    await expect(page.locator("article.assistant .body")).to_have_text(["pick #2"])
    answer = page.locator("article.assistant").first
    await expect(answer.get_by_role("status")).to_have_text("2 / 2")
    await expect(page.locator("article.user")).to_have_count(1)
    await answer.get_by_label("Previous sibling message").click()
    await expect(page.locator("article.assistant .body")).to_have_text(["pick #1"])


async def test_a_reload_in_the_middle_of_an_answer_shows_all_of_it(
    stack: WebStack, page: Page, screenshots: Path
) -> None:
    stack.model.hold_again()
    await say(page, "E2E_SLOW_REPLY:abcdefghijkl")
    await expect(page.locator("article.assistant.streaming")).to_contain_text("abcdef")
    await page.reload()
    streaming = page.locator("article.assistant.streaming")
    await expect(streaming).to_contain_text("abcdef")
    await expect(page.locator("article.user.pending")).to_have_text("E2E_SLOW_REPLY:abcdefghijkl")
    await page.screenshot(path=screenshots / "reloaded-mid-answer.png")
    stack.model.release()
    await expect(page.locator("article.assistant .body")).to_have_text(["abcdefghijkl"])


async def test_two_tabs_on_one_thread_stay_in_step(page: Page, context: BrowserContext) -> None:
    other = await context.new_page()
    await other.goto(page.url)
    await expect(other.get_by_label("Delete thread")).to_be_visible()
    await say(page, "E2E_REPLY:seen twice")
    for tab in (page, other):
        await expect(tab.locator("article.assistant .body")).to_have_text(["seen twice"])
    await other.get_by_label("Regenerate answer").click()
    await expect(page.locator("article.assistant").first.get_by_role("status")).to_have_text(
        "2 / 2"
    )


async def test_the_thread_list_shows_titles_and_searches(
    stack: WebStack, page: Page, screenshots: Path
) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers) as http:
        for title in ("Zebra facts", "Zucchini recipes"):
            assert (await http.post("/api/threads", json={"title": title})).status_code == 201
    await page.reload()
    threads = page.get_by_label("Thread list")
    await expect(threads.get_by_text("Zebra facts")).to_be_visible()
    await page.get_by_label("Search threads").fill("zucchini")
    await expect(threads.locator("li .name")).to_have_text(["Zucchini recipes"])
    await expect(page.locator("#problem")).to_be_hidden()
    await page.screenshot(path=screenshots / "search.png")
    await threads.get_by_text("Zucchini recipes").click()
    await expect(page.locator("h1")).to_have_text("Zucchini recipes")


async def test_rename_and_delete_a_thread_in_page_dialogs(page: Page) -> None:
    browser_dialogs: list[str] = []
    page.on("dialog", lambda dialog: browser_dialogs.append(dialog.type))
    await page.get_by_label("Rename thread").click()
    dialog = page.locator("dialog#ask")
    await expect(dialog).to_be_visible()
    await dialog.get_by_label("Value").fill("Renamed")
    await dialog.get_by_role("button", name="Rename").click()
    await expect(page.locator("h1")).to_have_text("Renamed")
    await expect(page.get_by_label("Thread list").get_by_text("Renamed")).to_be_visible()
    await page.get_by_label("Delete thread").click()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(page.get_by_label("Thread list").get_by_text("Renamed")).to_have_count(0)
    assert browser_dialogs == []


async def test_export_downloads_markdown(page: Page) -> None:
    await say(page, "E2E_REPLY:exported text")
    await expect(page.locator("article.assistant .body")).to_have_text(["exported text"])
    async with page.expect_download() as waiting:
        await page.get_by_label("Export as Markdown").click()
    download = await waiting.value
    text = await asyncio.to_thread(Path(await download.path()).read_text)
    assert "## Assistant\n\nexported text" in text


async def test_a_failed_answer_is_shown_inline_with_retry(
    stack: WebStack, page: Page, screenshots: Path
) -> None:
    await say(page, "E2E_FAIL:the model is down")
    alert = page.locator("#messages [role=alert]")
    await expect(alert).to_contain_text("the model is down")
    await page.screenshot(path=screenshots / "error.png")
    started = stack.model.started
    await alert.get_by_label("Retry").click()
    async with asyncio.timeout(TIMEOUT):
        await stack.model.wait_for_turns(started + 1)
    await expect(alert).to_contain_text("the model is down")
    await expect(page.locator("article.user")).to_have_count(1)


async def test_reasoning_is_a_collapsed_step(page: Page) -> None:
    await say(page, "E2E_REASON:thought through")
    step = page.locator("article.assistant details")
    await expect(step.locator("summary")).to_have_text("Reasoning")
    assert await step.get_attribute("open") is None
    await step.locator("summary").click()
    await expect(step.locator("pre")).to_have_text("Let me think about it.")


async def test_a_tool_call_is_a_collapsed_step(page: Page) -> None:
    await say(page, "E2E_TOOL:nats")
    step = page.locator("article.assistant details")
    await expect(step.locator("summary")).to_have_text("Tool call: search")
    assert await step.get_attribute("open") is None
    await step.locator("summary").click()
    await expect(step.locator("pre")).to_have_text('{"q": "nats"}')


async def test_a_page_without_a_token_says_how_to_sign_in(
    stack: WebStack, browser: Browser
) -> None:
    stranger = await browser.new_context()
    try:
        opened = await stranger.new_page()
        await opened.goto(stack.base + "/")
        await expect(opened.locator("#problem")).to_contain_text("not signed in")
    finally:
        await stranger.close()


async def test_the_theme_toggles_between_light_and_dark(page: Page, screenshots: Path) -> None:
    await page.get_by_label("Toggle dark mode").click()
    theme = await page.evaluate("document.documentElement.dataset.theme")
    await page.screenshot(path=screenshots / f"theme-{theme}.png")
    await page.get_by_label("Toggle dark mode").click()
    assert await page.evaluate("document.documentElement.dataset.theme") != theme


async def test_html_in_an_answer_is_shown_as_text_never_run(page: Page) -> None:
    await say(
        page,
        'E2E_REPLY:<img src=x onerror="window.pwned=1"> <script>window.pwned=1</script> '
        "[click](javascript:window.pwned=1) [ok](https://example.org)",
    )
    answer = page.locator("article.assistant:not(.streaming) .body")
    await expect(answer.locator("a")).to_have_count(1)
    await expect(answer).to_contain_text('<img src=x onerror="window.pwned=1">')
    assert await answer.locator("img, script").count() == 0
    assert await answer.locator("a").evaluate_all("links => links.map(a => a.href)") == [
        "https://example.org/"
    ]
    assert await page.evaluate("window.pwned") is None


async def test_a_relayed_message_shows_with_its_label_its_edit_and_its_delete(
    stack: WebStack, page: Page, screenshots: Path
) -> None:
    thread = page.url.partition("#")[2]
    room = await ConduitClient.connect(stack.nats_url, name="room", request_timeout=TIMEOUT)
    try:
        endpoint = {"namespace": "room", "key": "room.chan", "value": f"page-{thread}"}
        await ControlClient.beside(room).call(
            "links.add", {"thread": thread, "endpoint": endpoint, "answer": "none"}
        )
        headers = {"Authorization": f"Bearer {stack.token}"}
        async with httpx.AsyncClient(base_url=stack.base, headers=headers) as http:
            async with asyncio.timeout(TIMEOUT):  # see test_bridge.LINK_SETTINGS: a core race
                stored = properties_stored("ore.gateway.label")
                await read_events(http, thread, stored, after="0")
        context = EventContext(provenance="room", user="u-bo", user_name="Bo")
        said = UserMessageEvent(id="bo-1", content="helo from the room", context=context)
        await room.send(thread, said)
        copy = page.get_by_label("message from Bo (room)")
        await expect(copy).to_contain_text("helo from the room")
        await expect(copy.get_by_label("Edit message")).to_have_count(0)
        await room.edit(thread, "bo-1", "hello from the room", id="bo-1-edit", context=context)
        await expect(copy).to_contain_text("hello from the room")
        await expect(copy.locator(".edited")).to_have_text("(edited)")
        await page.screenshot(path=screenshots / "relayed-edited.png")
        edited = (await room.turns(thread))[-1]
        await room.delete(thread, edited.id, id="bo-1-delete")
        await expect(copy).to_have_count(0)
    finally:
        await room.close()


async def test_regenerate_on_a_linked_thread_relays_no_second_question(
    stack: WebStack, page: Page
) -> None:
    thread = page.url.partition("#")[2]
    room = await ConduitClient.connect(stack.nats_url, name="room", request_timeout=TIMEOUT)
    try:
        endpoint = {"namespace": "room", "key": "room.chan", "value": f"regen-{thread}"}
        await ControlClient.beside(room).call(
            "links.add", {"thread": thread, "endpoint": endpoint, "answer": "all"}
        )
        headers = {"Authorization": f"Bearer {stack.token}"}
        async with httpx.AsyncClient(base_url=stack.base, headers=headers) as http:
            async with asyncio.timeout(TIMEOUT):  # see test_bridge.LINK_SETTINGS: a core race
                await read_events(http, thread, properties_stored("ore.gateway.label"), after="0")
        await say(page, "E2E_COUNTED_REPLY:linked")
        await expect(page.locator("article.assistant .body")).to_have_text(["linked #1"])
        async with room.events(thread, kinds={"turn_complete"}) as feed:
            await page.get_by_label("Regenerate answer").click()
            roles = []
            async with asyncio.timeout(TIMEOUT):
                async for delivery in feed:
                    roles.append(delivery.event.turn.role)
                    if roles[-1] == "assistant":
                        break
        assert roles == ["assistant"]  # the new answer, and no second question
        await expect(page.locator("article.assistant .body")).to_have_text(["linked #2"])
        await expect(page.locator("article.assistant").first.get_by_role("status")).to_have_text(
            "2 / 2"
        )
        await expect(page.locator("article.user")).to_have_count(1)
    finally:
        await room.close()


async def test_deleting_a_message_on_the_page_removes_it(page: Page) -> None:
    await say(page, "E2E_REPLY:unwanted")
    await expect(page.locator("article.assistant .body")).to_have_text(["unwanted"])
    await page.locator("article.user").first.get_by_label("Delete message").click()
    await expect(page.locator("article.user")).to_have_count(0)
