"""What users of chat pages expect, in a real browser: dates, rename and delete in the
thread list, which processor answers, authors and times on messages, errors in plain
words that can be dismissed, and the message length limit counted in the composer before
the server refuses it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Locator, Page, expect

from ore_conduit_web.testing import TIMEOUT, WebStack

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)

LIMIT = 32000


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path_factory.mktemp("web-features"), user="alice") as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def page(stack: WebStack, context: BrowserContext) -> Page:
    """A signed-in page with one answered thread open."""
    opened = await context.new_page()
    await opened.goto(stack.url)
    box = opened.get_by_label("Message", exact=True)
    await box.fill("E2E_REPLY:hello there")
    await box.press("Enter")
    await expect(opened.locator("article.assistant .body")).to_have_text(["hello there"])
    # The first message names the thread a moment after it is sent: the header and the
    # list item show that title before a test reads either.
    title = "E2E_REPLY:hello there"
    await expect(opened.locator("h1")).to_have_text(title)
    await expect(current_item(opened).get_by_label(f"Rename {title}", exact=True)).to_have_count(1)
    return opened


def current_item(page: Page) -> Locator:
    """The open thread's item in the thread list."""
    return page.locator("#threads li", has=page.locator("[aria-current=true]"))


async def test_each_thread_in_the_list_shows_when_it_was_last_active(page: Page) -> None:
    item = current_item(page)
    when = item.locator("time")
    await expect(when).to_have_count(1)
    assert await when.get_attribute("datetime")
    await expect(when).not_to_be_empty()


async def test_the_header_names_what_answers_when_there_is_no_model_to_pick(
    page: Page,
) -> None:
    await expect(page.get_by_label("Model answering")).to_have_text("scripted")
    await expect(page.get_by_label("Model", exact=True)).to_be_hidden()


async def test_a_thread_is_renamed_from_its_item_in_the_list(page: Page) -> None:
    title = await page.locator("h1").text_content()
    await current_item(page).get_by_label(f"Rename {title}", exact=True).click()
    await page.locator("dialog#ask").get_by_label("Value").fill("From the list")
    await page.locator("dialog#ask").get_by_role("button", name="Rename").click()
    await expect(page.locator("h1")).to_have_text("From the list")


async def test_a_thread_is_deleted_from_its_item_after_a_confirmation(page: Page) -> None:
    title = await page.locator("h1").text_content()
    await current_item(page).get_by_label(f"Delete {title}", exact=True).click()
    dialog = page.locator("dialog#ask")
    await expect(dialog).to_contain_text(f"Delete “{title}”?")
    await dialog.get_by_role("button", name="Delete").click()
    await expect(page.locator("h1")).to_have_text("ore")


async def test_a_cancelled_delete_keeps_the_thread(page: Page) -> None:
    title = await page.locator("h1").text_content()
    await current_item(page).get_by_label(f"Delete {title}", exact=True).click()
    await page.locator("dialog#ask").get_by_role("button", name="Cancel").click()
    await expect(page.locator("dialog#ask")).to_be_hidden()
    await expect(current_item(page)).to_have_count(1)


async def test_each_message_shows_its_author_and_time(page: Page) -> None:
    question, answer = page.locator("article.user"), page.locator("article.assistant")
    await expect(question.locator(".meta .author")).to_have_text("alice")
    await expect(answer.locator(".meta .author")).to_have_text("ore")
    for article in (question, answer):
        assert await article.locator(".meta time").get_attribute("datetime")


async def test_an_error_is_said_in_plain_words_and_can_be_dismissed(
    stack: WebStack, context: BrowserContext
) -> None:
    opened = await context.new_page()
    await opened.goto(stack.url)
    await opened.goto(stack.base + "/#0123456789abcdef")
    problem = opened.locator("#problem")
    await expect(problem).to_contain_text("That thread is gone")
    await problem.get_by_label("Dismiss error").click()
    await expect(problem).to_be_hidden()


async def test_the_composer_counts_characters_near_the_limit(page: Page) -> None:
    await page.get_by_label("Message", exact=True).fill("x" * (LIMIT - 10))
    await expect(page.locator("#count")).to_have_text(f"{LIMIT - 10:,} / {LIMIT:,} characters")
    await expect(page.get_by_label("Send message")).to_be_enabled()


async def test_a_message_over_the_limit_is_explained_and_not_sent(page: Page) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill("x" * (LIMIT + 5))
    await expect(page.locator("#count")).to_contain_text("5 over the limit of 32,000")
    await expect(page.get_by_label("Send message")).to_be_disabled()
    await box.press("Enter")
    await expect(page.locator("article.user")).to_have_count(1)
    await expect(page.locator("#problem")).to_be_hidden()
    assert len(await box.input_value()) == LIMIT + 5  # nothing typed is lost
