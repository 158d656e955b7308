"""Schemathesis over the OpenAPI schema: every non-streaming route, against a real server.

The stack runs on an event loop of its own thread, so schemathesis's synchronous client
talks to it over loopback like any other program.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from ore_conduit_web.testing import TIMEOUT, WebStack

pytestmark = pytest.mark.slow


class StackThread:
    """A `WebStack` served from a thread with its own event loop."""

    def __init__(self, directory: Path) -> None:
        self.stack = WebStack(directory)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="web-stack", daemon=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the test thread
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.stack:
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> WebStack:
        self._thread.start()
        assert self._ready.wait(TIMEOUT * 3), "the stack did not start"
        if self._failure is not None:
            raise self._failure
        return self.stack

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(TIMEOUT * 3)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebStack]:
    with StackThread(tmp_path_factory.mktemp("web-schema")) as stack:
        yield stack


def test_every_route_answers_as_its_schema_says(served: WebStack) -> None:
    schema = schemathesis.openapi.from_url(f"{served.base}/openapi.json")
    schema = schema.exclude(path_regex=r".*/events$")
    headers = {"Authorization": f"Bearer {served.token}"}
    checked = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
        def answers_as_documented(case: Any) -> None:
            case.call_and_validate(headers=headers, timeout=TIMEOUT)

        answers_as_documented()
        checked += 1
    assert checked == 13  # the message delete route included
