"""What the adapter does on the homeserver: posts keyed by transaction id, edits by
m.replace with HTML and a plain fallback, deletes by redaction, failures classified."""

from __future__ import annotations

import pytest

from ore_conduit_matrix.platform import ENCRYPTED_NOTICE
from ore_conduit_matrix.testing import BOT, FakeMatrix
from ore_core.conduit import Part, RateLimited, Refused, Sender, Transient, part_key

pytestmark = pytest.mark.asyncio


async def test_a_post_repeated_with_its_key_makes_one_message(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    key = part_key("turn-1", 0)
    first = await adapter.platform.post(room, Part("hello"), key)
    again = await adapter.platform.post(room, Part("hello"), key)
    assert first == again
    assert hs.bot_texts(room) == ["hello"]


async def test_a_post_whose_answer_was_lost_is_one_message_after_a_restart(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    first = await adapters(read=False)
    hs.drop_next("send", commit=True, times=2)  # made; aiohttp retries a PUT once
    with pytest.raises(Transient):
        await first.platform.post(room, Part("once"), part_key("turn-1", 0))
    await first.close()
    restarted = await adapters(read=False)  # the kept session: the same access token
    await restarted.platform.post(room, Part("once"), part_key("turn-1", 0))
    assert hs.bot_texts(room) == ["once"]
    assert [name for name, _ in hs.calls].count("login") == 1


async def test_a_post_repeated_after_a_restart_with_a_longer_text_shows_the_longer_text(
    hs: FakeMatrix, adapters
) -> None:
    # A crash after the first post of a streamed answer: the restart posts the whole
    # answer with the same transaction id, which names the event made then.
    room = await hs.create_room()
    first = await adapters(read=False)
    made = await first.platform.post(room, Part("the"), part_key("turn-1", 0))
    await first.close()
    restarted = await adapters(read=False)
    again = await restarted.platform.post(room, Part("the answer"), part_key("turn-1", 0))
    assert made == again
    assert hs.bot_texts(room) == ["the answer"]


async def test_a_repeat_killed_before_its_edit_is_edited_by_the_next_repeat(
    hs: FakeMatrix, adapters
) -> None:
    # The engine posts a streamed answer's whole text again with the first post's key;
    # the homeserver names the event made with the first text, and the conduit is
    # killed before its edit: the restart's repeat must still edit it.
    room = await hs.create_room()
    first = await adapters(read=False)
    await first.platform.post(room, Part("the"), part_key("turn-1", 0))
    hs.drop_next("send", commit=True, times=2)  # carried out; aiohttp retries a PUT once
    with pytest.raises(Transient):
        await first.platform.post(room, Part("the answer"), part_key("turn-1", 0))
    await first.close()
    restarted = await adapters(read=False)
    await restarted.platform.post(room, Part("the answer"), part_key("turn-1", 0))
    assert hs.bot_texts(room) == ["the answer"]


async def test_an_answer_is_a_notice_with_html_and_its_markdown_as_fallback(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    await adapter.platform.post(room, Part("**bold** <i>"), part_key("t", 0))
    (event,) = hs.events_of(room)
    assert event.content["msgtype"] == "m.notice"
    assert event.content["body"] == "**bold** <i>"
    assert event.content["formatted_body"] == "<p><strong>bold</strong> &lt;i&gt;</p>"


async def test_a_relayed_copy_is_text_with_its_senders_profile(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    await adapter.platform.post(room, Part("hi", sender=Sender("Bob", "U1")), part_key("t", 0))
    (event,) = hs.events_of(room)
    assert event.content["msgtype"] == "m.text"
    assert event.content["com.beeper.per_message_profile"]["displayname"] == "Bob"


async def test_a_post_in_a_thread_stays_in_the_thread_and_replies(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    root = await hs.user_says(room, "root")
    asked = await hs.user_says(room, "a question", thread=root)
    await adapter.platform.post(f"{room}|{root}", Part("an answer", reply_to=asked), "k1")
    (shown,) = [s for s in hs.view(room, root) if s.sender == BOT]
    assert (shown.text, shown.reply_to) == ("an answer", asked)
    assert hs.bot_texts(room) == []


async def test_an_edit_replaces_the_text_the_user_sees(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    posted = await adapter.platform.post(room, Part("draft"), "k1")
    await adapter.platform.edit(room, posted, Part("final *answer*"))
    (shown,) = hs.view(room)
    assert (shown.text, shown.html, shown.edits) == (
        "final *answer*",
        "<p>final <em>answer</em></p>",
        1,
    )
    edit = hs.events_of(room)[-1]
    assert edit.content["body"] == "* final *answer*"  # for clients that do not apply edits


async def test_an_edit_back_to_an_earlier_text_shows_that_text(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    posted = await adapter.platform.post(room, Part("A"), "k1")
    for text in ("B", "C", "B"):
        await adapter.platform.edit(room, posted, Part(text))
    (shown,) = hs.view(room)
    assert (shown.text, shown.edits) == ("B", 3)


async def test_the_same_edit_asked_again_after_a_restart_is_one_event(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    first = await adapters(read=False)
    posted = await first.platform.post(room, Part("A"), "k1")
    await first.platform.edit(room, posted, Part("B"))
    await first.platform.edit(room, posted, Part("B"))
    await first.close()
    restarted = await adapters(read=False)
    await restarted.platform.edit(room, posted, Part("B"))
    (shown,) = hs.view(room)
    assert (shown.text, shown.edits) == ("B", 1)


async def test_a_delete_redacts_the_message_once(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    posted = await adapter.platform.post(room, Part("gone soon"), "k1")
    await adapter.platform.delete(room, posted)
    await adapter.platform.delete(room, posted)
    assert hs.view(room) == []
    assert len(hs.events_of(room, "m.room.redaction")) == 1


@pytest.mark.parametrize(
    ("fault", "failure", "reason"),
    [
        ({"status": 429, "retry_after_ms": 1500}, RateLimited, "rate_limited"),
        ({"status": 502, "errcode": "M_UNKNOWN"}, Transient, "platform_unavailable"),
        ({"status": 403, "errcode": "M_FORBIDDEN"}, Refused, "refused_permission"),
        ({"status": 413, "errcode": "M_TOO_LARGE"}, Refused, "refused_too_large"),
        ({"status": 400, "errcode": "M_BAD_JSON"}, Refused, "refused_unsupported"),
    ],
)
async def test_a_failed_post_is_classified(
    hs: FakeMatrix, adapters, fault: dict[str, object], failure: type, reason: str
) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    hs.fail_next("send", **fault)  # type: ignore[arg-type]
    with pytest.raises(failure) as raised:
        await adapter.platform.post(room, Part("x"), "k1")
    assert raised.value.reason == reason
    if isinstance(raised.value, RateLimited):
        assert raised.value.wait == 1.5


async def test_the_fake_counts_a_send_made_inside_a_rate_limit_s_wait(
    hs: FakeMatrix, adapters
) -> None:
    # The burst tests count `early` sends to show the engine waits: the count must see one.
    room = await hs.create_room()
    adapter = await adapters(read=False)
    hs.fail_next("send", retry_after_ms=60_000)
    with pytest.raises(RateLimited):
        await adapter.platform.post(room, Part("x"), "k1")
    await adapter.platform.post(room, Part("x"), "k1")  # the adapter leaves waiting to the engine
    assert (hs.limited, hs.early) == (1, 1)


async def test_a_post_where_the_bot_may_not_write_is_refused(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters(read=False)
    hs.forbid(room)
    with pytest.raises(Refused) as raised:
        await adapter.platform.post(room, Part("x"), "k1")
    assert raised.value.reason == "refused_permission"


async def test_an_encrypted_room_is_told_once_never_read_and_refused(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room(encrypted=True)
    adapter = await adapters()
    await hs.user_sends(room, "m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2"})
    await hs.user_says(room, "plain text in an encrypted room")
    with pytest.raises(Refused) as raised:
        await adapter.platform.post(room, Part("x"), "k1")
    assert raised.value.reason == "refused_unsupported"
    await adapter.close()
    await adapters()  # a restart does not tell it again
    assert hs.bot_texts(room) == [ENCRYPTED_NOTICE]
    assert adapter.queue.empty()
