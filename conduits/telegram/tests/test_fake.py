"""The fake Bot API itself: what tests of the conduit (and others) rely on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from ore_conduit_telegram.testing import FakeTelegram

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    fake = await FakeTelegram().start()
    try:
        yield fake
    finally:
        await fake.close()


async def call(fake: FakeTelegram, method: str, token: str = "", **params: Any) -> Any:
    url = f"{fake.api_url}/bot{token or fake.token}/{method}"
    async with aiohttp.ClientSession() as session, session.post(url, json=params) as response:
        body = await response.json()
        assert body["ok"] == (response.status == 200)
        return body


async def test_a_long_poll_returns_a_message_written_while_it_waits(fake: FakeTelegram) -> None:
    poll = asyncio.create_task(call(fake, "getUpdates", timeout=10))
    await fake.wait_until(lambda: fake.polls == 1)
    await fake.user_says(1001, "hi")
    (update,) = (await poll)["result"]
    assert update["message"]["text"] == "hi"
    assert (await call(fake, "getUpdates", offset=update["update_id"]))["result"] == [update]
    assert (await call(fake, "getUpdates", offset=update["update_id"] + 1))["result"] == []
    assert fake.confirmed == update["update_id"]


async def test_a_second_poll_ends_the_first_with_409(fake: FakeTelegram) -> None:
    first = asyncio.create_task(call(fake, "getUpdates", timeout=10))
    await fake.wait_until(lambda: fake.polls == 1)
    second = asyncio.create_task(call(fake, "getUpdates", timeout=10))
    assert (await first)["error_code"] == 409
    await fake.user_says(1001, "for the second")
    assert len((await second)["result"]) == 1


async def test_telegrams_refusals_are_modelled(fake: FakeTelegram) -> None:
    fake.chat(-100, "supergroup", forum=True)
    fake.chat(1001)
    general = await call(fake, "sendMessage", chat_id=-100, text="x", message_thread_id=1)
    assert general["description"] == "Bad Request: message thread not found"
    html = await call(fake, "sendMessage", chat_id=1001, text="<b>open", parse_mode="HTML")
    assert html["description"].startswith("Bad Request: can't parse entities")
    sent = (await call(fake, "sendMessage", chat_id=1001, text="same"))["result"]
    again = await call(
        fake, "editMessageText", chat_id=1001, message_id=sent["message_id"], text="same"
    )
    assert again["description"].startswith("Bad Request: message is not modified")
    long = await call(fake, "sendMessage", chat_id=1001, text="x" * 4097)
    assert long["description"] == "Bad Request: message is too long"
    draft = await call(fake, "sendMessageDraft", chat_id=-100, draft_id=1, text="d")
    assert draft["error_code"] == 400
    assert (await call(fake, "getMe", token="1:wrong"))["error_code"] == 401


async def test_scripted_faults(fake: FakeTelegram) -> None:
    fake.chat(1001)
    fake.fail_next(
        "sendMessage", status=429, description="Too Many Requests: retry after 3", retry_after=3
    )
    throttled = await call(fake, "sendMessage", chat_id=1001, text="a")
    assert (throttled["error_code"], throttled["parameters"]) == (429, {"retry_after": 3})
    fake.fail_next("sendMessage", status=502)
    url = f"{fake.api_url}/bot{fake.token}/sendMessage"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"chat_id": 1001, "text": "b"}) as response:
            assert response.status == 502
        fake.drop_next("sendMessage", commit=True)
        with pytest.raises(aiohttp.ClientError):
            async with session.post(url, json={"chat_id": 1001, "text": "c"}) as response:
                await response.read()
    assert fake.bot_texts(1001) == ["c"]  # carried out, the answer lost


async def test_flood_windows_answer_429_with_retry_after(fake: FakeTelegram) -> None:
    fake.chat(-5, "group")
    fake.rate_limit(per_group=(2, 60.0), retry_after=7)
    results = [await call(fake, "sendMessage", chat_id=-5, text=str(i)) for i in range(3)]
    assert [r["ok"] for r in results] == [True, True, False]
    assert results[2]["parameters"]["retry_after"] == 7


async def test_a_file_is_fetched_with_get_file_and_the_token_in_its_url(fake: FakeTelegram) -> None:
    message = await fake.user_sends_file(1001, b"\x89PNG data", "look")
    info = (await call(fake, "getFile", file_id=message.file_id))["result"]
    url = f"{fake.api_url}/file/bot{fake.token}/{info['file_path']}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert await response.read() == b"\x89PNG data"


async def test_a_photo_comes_in_sizes_each_downloadable(fake: FakeTelegram) -> None:
    message = await fake.user_sends_photo(1001, [b"small", b"larger one"], "look")
    sizes = message.to_json()["photo"]
    assert [size["file_size"] for size in sizes] == [5, 10]
    info = (await call(fake, "getFile", file_id=sizes[1]["file_id"]))["result"]
    url = f"{fake.api_url}/file/bot{fake.token}/{info['file_path']}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert await response.read() == b"larger one"
    assert fake.downloads == [sizes[1]["file_id"]]


async def test_the_file_download_takes_scripted_faults(fake: FakeTelegram) -> None:
    message = await fake.user_sends_file(1001, b"data", file_name="a.txt", mime_type="text/plain")
    info = (await call(fake, "getFile", file_id=message.file_id))["result"]
    url = f"{fake.api_url}/file/bot{fake.token}/{info['file_path']}"
    fake.fail_next("file", status=502)
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            assert response.status == 502
        async with session.get(url) as response:
            assert await response.read() == b"data"
    assert fake.downloads == [message.file_id]
