"""The page's layout at phone and desktop sizes, and the API's /docs, in a real browser.

The screenshots are compared by the geometry of the layout boxes (where the thread
list, the header's buttons and the composer are, and that nothing is wider than the
window), not pixel by pixel against a stored image: a baseline image changes with every
Chromium and font version of the machine, the boxes only when the layout does. The
screenshots themselves go to `screenshots` for people to look at.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, Route, expect

from ore_conduit_web.testing import TIMEOUT, WebStack

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path_factory.mktemp("web-layout")) as running:
        yield running


async def opened(stack: WebStack, context: BrowserContext, size: dict[str, int]) -> Page:
    """A signed-in page of `size` with one answered thread open."""
    page = await context.new_page()
    await page.set_viewport_size(size)  # type: ignore[arg-type]
    await page.goto(stack.url)
    box = page.get_by_label("Message", exact=True)
    await box.fill("E2E_REPLY:an answer to show")
    await box.press("Enter")
    await expect(page.locator("article.assistant .body").first).to_have_text("an answer to show")
    return page


async def box_of(page: Page, selector: str) -> dict[str, float]:
    found = await page.locator(selector).bounding_box()
    assert found is not None, f"{selector} is not shown"
    return dict(found)


async def overflow(page: Page) -> tuple[int, int]:
    widths: Any = await page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
    return int(widths[0]), int(widths[1])


async def header_buttons_fit(page: Page) -> bool:
    inside: Any = await page.evaluate(
        """() => [...document.querySelectorAll('header button')]
             .filter((b) => b.offsetParent !== null)
             .every((b) => { const r = b.getBoundingClientRect();
                             return r.left >= 0 && r.right <= window.innerWidth; })"""
    )
    return bool(inside)


async def test_a_phone_has_no_horizontal_overflow(
    stack: WebStack, context: BrowserContext, screenshots: Path
) -> None:
    page = await opened(stack, context, PHONE)
    await page.screenshot(path=screenshots / "phone.png")
    scroll_width, window = await overflow(page)
    assert scroll_width <= window
    assert await header_buttons_fit(page)


async def test_a_phone_gets_a_composer_nearly_as_wide_as_the_screen(
    stack: WebStack, context: BrowserContext
) -> None:
    page = await opened(stack, context, PHONE)
    composer = await box_of(page, "#input")
    assert composer["width"] >= 0.6 * PHONE["width"]
    assert composer["x"] >= 0
    assert composer["x"] + composer["width"] <= PHONE["width"]


async def test_a_phone_shows_the_thread_list_as_a_drawer_that_opens_and_closes(
    stack: WebStack, context: BrowserContext, screenshots: Path
) -> None:
    page = await opened(stack, context, PHONE)
    threads = page.get_by_label("Thread list", exact=True)
    await expect(threads).not_to_be_visible()
    await page.get_by_label("Show threads").click()
    await expect(threads).to_be_visible()
    await expect(page.get_by_label("Show threads")).to_have_attribute("aria-expanded", "true")
    # The drawer slides in (a short transition that may not have started yet when the
    # button's state changed): wait for it to come to rest at the left edge.
    await page.wait_for_function(
        "document.getElementById('sidebar').getBoundingClientRect().x === 0"
    )
    drawer = await box_of(page, "#sidebar")
    assert drawer["x"] == 0
    assert drawer["width"] <= PHONE["width"]
    await page.screenshot(path=screenshots / "phone-drawer.png")
    await page.get_by_label("Hide threads").click()
    await expect(threads).not_to_be_visible()


async def test_a_phone_drawer_closes_when_a_thread_is_chosen(
    stack: WebStack, context: BrowserContext
) -> None:
    page = await opened(stack, context, PHONE)
    await page.get_by_label("Show threads").click()
    await page.get_by_label("Thread list", exact=True).get_by_role("button").first.click()
    await expect(page.get_by_label("Thread list", exact=True)).not_to_be_visible()


async def test_a_desktop_keeps_the_thread_list_beside_the_chat(
    stack: WebStack, context: BrowserContext, screenshots: Path
) -> None:
    page = await opened(stack, context, DESKTOP)
    await page.screenshot(path=screenshots / "desktop.png")
    sidebar = await box_of(page, "#sidebar")
    chat = await box_of(page, "main")
    assert (sidebar["x"], sidebar["width"]) == (0, 260)
    assert chat["x"] == 260
    assert chat["width"] == DESKTOP["width"] - 260
    await expect(page.get_by_label("Show threads")).to_be_hidden()
    scroll_width, window = await overflow(page)
    assert scroll_width <= window
    assert await header_buttons_fit(page)


async def test_the_api_docs_render_with_nothing_from_the_internet(
    stack: WebStack, context: BrowserContext
) -> None:
    elsewhere: list[str] = []

    async def loopback_only(route: Route) -> None:
        if route.request.url.startswith(stack.base):
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    page = await context.new_page()
    await page.route("**/*", loopback_only)
    await page.goto(stack.base + "/docs")
    await expect(page.locator(".swagger-ui .title")).to_contain_text("ore web conduit")
    await expect(page.get_by_text("/api/threads/{thread_id}/interrupt")).to_be_visible()
    assert elsewhere == []
