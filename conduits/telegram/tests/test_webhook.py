"""Webhook mode: updates POSTed by Telegram, the secret token checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
import pytest

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

DM = 1001
SECRET = "s3cret-token_1"


async def start_webhook(tg: Harness) -> None:
    await tg.start(mode="webhook", webhook_secret=SECRET, listen_port=0)
    await tg.until(lambda: tg.fake.webhook_url == tg.webhook)


async def test_updates_posted_to_the_webhook_are_answered(tg: Harness) -> None:
    await start_webhook(tg)
    await tg.fake.user_says(DM, "over the hook")
    await tg.shows(DM, ["echo: over the hook"])
    assert tg.fake.webhook_secret == SECRET
    assert tg.fake.polls == 0
    await tg.until(lambda: tg.fake.pending_updates() == [])  # answered 200: confirmed


@pytest.mark.parametrize("secret", ["wrong-secret", None], ids=["wrong", "missing"])
async def test_a_post_without_the_right_secret_is_refused_and_nothing_is_taken(
    tg: Harness, secret: str | None
) -> None:
    await start_webhook(tg)
    update = {
        "update_id": 9,
        "message": {
            "message_id": 1,
            "date": 0,
            "chat": {"id": DM, "type": "private"},
            "from": {"id": DM, "is_bot": False, "first_name": "Mallory"},
            "text": "forged",
        },
    }
    assert await tg.fake.post_update(tg.webhook, update, secret) == 401
    await tg.fake.user_says(DM, "genuine")
    await tg.shows(DM, ["echo: genuine"])
    assert await tg.user_texts() == [["genuine"]]


async def test_a_body_that_is_not_an_update_is_refused(tg: Harness) -> None:
    await start_webhook(tg)
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with aiohttp.ClientSession() as session:
        for body in (b"{not json", b"[1, 2]", b'{"message": {}}'):
            async with session.post(tg.webhook, data=body, headers=headers) as response:
                assert response.status == 400


async def test_an_update_is_answered_200_only_once_the_core_has_it(tg: Harness) -> None:
    await start_webhook(tg)
    await tg.core.service.stop(grace=0)
    await tg.fake.user_says(DM, "wait for the core")
    await tg.until(lambda: tg.fake.pushes >= 1)  # posted to the conduit, which holds it
    assert len(tg.fake.pending_updates()) == 1  # not confirmed while the core is away
    await tg.restart_core()
    await tg.shows(DM, ["echo: wait for the core"])
    await tg.until(lambda: tg.fake.pending_updates() == [])
