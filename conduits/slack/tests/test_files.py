"""Files: a file shared in Slack is downloaded with the bot token, stored in ore's files
bucket and sent as an attachment; one refused, cut short or not handed over is one
notice in the thread, the text still goes and the conduit keeps running. Another
endpoint's file is uploaded into the Slack thread the current way (upload URL, the
bytes, complete), after the copy's text. Real core and nats-server, the fake Slack."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ore_core import Role
from ore_core.artifacts import Attachment
from ore_core.conduit import ControlClient, part_key
from ore_core.files import FilePolicy

if TYPE_CHECKING:
    from tests.conftest import Harness

CHANNEL = "CGENERAL"
PDF = b"%PDF-1.7 " + bytes(range(256)) * 64
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8


async def attachments(slack: Harness) -> list[Attachment]:
    """The files of every user turn the core stores."""
    return [
        artifact
        for thread in await slack.threads()
        for turn in thread.turns()
        if turn.role == Role.USER
        for artifact in turn.artifacts
        if isinstance(artifact, Attachment)
    ]


def policy(slack: Harness, **rules: Any) -> None:
    """The operator's `[files]` rules, as `ore conduit` gives them to the conduit."""
    assert slack.conduit is not None
    assert slack.conduit.client is not None
    slack.conduit.client.files.policy = FilePolicy(**rules)


def notices(slack: Harness, ts: str) -> list[str]:
    """The bot's messages in the thread that are not answers (`echo: ...`)."""
    return [t for t in slack.fake.rendered_thread(CHANNEL, ts) if not t.startswith("echo")]


async def test_a_shared_file_reaches_the_core_as_an_attachment_byte_for_byte(
    slack: Harness,
) -> None:
    await slack.start()
    shared = await slack.fake.user_shares_file(
        CHANNEL, PDF, "read this", name="a.pdf", mimetype="application/pdf"
    )
    assert await slack.answers(CHANNEL, shared) == ["echo: read this"]
    (document,) = await attachments(slack)
    assert (document.name, document.media_type, document.size) == (
        "a.pdf",
        "application/pdf",
        len(PDF),
    )
    assert document.sha256 == hashlib.sha256(PDF).hexdigest()
    assert len(slack.fake.downloads) == 1


async def test_a_file_shared_without_text_is_taken(slack: Harness) -> None:
    await slack.start()
    shared = await slack.fake.user_shares_file(CHANNEL, PNG, name="shot.png", mimetype="image/png")
    await slack.answers(CHANNEL, shared)
    (image,) = await attachments(slack)
    assert (image.name, image.sha256) == ("shot.png", hashlib.sha256(PNG).hexdigest())


async def test_a_file_over_max_size_gets_a_notice_is_not_downloaded_and_the_text_goes(
    slack: Harness,
) -> None:
    await slack.start()
    policy(slack, max_size=1000)
    shared = await slack.fake.user_shares_file(
        CHANNEL, PDF, "read this", name="a.pdf", mimetype="application/pdf"
    )
    assert await slack.answers(CHANNEL, shared) == ["echo: read this"]
    assert notices(slack, shared.ts) == [
        "a.pdf is 16.4 kB, over the 1.0 kB limit for files (files.max_size); "
        "the message went without it."
    ]
    assert slack.fake.downloads == []
    assert await attachments(slack) == []


async def test_a_file_of_a_forbidden_type_gets_a_notice_and_the_text_goes(slack: Harness) -> None:
    await slack.start()
    shared = await slack.fake.user_shares_file(
        CHANNEL, b"PK zip", "unpack", name="a.zip", mimetype="application/zip"
    )
    assert await slack.answers(CHANNEL, shared) == ["echo: unpack"]
    (notice,) = notices(slack, shared.ts)
    assert notice.startswith("a.zip: files of type application/zip are not allowed here")
    assert slack.fake.downloads == []


