"""The inbox: Slack events acknowledged and not yet handed to the core, in a SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError, Throttled
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.inbound import Identity, Inbound, Lanes, _passing
from ore_conduit_slack.inbox import Inbox, InboxError
from ore_conduit_slack.testing import FakeSlack
from ore_core import ApiError, BusError, PermissionDenied


def body(text: str, ts: str) -> dict[str, object]:
    event = {"type": "app_mention", "channel": "C1", "ts": ts, "user": "UALICE", "text": text}
    return {"type": "event_callback", "team_id": "T1", "event": event}


async def test_what_an_inbox_kept_comes_back_in_order_after_a_restart(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "state" / "inbox.db")
    entries = [await inbox.put(body(f"m{i}", f"1.{i}")) for i in range(4)]
    await inbox.done(entries[1])
    await inbox.close()  # what a crash leaves: the file

    again = await Inbox.open(tmp_path / "state" / "inbox.db")
    try:
        pending = await again.pending()
        assert [entry for entry, _ in pending] == [entries[0], entries[2], entries[3]]
        assert [b["event"]["text"] for _, b in pending] == ["m0", "m2", "m3"]  # type: ignore[index]
    finally:
        await again.close()


async def test_a_row_the_inbox_did_not_write_is_dropped_not_replayed(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    inbox = await Inbox.open(path)
    kept = await inbox.put(body("fine", "1.1"))
    await inbox.close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO events (body) VALUES ('not json'), ('[1, 2]')")
    inbox = await Inbox.open(path)
    try:
        assert [entry for entry, _ in await inbox.pending()] == [kept]
        assert await inbox.count() == 1
    finally:
        await inbox.close()


async def test_an_inbox_that_cannot_be_opened_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file where the state directory should be")
    with pytest.raises(InboxError, match=r"cannot open the Slack inbox .*taken/inbox\.db"):
        await Inbox.open(tmp_path / "taken" / "inbox.db")


async def test_an_event_the_inbox_cannot_keep_is_refused_and_its_retry_is_taken(
    tmp_path: Path,
) -> None:
    """Refused (Bolt then does not acknowledge it, so Slack sends it again), and the
    retry is not dropped as a repeat of an event already seen."""
    fake = await FakeSlack().start()
    broken = await Inbox.open(tmp_path / "broken.db")
    await broken.close()
    inbox = await Inbox.open(tmp_path / "inbox.db")

    class Stop(Exception):
        pass

    async def scenario() -> None:
        async with asyncio.TaskGroup() as tasks:
            inbound = Inbound(
                name="slack",
                client=None,  # type: ignore[arg-type]  # never reached: nothing is ready
                api=SlackApi(AsyncWebClient(token="x", base_url=fake.api_url)),
                config=SlackConfig(),
                identity=Identity("UBOT", "BBOT", "T1"),
                lanes=Lanes(tasks),
                answering=lambda _: None,
                inbox=broken,
                ready=asyncio.Event(),  # the queued work waits: the test looks at the inbox
            )
            with pytest.raises(InboxError, match="closed"):
                await inbound.take(body("<@UBOT> hello", "1.1"))
            inbound.inbox = inbox
            await inbound.take(body("<@UBOT> hello", "1.1"))  # Slack's retry
            await inbound.take(body("<@UBOT> hello", "1.1"))  # a repeat of a kept one
            assert await inbox.count() == 1
            raise Stop  # ends the lanes' waiting work

    stopped = False
    try:
        try:
            await scenario()
        except* Stop:
            stopped = True
    finally:
        await inbox.close()
        await fake.close()
    assert stopped


@pytest.mark.parametrize(
    ("error", "waits"),
    [
        (BusError("nothing answers ore.api.slack.threads.lookup"), True),
        (PermissionDenied("publish", "ore.in.slack.x"), False),
        (ApiError(500, "internal", "store unavailable"), True),
        (ApiError(400, "bad_request", "no such key"), False),
        (Ambiguous("conversations.replies", "HTTP 503"), True),
        (Throttled("conversations.replies", 1.0), True),
        (SlackError("conversations.replies", "channel_not_found"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_kept_work_waits_out_what_passes_and_drops_what_does_not(
    error: BaseException, waits: bool
) -> None:
    assert _passing(error) is waits
