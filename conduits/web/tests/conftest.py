"""Fixtures of the web conduit's API tests: a whole stack per test, and an HTTP client.

`stack` is a `WebStack` (nats-server, core with the scripted model, the conduit on a
free loopback port); `http` an httpx client signed in with the generated token. Tests
run in pytest's importlib mode: test modules import nothing from here at runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

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
