"""Media: photos and files reach the model (the OpenAI mock, through the real core) as
images or text, or the chat gets a notice; the bot token reaches neither the model nor
the conduit's log."""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any

from structlog.testing import capture_logs

if TYPE_CHECKING:
    from ore_openai.testing import MockOpenAIServer
    from tests.conftest import Harness

DM = 1001
SMALL = b"\xff\xd8\xff small jpeg" + b"s" * 100
MIDDLE = b"\xff\xd8\xff middle jpeg" + b"m" * 800
LARGE = b"\xff\xd8\xff large jpeg" + b"l" * 5000


def jpeg(data: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


def last_user_content(model: MockOpenAIServer) -> Any:
    return model.requests[-1]["messages"][-1]["content"]


async def test_a_photo_reaches_the_model_as_an_image_with_its_caption(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_photo(DM, [SMALL, LARGE], "what is this?")
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": jpeg(LARGE)}},
    ]


async def test_a_photo_without_a_caption_reaches_the_model_as_an_image(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_photo(DM, [SMALL])
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == [{"type": "image_url", "image_url": {"url": jpeg(SMALL)}}]


async def test_the_largest_size_of_a_photo_under_the_cap_is_the_one_downloaded(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start(max_image_bytes=1000)
    message = await tg_model.fake.user_sends_photo(DM, [SMALL, MIDDLE, LARGE], "which one?")
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model)[1] == {"type": "image_url", "image_url": {"url": jpeg(MIDDLE)}}
    assert tg_model.fake.downloads == [message.media["photo"][1]["file_id"]]


async def test_a_photo_with_no_size_under_the_cap_gets_a_notice_and_its_caption_an_answer(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start(max_image_bytes=50)
    await tg_model.fake.user_sends_photo(DM, [SMALL, LARGE], "what is this?")
    await tg_model.shows(DM, ["I did not read the photo: it is larger than 50 bytes.", "seen"])
    assert last_user_content(model) == "what is this?"
    assert tg_model.fake.downloads == []


async def test_an_image_document_reaches_the_model_as_an_image(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    png = b"\x89PNG\r\n\x1a\n picture"
    await tg_model.fake.user_sends_file(
        DM, png, "and this?", file_name="a.png", mime_type="image/png"
    )
    await tg_model.shows(DM, ["seen"])
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert last_user_content(model)[1] == {"type": "image_url", "image_url": {"url": url}}


async def test_a_text_document_reaches_the_model_as_text_after_the_caption(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(
        DM, "# Plan\nship it ☃".encode(), "summarise", file_name="plan.md"
    )
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == "summarise\n\nplan.md:\n# Plan\nship it ☃"


async def test_a_document_it_cannot_read_gets_a_notice_and_its_caption_an_answer(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(
        DM, b"%PDF-1.7", "what is in it?", file_name="a.pdf", mime_type="application/pdf"
    )
    await tg_model.shows(
        DM, ["I cannot read a.pdf (application/pdf): I read images and text files.", "seen"]
    )
    assert last_user_content(model) == "what is in it?"
    assert tg_model.fake.calls("getFile") == []


async def test_a_sticker_gets_a_notice_and_nothing_reaches_the_model(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_media(DM, "sticker")
    await tg_model.shows(DM, ["I cannot read a sticker."])
    await tg_model.fake.user_says(DM, "hello")
    await tg_model.shows(DM, ["I cannot read a sticker.", "seen"])
    assert [request["messages"][-1]["content"] for request in model.requests] == ["hello"]


async def test_a_voice_message_gets_a_notice(tg_model: Harness) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_media(DM, "voice")
    await tg_model.shows(DM, ["I cannot read a voice message."])


async def test_a_failed_download_gives_a_notice_and_the_caption_still_reaches_the_model(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    tg_model.fake.fail_next("file", status=502, description="Bad Gateway")
    await tg_model.fake.user_sends_photo(DM, [SMALL], "can you see it?")
    await tg_model.shows(
        DM, ["I could not download the photo from Telegram; send it again.", "seen"]
    )
    assert last_user_content(model) == "can you see it?"


async def test_the_bot_token_reaches_neither_the_model_nor_the_conduits_log(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    with capture_logs() as logs:
        await tg_model.start()
        # A redirect loop: aiohttp's error names the file URL, token and all.
        tg_model.fake.fail_next("file", status=302, times=11)
        await tg_model.fake.user_sends_photo(DM, [SMALL], "first")
        await tg_model.shows(
            DM, ["I could not download the photo from Telegram; send it again.", "seen"]
        )
        await tg_model.fake.user_sends_photo(DM, [LARGE], "second")
        await tg_model.shows(
            DM, ["I could not download the photo from Telegram; send it again.", "seen", "seen"]
        )
    failures = [e for e in logs if e["event"] == "a telegram file was not downloaded"]
    assert len(failures) == 1
    assert "/file/bot<token>/photos/" in failures[0]["error"]
    token = tg_model.fake.token
    assert token not in repr(logs)
    assert token.split(":")[1] not in repr(model.requests)
    assert jpeg(LARGE) in repr(model.requests)


async def test_a_photo_as_large_as_the_default_cap_fits_the_cores_ingress_limit(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    largest = b"\xff\xd8\xff" + bytes(range(256)) * (700 * 4) + b"\xff\xd9"
    largest = largest[: 700 * 1024]  # max_image_bytes' default, exactly
    await tg_model.fake.user_sends_photo(DM, [SMALL, largest], "big")
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model)[1] == {"type": "image_url", "image_url": {"url": jpeg(largest)}}


async def test_an_image_document_over_the_cap_gets_a_notice_and_is_not_downloaded(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start(max_image_bytes=1000)
    await tg_model.fake.user_sends_file(
        DM, LARGE, "and this?", file_name="b.png", mime_type="image/png"
    )
    await tg_model.shows(DM, ["I did not read b.png: it is larger than 1000 bytes.", "seen"])
    assert last_user_content(model) == "and this?"
    assert tg_model.fake.calls("getFile") == []


async def test_an_edited_caption_is_answered_again_with_its_photo(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    message = await tg_model.fake.user_sends_photo(DM, [SMALL], "what is this?")
    await tg_model.shows(DM, ["seen"])
    await tg_model.fake.user_edits(message, "what colour is it?")
    async with asyncio.timeout(10):
        await model.wait_for_requests(2)
    assert last_user_content(model) == [
        {"type": "text", "text": "what colour is it?"},
        {"type": "image_url", "image_url": {"url": jpeg(SMALL)}},
    ]


async def test_an_image_too_large_for_the_bus_gets_a_notice_and_its_caption_an_answer(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start(max_image_bytes=2 * 1024 * 1024)  # over what 1 MiB can carry
    await tg_model.fake.user_sends_photo(DM, [b"\xff\xd8\xff" + b"x" * (900 * 1024)], "huge")
    await tg_model.shows(
        DM,
        [
            "I did not read the image: it is too large for ore's message limit (lower "
            "max_image_bytes or raise nats.max_payload).",
            "seen",
        ],
    )
    assert last_user_content(model) == "huge"


async def test_a_text_document_over_its_cap_gets_a_notice_and_is_not_downloaded(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start(max_text_bytes=10)
    await tg_model.fake.user_sends_file(DM, b"a" * 11, "read it", file_name="long.txt")
    await tg_model.shows(DM, ["I did not read long.txt: it is larger than 10 bytes.", "seen"])
    assert last_user_content(model) == "read it"
    assert tg_model.fake.calls("getFile") == []


async def test_a_text_document_that_is_not_utf8_gets_a_notice(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(DM, b"\xff\xfe\x00bad", "read it", file_name="odd.txt")
    await tg_model.shows(DM, ["I did not read odd.txt: it is not UTF-8 text.", "seen"])
    assert last_user_content(model) == "read it"
