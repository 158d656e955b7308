"""Telegram on a linked thread (issue 29): another endpoint's messages are posted in the
chat with their label, split at Telegram's limit, edited in place and deleted through
the platform id map; an edit made in Telegram reaches the other endpoint as an edit;
flood control and refusals become delivery statuses. Real core and nats-server, the
fake Bot API; the other endpoint is an SDK client of namespace `stdin` (the terminal).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ore_core import UserMessageEvent
from ore_core.artifacts import Attachment
from ore_core.conduit import ConduitClient, ControlClient, Relayed, SettingsCache, classify
from ore_core.events import DeliveryEvent, EventContext

if TYPE_CHECKING:
    from tests.conftest import Harness

CHAT = 2001
THREAD = "bridge-room"
TIMEOUT = 10.0


@dataclass
class Terminal:
    """The other endpoint: an SDK client of namespace `stdin` and what it shows."""

    client: ConduitClient
    thread: str
    shown: list[Relayed] = field(default_factory=list)
    statuses: list[DeliveryEvent] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def says(
        self, text: str, id: str, attachments: tuple[Attachment, ...] = (), **metadata: str
    ) -> None:
        event = UserMessageEvent(
            id=id,
            content=text,
            attachments=attachments,
            metadata=metadata,
            context=EventContext(provenance="stdin", user_name="cy"),
        )
        await self.client.send(self.thread, event)

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(TIMEOUT), self.changed:
            await self.changed.wait_for(predicate)

    def lines(self) -> list[str]:
        return [r.shown for r in self.shown if r.action == "relayed"]

    async def turn_of(self, text: str) -> str:
        """The id of the user turn whose text is `text`."""
        for turn in await self.client.turns(self.thread):
            if any(getattr(a, "content", None) == text for a in turn.artifacts):
                return turn.id
        raise AssertionError(f"no turn says {text!r}")


@asynccontextmanager
async def linked_chat(
    tg: Harness, answer: str = "none", greet: bool = True, **settings: object
) -> AsyncIterator[Terminal]:
    """A terminal thread linked to the private chat CHAT, which has written once
    (`hello`) unless not `greet`; the terminal's view of it."""
    await tg.start(**settings)
    client = tg.core.client_for("stdin")
    await client.create_thread(THREAD)
    endpoint = {"namespace": "telegram", "key": "telegram.thread", "value": f"{CHAT}:0:0"}
    await ControlClient.beside(client).call(
        "links.add", {"thread": THREAD, "endpoint": endpoint, "answer": answer}
    )
    terminal = Terminal(client, THREAD)
    cache = SettingsCache()
    cache.load(THREAD, (await client.get_thread(THREAD)).metadata)

    async def read() -> None:
        async with client.events(THREAD) as feed:
            async for delivery in feed:
                if delivery.kind == "properties":
                    cache.update(THREAD, delivery.event)  # type: ignore[arg-type]
                    continue
                relayed = classify(delivery, "stdin", cache.get(THREAD))
                if relayed.action in ("relayed", "edited"):
                    terminal.shown.append(relayed)
                if isinstance(delivery.event, DeliveryEvent):
                    terminal.statuses.append(delivery.event)
                async with terminal.changed:
                    terminal.changed.notify_all()

    reader = asyncio.create_task(read())
    try:
        if greet:
            await tg.fake.user_says(CHAT, "hello")
            await terminal.until(lambda: "user1001 (telegram): hello" in terminal.lines())
        yield terminal
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_a_terminal_message_is_posted_in_the_chat_with_its_label_once(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await terminal.says("hi from the desk", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): hi from the desk"])
        await terminal.says("and again", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): hi from the desk", "cy (stdin): and again"])


async def test_a_chat_linked_before_it_ever_wrote_is_shown_the_thread_from_the_start(
    tg: Harness,
) -> None:
    # The core shows the conduit its endpoint's key on the linked thread (`threads.get`).
    tg.fake.chat(CHAT, "private")  # the user started the bot, and has not written since
    async with linked_chat(tg, greet=False) as terminal:
        await terminal.says("first words", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): first words"])


async def test_the_chat_s_own_message_is_never_echoed_into_it(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await tg.fake.user_says(CHAT, "mine")
        await terminal.until(lambda: "user1001 (telegram): mine" in terminal.lines())
        await terminal.says("theirs", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): theirs"])  # neither `hello` nor `mine`


async def test_a_copy_longer_than_telegram_s_limit_is_split_and_reported_whole(
    tg: Harness,
) -> None:
    async with linked_chat(tg) as terminal:
        text = "\n".join(f"line {n} " + "x" * 90 for n in range(90))  # about 9,000 characters
        await terminal.says(text, id="s-long")
        await tg.until(lambda: len(tg.fake.bot_texts(CHAT)) == 3)
        parts = tg.fake.bot_texts(CHAT)
        assert all(len(part) <= 4096 for part in parts)
        assert "\n".join(parts) == f"cy (stdin): {text}"
        await terminal.client.delete(THREAD, await terminal.turn_of(text), id="s-del")
        await tg.shows(CHAT, [])  # every part was reported: the delete finds them all


async def test_an_edit_on_the_terminal_edits_the_copy_in_place(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await terminal.says("helo", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): helo"])
        (copy,) = tg.fake.bot_messages(CHAT)
        await terminal.says("hello", id="s-1-edit", edit_of=await terminal.turn_of("helo"))
        await tg.shows(CHAT, ["cy (stdin): hello"])
        assert tg.fake.bot_messages(CHAT) == [copy]
        assert copy.edits == 1


async def test_an_edit_of_a_long_copy_drops_the_parts_it_no_longer_needs(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        text = "\n".join("y" * 99 for _ in range(60))
        await terminal.says(text, id="s-1")
        await tg.until(lambda: len(tg.fake.bot_texts(CHAT)) == 2)
        first = tg.fake.bot_messages(CHAT)[0]
        await terminal.says("short now", id="s-1-edit", edit_of=await terminal.turn_of(text))
        await tg.shows(CHAT, ["cy (stdin): short now"])
        assert tg.fake.bot_messages(CHAT) == [first]


async def test_a_delete_on_the_terminal_deletes_the_copy(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await terminal.says("oops", id="s-1")
        await terminal.says("kept", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): oops", "cy (stdin): kept"])
        await terminal.client.delete(THREAD, await terminal.turn_of("oops"), id="s-1-del")
        await tg.shows(CHAT, ["cy (stdin): kept"])


async def test_an_edit_in_telegram_reaches_the_terminal_as_an_edit_of_the_message(
    tg: Harness,
) -> None:
    async with linked_chat(tg) as terminal:
        message = await tg.fake.user_says(CHAT, "typo hre")
        await terminal.until(lambda: "user1001 (telegram): typo hre" in terminal.lines())
        replaced = await terminal.turn_of("typo hre")
        await tg.fake.user_edits(message, "typo here")
        await terminal.until(lambda: any(r.action == "edited" for r in terminal.shown))
        (edit,) = [r for r in terminal.shown if r.action == "edited"]
        assert (edit.edit_of, edit.shown) == (replaced, "user1001 (telegram): typo here")


async def test_a_copy_waits_through_flood_control_reported_retrying_then_delivered(
    tg: Harness,
) -> None:
    async with linked_chat(tg) as terminal:
        tg.fake.fail_next(
            "sendMessage", status=429, description="Too Many Requests", retry_after=1, times=2
        )
        await terminal.says("patience", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): patience"])
        await terminal.until(lambda: bool(terminal.statuses))
        assert [s.status for s in terminal.statuses] == ["retrying"]
        await terminal.client.delete(THREAD, await terminal.turn_of("patience"), id="s-del")
        await tg.shows(CHAT, [])  # reported delivered: the delete finds it


async def test_a_copy_still_flood_controlled_at_the_deadline_is_reported_failed(
    tg: Harness,
) -> None:
    async with linked_chat(tg, relay_deadline=0) as terminal:
        tg.fake.fail_next("sendMessage", status=429, description="Too Many Requests", retry_after=1)
        await terminal.says("too late", id="s-1")
        await terminal.says("next one", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): next one"])
        await terminal.until(lambda: any(s.status == "failed" for s in terminal.statuses))
        (failed,) = [s for s in terminal.statuses if s.status == "failed"]
        assert (failed.turn, failed.endpoint) == (await terminal.turn_of("too late"), "telegram")


async def test_a_refused_copy_is_reported_failed_and_the_next_goes_on(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        tg.fake.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked")
        await terminal.says("refused", id="s-1")
        await terminal.says("fine", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): fine"])
        await terminal.until(lambda: bool(terminal.statuses))
        (failed,) = terminal.statuses
        assert failed.status == "failed"
        assert "bot was blocked" in (failed.detail or "")


async def test_a_copy_reported_before_a_restart_is_not_posted_again(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await terminal.says("once", id="s-1")
        await tg.shows(CHAT, ["cy (stdin): once"])
        await tg.stop()
        rewind = json.dumps({"name": "telegram", "sequence": 0}).encode()
        await terminal.client.nc.request("ore.api.telegram.cursors.set", rewind, timeout=TIMEOUT)
        await tg.start()  # its feed delivers every batch again, the copy's too
        await terminal.says("twice?", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): once", "cy (stdin): twice?"])


async def test_an_edit_and_a_delete_after_a_restart_still_find_their_copies(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await terminal.says("first", id="s-1")
        await terminal.says("second", id="s-2")
        await tg.shows(CHAT, ["cy (stdin): first", "cy (stdin): second"])
        await tg.stop()
        await tg.start()
        await terminal.says("1st", id="s-1-edit", edit_of=await terminal.turn_of("first"))
        await terminal.client.delete(THREAD, await terminal.turn_of("second"), id="s-2-del")
        await tg.shows(CHAT, ["cy (stdin): 1st"])


async def test_with_answer_all_the_terminal_s_answers_show_in_the_chat(tg: Harness) -> None:
    async with linked_chat(tg, answer="all") as terminal:
        await tg.until(lambda: "echo: hello" in tg.fake.bot_texts(CHAT))
        await terminal.says("question", id="s-1")
        await tg.shows(CHAT, ["echo: hello", "cy (stdin): question", "echo: question"])


async def test_with_answer_origin_only_the_chat_s_own_answers_show_in_it(tg: Harness) -> None:
    async with linked_chat(tg, answer="origin") as terminal:
        await tg.until(lambda: "echo: hello" in tg.fake.bot_texts(CHAT))
        await terminal.says("question", id="s-1")
        await tg.fake.user_says(CHAT, "mine")
        await tg.shows(CHAT, ["echo: hello", "cy (stdin): question", "echo: mine"])


async def test_retry_as_a_reply_to_a_relayed_answer_answers_its_question_again(
    tg: Harness,
) -> None:
    async with linked_chat(tg, answer="all") as terminal:
        await tg.until(lambda: "echo: hello" in tg.fake.bot_texts(CHAT))
        await terminal.says("question", id="s-1")
        await tg.shows(CHAT, ["echo: hello", "cy (stdin): question", "echo: question"])
        copy = tg.fake.bot_messages(CHAT)[-1]
        await tg.fake.user_says(CHAT, "/retry", reply_to=copy)
        await tg.shows(
            CHAT, ["echo: hello", "cy (stdin): question", "echo: question", "echo: question"]
        )
        questions = [t for t in await terminal.client.turns(THREAD) if t.role == "user"]
        assert [t.id for t in questions] == [
            await terminal.turn_of("hello"),
            await terminal.turn_of("question"),
        ]  # no second user turn


async def test_a_terminal_image_is_posted_as_a_photo_after_its_text_byte_for_byte(
    tg: Harness,
) -> None:
    async with linked_chat(tg) as terminal:
        png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
        image = await terminal.client.upload(png, "shot.png")
        await terminal.says("look", id="s-img", attachments=(image,))
        await tg.until(lambda: len(tg.fake.bot_files(CHAT)) == 1)
        assert tg.fake.bot_texts(CHAT) == ["cy (stdin): look", ""]
        assert tg.fake.bot_files(CHAT) == [("shot.png", png)]
        assert [c.method for c in tg.fake.calls() if c.method.startswith("sendP")] == ["sendPhoto"]


async def test_a_terminal_pdf_is_posted_as_a_document_with_its_name(
    tg: Harness,
) -> None:
    async with linked_chat(tg) as terminal:
        pdf = b"%PDF-1.7 " + bytes(range(256)) * 4096
        document = await terminal.client.upload(pdf, "report.pdf")
        await terminal.says("the report", id="s-pdf", attachments=(document,))
        await tg.until(lambda: len(tg.fake.bot_files(CHAT)) == 1)
        assert tg.fake.bot_files(CHAT) == [("report.pdf", pdf)]
        assert tg.fake.calls("sendPhoto") == []


async def test_a_telegram_file_reaches_the_other_endpoint_as_an_attachment(tg: Harness) -> None:
    async with linked_chat(tg) as terminal:
        await tg.fake.user_sends_file(
            CHAT, b"%PDF tiny", "a file", file_name="t.pdf", mime_type="application/pdf"
        )
        await terminal.until(lambda: "user1001 (telegram): a file" in terminal.lines())
        (relayed,) = [r for r in terminal.shown if r.text == "a file"]
        (attachment,) = relayed.attachments
        assert attachment.name == "t.pdf"
        async with await ConduitClient.connect(tg.core.nats_url, name="stdin") as reader:
            assert await reader.fetch(THREAD, attachment) == b"%PDF tiny"
