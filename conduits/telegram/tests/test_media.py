"""Media: a Telegram message's file is fetched, stored in ore's files bucket and sent as
an attachment (the caption is the text), which reaches the model through the real core;
a file that is refused, too large or fails to download is one notice in the chat, the
caption still goes and the conduit keeps running; the bot token reaches neither the
model nor the conduit's log."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import TYPE_CHECKING, Any

from structlog.testing import capture_logs

from ore_core import Role
from ore_core.artifacts import Attachment
from ore_core.files import FilePolicy

if TYPE_CHECKING:
    from ore_openai.testing import MockOpenAIServer
    from tests.conftest import Harness

DM = 1001
SMALL = b"\xff\xd8\xff small jpeg" + b"s" * 100
LARGE = b"\xff\xd8\xff large jpeg" + b"l" * 5000
PDF = b"%PDF-1.7 " + bytes(range(256)) * 64


def jpeg(data: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


def last_user_content(model: MockOpenAIServer) -> Any:
    return model.requests[-1]["messages"][-1]["content"]


async def attachments(harness: Harness) -> list[Attachment]:
    """The files of every user turn the core stores, in order."""
    return [
        artifact
        for thread in await harness.threads()
        for turn in thread.turns()
        if turn.role == Role.USER
        for artifact in turn.artifacts
        if isinstance(artifact, Attachment)
    ]


def policy(harness: Harness, **rules: Any) -> None:
    """The operator's `[files]` rules, as `ore conduit` gives them to the conduit."""
    assert harness.conduit is not None
    assert harness.conduit.client is not None
    harness.conduit.client.files.policy = FilePolicy(**rules)


async def test_a_photo_reaches_the_model_as_an_image_with_its_caption(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    message = await tg_model.fake.user_sends_photo(DM, [SMALL, LARGE], "what is this?")
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": jpeg(LARGE)}},
    ]
    assert tg_model.fake.downloads == [message.media["photo"][1]["file_id"]]


