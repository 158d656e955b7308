"""`/attach PATH [TEXT]` in `ore chat` (issue 39): the file goes to the model with the
text; a file that cannot be sent is one line and the text still goes. `ore chat` is a
real process in a pseudo-terminal, with its own core and nats-server, and the openai
processor answers through the mock model server."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from ore_openai.testing import MockOpenAIServer

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

SpawnChat = Callable[..., pexpect.spawn]
PROMPT = "you>"


def chat_with(spawn_chat: SpawnChat, model: MockOpenAIServer) -> pexpect.spawn:
    child = spawn_chat(env={"ORE_OPENAI_BASE_URL": model.base_url, "ORE_PROCESSOR__NAME": "openai"})
    child.expect(PROMPT)
    return child


def test_an_attached_text_file_reaches_the_model_with_the_text(
    spawn_chat: SpawnChat, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("the launch is on Tuesday\n")
    with MockOpenAIServer(["Tuesday it is"]) as model:
        child = chat_with(spawn_chat, model)
        child.sendline(f"/attach {notes} when is the launch?")
        child.expect(re.escape("attached notes.txt (text/plain, 25 B)"))
        child.expect("Tuesday it is")
        child.expect(PROMPT)
    content = model.requests[0]["messages"][-1]["content"]
    assert content == (
        "when is the launch?\n\nFile notes.txt:\n```\nthe launch is on Tuesday\n\n```"
    )


def test_a_missing_file_is_one_line_and_the_text_still_goes(spawn_chat: SpawnChat) -> None:
    with MockOpenAIServer(["answered anyway"]) as model:
        child = chat_with(spawn_chat, model)
        child.sendline("/attach ./nope.pdf still there?")
        child.expect(r"nope\.pdf: No such file or directory; the text was sent without it")
        child.expect("answered anyway")
        child.expect(PROMPT)
    assert model.requests[0]["messages"][-1]["content"] == "still there?"
