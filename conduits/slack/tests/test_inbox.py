"""The inbox: Slack events acknowledged and not yet handed to the core, in a SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pydantic import SecretStr

from ore_conduit_slack.api import Ambiguous, SlackError, Throttled
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.inbound import Decoder, Identity
from ore_conduit_slack.inbox import Inbox, InboxError
from ore_conduit_slack.platform import SlackPlatform
from ore_core.conduit import PlatformError, RateLimited, Refused, Transient


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
    broken = await Inbox.open(tmp_path / "broken.db")
    await broken.close()
    inbox = await Inbox.open(tmp_path / "inbox.db")
    config = SlackConfig(bot_token=SecretStr("xoxb-test"))
    platform = SlackPlatform(config)  # not connected: its listener is called by hand
    platform.decoder = Decoder(platform.api, config, Identity("UBOT", "BBOT", "T1"))
    try:
        platform.inbox = broken
        with pytest.raises(InboxError, match="closed"):
            await platform.take(body("<@UBOT> hello", "1.1"))
        platform.inbox = inbox
        await platform.take(body("<@UBOT> hello", "1.1"))  # Slack's retry
        await platform.take(body("<@UBOT> hello", "1.1"))  # a repeat of a kept one
        assert await inbox.count() == 1
    finally:
        await inbox.close()


@pytest.mark.parametrize(
    ("error", "kind", "reason"),
    [
        (Ambiguous("conversations.replies", "HTTP 503"), Transient, "platform_unavailable"),
        (Throttled("chat.postMessage", 1.0), RateLimited, "rate_limited"),
        (SlackError("chat.postMessage", "not_in_channel"), Refused, "refused_permission"),
        (SlackError("chat.postMessage", "channel_not_found"), Refused, "refused_permission"),
        (SlackError("chat.postMessage", "missing_scope"), Refused, "refused_permission"),
        (SlackError("chat.postMessage", "msg_too_long"), Refused, "refused_too_large"),
        (SlackError("chat.postMessage", "invalid_blocks"), Refused, "refused_unsupported"),
    ],
)
def test_slack_s_failures_are_classified_for_the_engine(
    error: PlatformError, kind: type[PlatformError], reason: str
) -> None:
    """What passes with time is waited out by the engine (a rate limit for exactly its
    Retry-After), what does not is reported failed with its reason."""
    assert isinstance(error, kind)
    assert error.reason == reason
