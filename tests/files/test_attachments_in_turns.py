"""Files of a user message (issue 39): references on the event, artifacts of the turn,
and the core's own check of the `[files]` policy (over the limit, a forbidden type: a
notice, and the text still goes)."""

from __future__ import annotations

import pytest

from ore_core import EventDecodeError, Image, Manager, NoticeEvent, Role, Text
from ore_core.artifacts import Attachment
from ore_core.events import decode_ingress, encode_event
from ore_core.files import FilePolicy
from ore_core.files.interceptor import FilePolicyInterceptor
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import collect, collected, message

PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="
PDF = Attachment("report.pdf", "application/pdf", 5_000_000, "ab" * 32, "ORE_FILES")
LOG = Attachment("run.log", "text/plain", 300, "cd" * 32, "ORE_FILES")


def test_attachments_survive_the_wire_as_artifact_json() -> None:
    event = message("see", attachments=[PDF])
    data = encode_event(event)
    assert b'"attachments":[{"kind":"attachment","name":"report.pdf"' in data
    assert decode_ingress(data) == event


def test_a_bad_reference_on_the_wire_is_a_decode_error_naming_the_field() -> None:
    data = (
        b'{"kind":"user_message","id":"m","content":"x","attachments":'
        b'[{"name":"a","media_type":"text/plain","size":1,"sha256":"../etc","bucket":"B"}]}'
    )
    with pytest.raises(EventDecodeError, match=r"attachments\.0.*sha256 must be 64"):
        decode_ingress(data)


async def test_the_user_turn_has_its_files_after_text_and_images() -> None:
    async with Manager(MemoryStore(), ScriptedProcessor(["ok"])) as manager:
        stream = await manager.create()
        await stream.process(message("read these", images=[PNG], attachments=[PDF, LOG]))
    user = next(t for t in stream.turns() if t.role == Role.USER)
    assert user.artifacts == (Text("read these"), Image(PNG), PDF, LOG)


async def test_collected_messages_keep_the_files_of_each() -> None:
    later = [message("two", attachments=[PDF]), message("three", attachments=[LOG])]
    assert await collected(message("one"), *later) == (Text("two\n\nthree"), PDF, LOG)


@pytest.mark.parametrize(
    ("policy", "notice"),
    [
        (FilePolicy(max_size=1_000_000), "report.pdf is 5.0 MB, over the 1.0 MB limit"),
        (FilePolicy(allowed_types=("text/*",)), "report.pdf: files of type application/pdf"),
    ],
    ids=["over the size limit", "a forbidden type"],
)
async def test_a_refused_file_is_one_notice_and_the_text_and_other_files_still_go(
    policy: FilePolicy, notice: str
) -> None:
    interceptor = FilePolicyInterceptor(policy)
    async with Manager(
        MemoryStore(), ScriptedProcessor(["ok"]), interceptors=[interceptor]
    ) as manager:
        stream = await manager.create()
        async with stream.subscribe() as events:
            await stream.process(message("files", attachments=[PDF, LOG]))
            seen = await collect(events)
    notices = [e.content for e in seen if isinstance(e, NoticeEvent)]
    assert len(notices) == 1
    assert notices[0].startswith(notice)
    assert notices[0].endswith("; the message went without it")
    user = next(t for t in stream.turns() if t.role == Role.USER)
    assert user.artifacts == (Text("files"), LOG)
