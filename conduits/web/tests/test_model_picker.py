"""Which model answers, and the picker (issue 44 item 4): the API and the page, against a
core whose processor is the openai plugin's, talking to its mock model server (which
records the model each request asks for)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, expect

from ore_conduit_web.testing import TIMEOUT, WebStack
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]
expect.set_options(timeout=TIMEOUT * 1000)

OFFERED = ("big-2", "small-1")
CONFIGURED = "big-2"


@pytest.fixture(scope="module")
def model_server() -> Iterator[MockOpenAIServer]:
    """Offers two models; answers every question with the model it was asked for."""

    def reply(body: dict[str, Any]) -> MockResponse:
        return MockResponse(text=f"answered by {body['model']}")

    with MockOpenAIServer(models=OFFERED, responder=reply) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, model_server: MockOpenAIServer
) -> AsyncIterator[WebStack]:
    config = OpenAIConfig(base_url=model_server.base_url, model=CONFIGURED, max_retries=0)
    async with OpenAIProcessor(config) as processor:
        directory = tmp_path_factory.mktemp("web-models")
        async with WebStack(directory, processor=processor, processor_name="openai") as running:
            yield running


@pytest_asyncio.fixture(loop_scope="module")
async def http(stack: WebStack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers, timeout=TIMEOUT) as client:
        yield client


async def new_thread(http: httpx.AsyncClient) -> str:
    made = await http.post("/api/threads", json={})
    thread_id: str = made.json()["id"]
    return thread_id


async def test_the_api_names_the_processor_its_model_and_the_models_offered(
    http: httpx.AsyncClient,
) -> None:
    reply = await http.get("/api/models")
    assert reply.status_code == 200
    assert reply.json() == {
        "processor": "openai",
        "model": CONFIGURED,
        "models": list(OFFERED),
        "error": None,
    }


async def test_a_chosen_model_is_the_thread_s_model(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    chosen = await http.put(f"/api/threads/{thread_id}/model", json={"model": "small-1"})
    assert chosen.json() == {"model": "small-1"}
    assert (await http.get(f"/api/threads/{thread_id}")).json()["model"] == "small-1"


async def test_an_empty_choice_goes_back_to_the_configured_model(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await http.put(f"/api/threads/{thread_id}/model", json={"model": "small-1"})
    await http.put(f"/api/threads/{thread_id}/model", json={"model": ""})
    assert (await http.get(f"/api/threads/{thread_id}")).json()["model"] == ""


async def test_a_model_that_is_not_offered_is_refused_with_the_offered_ones(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    refused = await http.put(f"/api/threads/{thread_id}/model", json={"model": "huge-3"})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "model 'huge-3' is not offered (offered: big-2, small-1)"
    )
    assert (await http.get(f"/api/threads/{thread_id}")).json()["model"] == ""


@pytest_asyncio.fixture(loop_scope="module")
async def page(stack: WebStack, context: BrowserContext) -> Page:
    """A signed-in page with one answered thread open (answered by the configured model)."""
    opened = await context.new_page()
    await opened.goto(stack.url)
    box = opened.get_by_label("Message", exact=True)
    await box.fill("first question")
    await box.press("Enter")
    await expect(opened.locator("article.assistant .body")).to_have_text(
        [f"answered by {CONFIGURED}"]
    )
    return opened


async def test_the_header_picker_shows_the_model_answering_the_thread(page: Page) -> None:
    picker = page.get_by_label("Model", exact=True)
    await expect(picker).to_have_value(CONFIGURED)
    await expect(picker.locator("option")).to_have_text(list(OFFERED))


async def test_a_picked_model_answers_the_next_message(
    page: Page, model_server: MockOpenAIServer
) -> None:
    await page.get_by_label("Model", exact=True).select_option("small-1")
    await expect(page.get_by_label("Model", exact=True)).to_have_value("small-1")
    box = page.get_by_label("Message", exact=True)
    await box.fill("second question")
    await box.press("Enter")
    answers = page.locator("article.assistant .body")
    await expect(answers).to_have_text([f"answered by {CONFIGURED}", "answered by small-1"])
    asked = [body["model"] for body in model_server.requests]
    assert asked[-1] == "small-1"
