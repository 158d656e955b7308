"""Fixtures of the web conduit's tests: a whole stack per test, an HTTP client, and the
browser of the page's tests.

`stack` is a `WebStack` (nats-server, core with the scripted model, the conduit on a
free loopback port); `http` an httpx client signed in with the generated token;
`browser` Debian's Chromium through Playwright, one per test module (without chromium
the browser tests skip with the install command, except under CI=true, where a missing
browser fails), `context` a fresh browser context per test, `screenshots` where the key
states' screenshots go (`ORE_WEB_SCREENSHOTS`, or a temporary directory). Tests
run in pytest's importlib mode: test modules import nothing from here at runtime.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, async_playwright

from ore_conduit_web.testing import TIMEOUT, WebStack


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path) as running:
        yield running


@pytest_asyncio.fixture
async def http(stack: WebStack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers, timeout=TIMEOUT) as client:
        yield client


INSTALL = "apt-get install -y chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chromium is missing on CI: {INSTALL}")
        pytest.skip(f"chromium not found: {INSTALL}")
    return found


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("ORE_WEB_SCREENSHOTS")
    directory = Path(wanted) if wanted else tmp_path_factory.mktemp("web-screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    executable = chromium_path()
    home = tmp_path_factory.mktemp("chromium-home")
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_STATE_HOME": str(home / "state"),
    }
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=ARGS, env=env)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    opened = await browser.new_context(accept_downloads=True)
    opened.set_default_timeout(TIMEOUT * 1000)
    try:
        yield opened
    finally:
        await opened.close()