async def test_a_download_cut_midway_gets_a_notice_and_the_conduit_keeps_going(
    slack: Harness,
) -> None:
    await slack.start()
    slack.fake.cut_next_file()
    shared = await slack.fake.user_shares_file(
        CHANNEL, PDF, "read this", name="a.pdf", mimetype="application/pdf"
    )
    assert await slack.answers(CHANNEL, shared) == ["echo: read this"]
    (notice,) = notices(slack, shared.ts)
    assert notice.startswith("I could not download a.pdf from Slack (the download broke off")
    again = await slack.fake.user_shares_file(
        CHANNEL, PDF, "again", name="a.pdf", mimetype="application/pdf"
    )
    assert await slack.answers(CHANNEL, again) == ["echo: again"]
    assert [a.size for a in await attachments(slack)] == [len(PDF)]


async def test_a_file_url_refusing_the_token_gets_a_notice_and_the_text_goes(
    slack: Harness,
) -> None:
    await slack.start()
    slack.fake.file_token = "xoxb-another-token"
    shared = await slack.fake.user_shares_file(
        CHANNEL, PDF, "read this", name="a.pdf", mimetype="application/pdf"
    )
    assert await slack.answers(CHANNEL, shared) == ["echo: read this"]
    assert notices(slack, shared.ts) == [
        "I could not download a.pdf from Slack (Slack refused the bot's token; is files:read "
        "granted?); the message went without it."
    ]
    assert await attachments(slack) == []


async def test_a_terminal_file_is_uploaded_into_the_thread_after_its_text_once(
    slack: Harness,
) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hi")
    await slack.answers(CHANNEL, root)
    thread = (await slack.core.thread_holding("hi")).id
    endpoint = {"namespace": "stdin", "key": "id", "value": thread}
    link = {"thread": thread, "endpoint": endpoint, "answer": "none"}
    await ControlClient.beside(slack.core.client).call("links.add", link)
    terminal = slack.core.client_for("stdin")
    report = await terminal.upload(PDF, "report.pdf")
    await terminal.send(thread, "the report", id="s-1", user_name="ana", attachments=[report])
    await slack.wait_for(lambda: len(slack.fake.bot_files(CHANNEL, root.ts)) == 1)
    assert slack.fake.bot_files(CHANNEL, root.ts) == [("report.pdf", PDF)]
    shown = slack.fake.rendered_thread(CHANNEL, root.ts)
    assert shown[-2:] == ["ana (stdin): the report", ""]  # the text, then the file
    copy = slack.fake.bot_messages(CHANNEL, root.ts)[-2]
    # Its key marks the files posted once they are: read back, the copy is done.
    await slack.wait_for(lambda: "files" not in str(copy.metadata))
    assert [c.method for c in slack.fake.calls() if c.method.startswith("files.")] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]


async def test_a_copy_whose_text_a_killed_run_posted_gets_its_file_and_no_second_text(
    slack: Harness,
) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hi")
    await slack.answers(CHANNEL, root)
    thread = (await slack.core.thread_holding("hi")).id
    endpoint = {"namespace": "stdin", "key": "id", "value": thread}
    link = {"thread": thread, "endpoint": endpoint, "answer": "none"}
    await ControlClient.beside(slack.core.client).call("links.add", link)
    await slack.stop()
    terminal = slack.core.client_for("stdin")
    report = await terminal.upload(PDF, "report.pdf")
    await terminal.send(thread, "the report", id="s-1", user_name="ana", attachments=[report])
    turn = next(t for t in await terminal.turns(thread) if t.event_id == "s-1")
    # What a run killed after posting the copy's text (and before its file) left.
    left = slack.fake.add_message(
        CHANNEL, "ana (stdin): the report", bot_id=slack.fake.bot_id, thread_ts=root.ts
    )
    left.user = slack.fake.bot_user
    key = part_key(f"{thread}.{turn.id}", 0)
    left.metadata = {"event_type": "ore_relay", "event_payload": {"key": f"{key}:files"}}
    await slack.start()
    await slack.wait_for(
        lambda: left.metadata == {"event_type": "ore_relay", "event_payload": {"key": key}}
    )
    assert slack.fake.bot_files(CHANNEL, root.ts) == [("report.pdf", PDF)]
    assert slack.fake.rendered_thread(CHANNEL, root.ts).count("ana (stdin): the report") == 1
