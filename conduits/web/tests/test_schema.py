"""Schemathesis over the OpenAPI schema: every route, the event stream included, against a
real server, with the response checks (status code, media type, body and headers as
documented, no server error).

The stack runs on an event loop of its own thread, so schemathesis's synchronous client
talks to it over loopback like any other program. Random thread ids only ever reach the
404 answer, so half of the cases run on a real thread made for the case (with one
question answered, whose turns stand in for `turn_id`): the success answers are checked
too.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from httpx_sse import connect_sse
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import checks
from schemathesis.config import SchemathesisConfig

from ore_conduit_web.testing import TIMEOUT, Events, WebStack, answered

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


CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]
ROUTES = 19  # every documented operation, `/api/threads/{id}/events`, the message
# delete route and the file routes (upload, serve) and reactions included


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebStack]:
    with StackThread(tmp_path_factory.mktemp("web-schema")) as stack:
        yield stack


class RealThreads:
    """Makes a thread with one answered question, for a case to run on."""

    def __init__(self, stack: WebStack) -> None:
        headers = {"Authorization": f"Bearer {stack.token}"}
        self.http = httpx.Client(base_url=stack.base, headers=headers, timeout=TIMEOUT)

    def answered(self) -> tuple[str, list[str]]:
        """A new thread's id and its turn ids (question first), once it is answered."""
        thread = self.http.post("/api/threads", json={}).raise_for_status().json()["id"]
        events, done = Events(), answered(1)
        with connect_sse(self.http, "GET", f"/api/threads/{thread}/events") as source:
            for sse in source.iter_sse():
                if not events.frames:  # subscribed: the answer cannot be missed now
                    self.http.post(f"/api/threads/{thread}/messages", json={"text": "E2E_REPLY:ok"})
                events.frames.append((sse.event, sse.id, json.loads(sse.data or "{}")))
                if done(events):
                    break
        tree = self.http.get(f"/api/threads/{thread}").raise_for_status().json()
        return thread, list(tree["path"])


def test_every_route_answers_as_its_schema_says(served: WebStack) -> None:
    config = SchemathesisConfig.from_dict({"max-stream-events": 2})
    schema = schemathesis.openapi.from_url(f"{served.base}/openapi.json", config=config)
    headers = {"Authorization": f"Bearer {served.token}"}
    real = RealThreads(served)
    checked = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(), on_real_thread=st.booleans())
        @settings(
            max_examples=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],  # a failure is shown as found, unshrunk
        )
        def answers_as_documented(case: Any, on_real_thread: bool) -> None:
            if on_real_thread and "thread_id" in (case.path_parameters or {}):
                thread, turns = real.answered()
                case.path_parameters["thread_id"] = thread
                if isinstance(case.body, dict) and "turn_id" in case.body:
                    case.body["turn_id"] = turns[0]
            case.call_and_validate(headers=headers, timeout=TIMEOUT, checks=CHECKS)

        answers_as_documented()
        checked += 1
    assert checked == ROUTES
