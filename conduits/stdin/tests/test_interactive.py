"""`ore chat` in a real pseudo-terminal (pexpect): streaming, Ctrl-C, history, resuming."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from ore_openai.testing import MockOpenAIServer, MockResponse

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

SpawnChat = Callable[..., pexpect.spawn]
PROMPT = "you>"
THREAD = re.compile(r"Thread ([A-Za-z0-9_-]+) \((new thread|resumed, \d+ turns)\)")
EXIT_TIMEOUT = 60


def model_env(model: MockOpenAIServer) -> dict[str, str]:
    return {"ORE_OPENAI_BASE_URL": model.base_url}


def started(child: pexpect.spawn) -> tuple[str, str]:
    """Wait for the banner and the prompt; the thread id and how it was opened."""
    child.expect(THREAD)
    thread_id, how = child.match.group(1), child.match.group(2)
    child.expect(PROMPT)
    return thread_id, how


def say(child: pexpect.spawn, text: str, reply: str) -> None:
    """Send a line, wait for its reply and the next prompt.

    The reply must differ from `text`: the prompt shows the typed line again when it is
    accepted, and a match there would be too early.
    """
    child.sendline(text)
    child.expect(re.escape(reply))
    child.expect(PROMPT)


def leave(child: pexpect.spawn) -> int:
    """Ctrl-D at the prompt; the exit status."""
    child.sendcontrol("d")
    child.expect(pexpect.EOF, timeout=EXIT_TIMEOUT)
    child.close()
    assert child.exitstatus is not None
    return child.exitstatus


def test_the_reply_streams_before_the_turn_ends(spawn_chat: SpawnChat) -> None:
    # The model sends two chunks, then nothing until the client gives up: whatever
    # appears was streamed while the turn was still running.
    with MockOpenAIServer([MockResponse.hang("Streaming works fine", after_chunks=3)]) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        child.sendline("hello")
        child.expect("Stre")
        assert model.disconnects == 0  # still waiting for the rest


def test_ctrl_c_interrupts_the_running_turn_and_the_prompt_returns(
    spawn_chat: SpawnChat,
) -> None:
    replies = [MockResponse.hang("Never finished", after_chunks=3), "Next one."]
    with MockOpenAIServer(replies) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        child.sendline("hello")
        child.expect("Neve")
        child.sendintr()
        child.expect(r"\(interrupted\)")
        child.expect(PROMPT)
        say(child, "again", "Next one.")
        assert leave(child) == 0


def test_ctrl_c_is_not_echoed_into_the_reply_area(spawn_chat: SpawnChat) -> None:
    # An echoed `^C` inside the live area broke its redrawing, and the partial reply
    # was left on the screen twice.
    replies = [MockResponse.hang("Never finished", after_chunks=3)]
    with MockOpenAIServer(replies) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        child.sendline("hello")
        child.expect("Neve")
        child.sendintr()
        child.expect(r"\(interrupted\)")
        assert "^C" not in str(child.before)
        child.expect(PROMPT)
        assert leave(child) == 0


def test_text_typed_during_a_reply_is_not_echoed_nor_sent_at_the_next_prompt(
    spawn_chat: SpawnChat,
) -> None:
    # Three chunks (and the finish chunk) a second apart: keys sent after the first one
    # arrive mid-reply, with at least three seconds of it left.
    slow = MockResponse(text="abc", chunk_size=1, delay=1.0)
    with MockOpenAIServer([slow, "Next one."]) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        child.sendline("hello")
        child.expect("a")
        child.send("typed ahead\r")
        child.expect("was not sent")
        assert "typed ahead" not in str(child.before)
        child.expect(PROMPT)
        say(child, "again", "Next one.")
        assert leave(child) == 0
        sent = [request["messages"][-1]["content"] for request in model.requests]
    assert sent == ["hello", "again"]


def test_up_arrow_recalls_the_previous_line(spawn_chat: SpawnChat) -> None:
    with MockOpenAIServer(["First reply.", "Second reply."]) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        say(child, "remember this line", "First reply.")
        child.send("\x1b[A")  # up arrow
        child.expect("remember this line")
        child.send("\r")
        child.expect("Second reply.")
        child.expect(PROMPT)
        assert leave(child) == 0
        assert model.requests[-1]["messages"][-1]["content"] == "remember this line"


def test_the_prompt_history_is_kept_in_the_state_dir(
    spawn_chat: SpawnChat, chat_env: dict[str, str]
) -> None:
    with MockOpenAIServer(["Noted."]) as model:
        child = spawn_chat(env=model_env(model))
        started(child)
        say(child, "from the first chat", "Noted.")
        assert leave(child) == 0
    history = Path(chat_env["XDG_STATE_HOME"]) / "ore" / "stdin" / "history"
    assert "from the first chat" in history.read_text()


def test_the_thread_option_resumes_that_conversation(
    spawn_chat: SpawnChat, run_chat: Callable[..., object]
) -> None:
    with MockOpenAIServer(["Nice to meet you, Ada.", "You are Ada."]) as model:
        run_chat("--thread", "notes", "--new", input="my name is Ada\n", env=model_env(model))
        child = spawn_chat("--thread", "notes", env=model_env(model))
        assert started(child) == ("notes", "resumed, 2 turns")
        say(child, "what is my name?", "You are Ada.")
        assert leave(child) == 0
        said = [message["content"] for message in model.requests[-1]["messages"]]
    assert "my name is Ada" in said
    assert "Nice to meet you, Ada." in said


def test_the_last_thread_is_resumed_by_default(spawn_chat: SpawnChat) -> None:
    with MockOpenAIServer(["Hi there."]) as model:
        first = spawn_chat(env=model_env(model))
        thread_id, how = started(first)
        assert how == "new thread"
        say(first, "hello", "Hi there.")
        assert leave(first) == 0
    second = spawn_chat()
    assert started(second) == (thread_id, "resumed, 2 turns")
    assert leave(second) == 0


def test_the_new_option_starts_another_thread(spawn_chat: SpawnChat) -> None:
    first = spawn_chat()
    thread_id, _ = started(first)
    assert leave(first) == 0
    second = spawn_chat("--new")
    other, how = started(second)
    assert other != thread_id
    assert how == "new thread"
    assert leave(second) == 0


def test_the_new_command_moves_the_chat_and_is_resumed_next_time(spawn_chat: SpawnChat) -> None:
    first = spawn_chat()
    started(first)
    first.sendline("/new")
    first.expect(r"Started a new thread ([A-Za-z0-9_-]+)\.")
    new_thread = first.match.group(1)
    first.expect(PROMPT)
    assert leave(first) == 0
    second = spawn_chat()
    assert started(second)[0] == new_thread


def test_two_ctrl_c_at_the_prompt_leave(spawn_chat: SpawnChat) -> None:
    child = spawn_chat()
    started(child)
    child.sendcontrol("c")
    child.expect("Ctrl-C again or Ctrl-D to leave")
    child.expect(PROMPT)
    child.sendcontrol("c")
    child.expect(pexpect.EOF, timeout=EXIT_TIMEOUT)
    child.close()
    assert child.exitstatus == 0


def test_closing_the_terminal_stops_the_chat_and_its_nats_server(
    spawn_chat: SpawnChat, chat_env: dict[str, str]
) -> None:
    child = spawn_chat()
    started(child)
    child.kill(signal.SIGHUP)
    child.expect(pexpect.EOF, timeout=EXIT_TIMEOUT)
    child.close()
    assert child.exitstatus == 0
    # The server's data directory is removed only after the server stopped.
    assert list(Path(chat_env["TMPDIR"]).glob("ore-chat-nats-*")) == []