async def test_a_photo_is_sent_as_an_attachment_not_inside_the_message(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_photo(DM, [SMALL, LARGE], "what is this?")
    await tg_model.shows(DM, ["seen"])
    (photo,) = await attachments(tg_model)
    assert (photo.name, photo.media_type, photo.size) == ("photo.jpg", "image/jpeg", len(LARGE))
    assert photo.sha256 == hashlib.sha256(LARGE).hexdigest()
    assert "data:" not in repr(await tg_model.threads())


async def test_a_photo_without_a_caption_reaches_the_model_as_an_image(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_photo(DM, [SMALL])
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == [{"type": "image_url", "image_url": {"url": jpeg(SMALL)}}]


async def test_a_document_is_stored_byte_for_byte_with_its_name_and_type(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(
        DM, PDF, "what is in it?", file_name="a.pdf", mime_type="application/pdf"
    )
    await tg_model.shows(DM, ["seen"])
    (document,) = await attachments(tg_model)
    assert (document.name, document.media_type) == ("a.pdf", "application/pdf")
    assert document.sha256 == hashlib.sha256(PDF).hexdigest()
    assert tg_model.conduit is not None
    assert tg_model.conduit.client is not None
    thread_id = (await tg_model.threads())[0].id
    assert await tg_model.conduit.client.fetch(thread_id, document) == PDF


async def test_a_text_document_reaches_the_model_as_text(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(
        DM, b"# Plan\nship it", "summarise", file_name="plan.md", mime_type="text/markdown"
    )
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model) == "summarise\n\nFile plan.md:\n```\n# Plan\nship it\n```"


async def test_a_voice_message_is_an_attachment_when_the_operator_allows_audio(
    tg: Harness,
) -> None:
    await tg.start()
    policy(tg, allowed_types=("audio/*",))
    await tg.fake.user_sends_media(DM, "voice", b"OggS voice")
    await tg.until(lambda: len(tg.fake.bot_texts(DM)) == 1)
    (voice,) = await attachments(tg)
    assert (voice.name, voice.media_type, voice.size) == ("voice.ogg", "audio/ogg", 10)


async def test_a_sticker_gets_a_notice_and_nothing_reaches_the_model(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_media(DM, "sticker")
    await tg_model.shows(DM, ["I cannot read a sticker."])
    await tg_model.fake.user_says(DM, "hello")
    await tg_model.shows(DM, ["I cannot read a sticker.", "seen"])
    assert [request["messages"][-1]["content"] for request in model.requests] == ["hello"]


async def test_a_file_over_the_operators_max_size_gets_a_notice_and_is_not_downloaded(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    policy(tg_model, max_size=1000)
    await tg_model.fake.user_sends_file(
        DM, PDF, "read it", file_name="a.pdf", mime_type="application/pdf"
    )
    await tg_model.shows(
        DM,
        [
            "a.pdf is 16.4 kB, over the 1.0 kB limit for files (files.max_size); "
            "the message went without it.",
            "seen",
        ],
    )
    assert last_user_content(model) == "read it"
    assert tg_model.fake.calls("getFile") == []


async def test_the_largest_photo_size_within_max_size_is_the_one_taken(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    policy(tg_model, max_size=1000)
    message = await tg_model.fake.user_sends_photo(DM, [SMALL, LARGE], "which one?")
    await tg_model.shows(DM, ["seen"])
    assert last_user_content(model)[1] == {"type": "image_url", "image_url": {"url": jpeg(SMALL)}}
    assert tg_model.fake.downloads == [message.media["photo"][0]["file_id"]]


async def test_a_file_of_a_type_the_operator_forbids_gets_a_notice(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    await tg_model.fake.user_sends_file(
        DM, b"PK zip", "unpack it", file_name="a.zip", mime_type="application/zip"
    )
    await tg_model.shows(
        DM,
        [
            "a.zip: files of type application/zip are not allowed here (files.allowed_types: "
            "image/*, text/*, application/pdf, application/json); the message went without it.",
            "seen",
        ],
    )
    assert last_user_content(model) == "unpack it"
    assert tg_model.fake.calls("getFile") == []


async def test_a_file_over_telegrams_download_limit_gets_a_notice(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    big = b"%PDF" + bytes(21 * 1024 * 1024)
    await tg_model.fake.user_sends_file(
        DM, big, "too big?", file_name="big.pdf", mime_type="application/pdf"
    )
    await tg_model.shows(
        DM,
        [
            "big.pdf is 22.0 MB, over the 20 MB Telegram lets a bot download; "
            "the message went without it.",
            "seen",
        ],
    )
    assert last_user_content(model) == "too big?"
    assert tg_model.fake.downloads == []


async def test_a_download_cut_midway_gets_a_notice_and_the_conduit_keeps_going(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    tg_model.fake.cut_next("file")
    await tg_model.fake.user_sends_file(
        DM, PDF, "can you see it?", file_name="a.pdf", mime_type="application/pdf"
    )
    notice = (
        "I could not download a.pdf from Telegram (send it again); the message went without it."
    )
    await tg_model.shows(DM, [notice, "seen"])
    assert last_user_content(model) == "can you see it?"
    await tg_model.fake.user_sends_photo(DM, [SMALL], "and now?")
    await tg_model.shows(DM, [notice, "seen", "seen"])
    assert [a.size for a in await attachments(tg_model)] == [len(SMALL)]


async def test_a_file_url_refusing_the_token_gets_a_notice_and_the_caption_goes(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    await tg_model.start()
    tg_model.fake.fail_next("file", status=401, description="Unauthorized")
    await tg_model.fake.user_sends_photo(DM, [SMALL], "can you see it?")
    await tg_model.shows(
        DM,
        [
            "I could not download photo.jpg from Telegram (send it again); "
            "the message went without it.",
            "seen",
        ],
    )
    assert last_user_content(model) == "can you see it?"


async def test_the_bot_token_reaches_neither_the_model_nor_the_conduits_log(
    tg_model: Harness, model: MockOpenAIServer
) -> None:
    notice = (
        "I could not download photo.jpg from Telegram (send it again); the message went without it."
    )
    with capture_logs() as logs:
        await tg_model.start()
        # A redirect loop: aiohttp's error names the file URL, token and all.
        tg_model.fake.fail_next("file", status=302, times=11)
        await tg_model.fake.user_sends_photo(DM, [SMALL], "first")
        await tg_model.shows(DM, [notice, "seen"])
        await tg_model.fake.user_sends_photo(DM, [LARGE], "second")
        await tg_model.shows(DM, [notice, "seen", "seen"])
    failures = [e for e in logs if e["event"] == "a telegram file was not downloaded"]
    assert len(failures) == 1
    assert "/file/bot<token>/photos/" in failures[0]["error"]
    token = tg_model.fake.token
    assert token not in repr(logs)
    assert token.split(":")[1] not in repr(model.requests)
    assert jpeg(LARGE) in repr(model.requests)


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
    assert len(tg_model.fake.downloads) == 1
