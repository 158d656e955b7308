"""`ore chat` as a real process on a pipe: everything in one process, exit codes, processor."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ore_core import TurnProcessor
from ore_core.bus.server.embedded import runs_in
from ore_core.cli.processor import choose_processor
from ore_core.config import OreSettings, load_settings
from ore_core.testing.processors import ScriptedProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

RunChat = Callable[..., subprocess.CompletedProcess[str]]
ORE = Path(sys.executable).with_name("ore")
TIMEOUT = 60.0


def test_every_piped_line_is_answered_in_order_and_the_status_is_0(run_chat: RunChat) -> None:
    chat = run_chat(input="hello\nhow are you\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "hello\nhow are you\n"


def test_the_end_of_input_stops_the_embedded_nats_server(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    assert run_chat(input="hello\n").returncode == 0
    # The server's data directory is removed only after the server stopped.
    assert list(Path(chat_env["TMPDIR"]).glob("ore-chat-nats-*")) == []


def test_echo_is_announced_once_with_how_to_configure_a_model(run_chat: RunChat) -> None:
    chat = run_chat(input="one\ntwo\n")
    lines = chat.stderr.splitlines()
    assert len(lines) == 1
    assert "echo" in lines[0]
    assert "OPENAI_API_KEY" in lines[0]


def test_the_cores_logs_stay_out_of_the_chat_and_go_to_the_log_file(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    chat = run_chat(input="hello\n", env={"ORE_LOG__LEVEL": "debug"})
    assert "ore core serving" not in chat.stdout + chat.stderr
    log = Path(chat_env["XDG_STATE_HOME"]) / "ore" / "chat.log"
    assert "ore core serving" in log.read_text()


def test_the_openai_processor_answers_when_an_endpoint_is_configured(run_chat: RunChat) -> None:
    with MockOpenAIServer(["Hi from the model."]) as model:
        url = model.base_url
        chat = run_chat(input="hello\n", env={"ORE_OPENAI_BASE_URL": url})
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "Hi from the model.\n"
    assert chat.stderr == f"answering with openai model gpt-4o-mini at {url}\n"


def test_a_failed_turn_exits_1_with_one_line(run_chat: RunChat) -> None:
    with MockOpenAIServer([MockResponse.http_error(500, "the model is down")]) as model:
        chat = run_chat(
            input="hello\nnever sent\n",
            env={"ORE_OPENAI_BASE_URL": model.base_url, "ORE_PROCESSOR__MAX_RETRIES": "0"},
        )
        assert len(model.requests) == 1
    assert chat.returncode == 1
    assert chat.stdout == ""
    answering, line = chat.stderr.splitlines()
    assert answering.startswith("answering with openai model")
    assert line.startswith("Error: turn failed on thread ")


async def test_with_a_nats_url_it_talks_to_the_core_running_there(
    run_chat: RunChat, ore_nats_url: str, start_core: Callable[[TurnProcessor], Awaitable[None]]
) -> None:
    await start_core(ScriptedProcessor(["from the running core"]))
    chat = await asyncio.to_thread(run_chat, "--nats", ore_nats_url, input="hello\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "from the running core\n"
    assert chat.stderr == ""  # no processor choice to announce: that core has its own


def test_without_a_core_behind_the_configured_nats_it_exits_1_with_one_line(
    run_chat: RunChat, ore_nats_url: str
) -> None:
    chat = run_chat("--nats", ore_nats_url, input="hello\n")
    assert chat.returncode == 1
    (line,) = chat.stderr.splitlines()
    assert line.startswith("Error: ")
    assert "ore serve" in line


def test_an_unknown_thread_is_an_error_that_suggests_new(run_chat: RunChat) -> None:
    chat = run_chat("--thread", "t1", input="hello\n")
    assert chat.returncode == 1
    assert chat.stderr.splitlines()[-1] == (
        "Error: thread t1 not found in the store of the core: `ore threads list` shows them, "
        "or add --new to start it"
    )


def test_thread_and_new_together_start_that_thread(run_chat: RunChat) -> None:
    assert run_chat("--thread", "t1", "--new", input="hello\n").returncode == 0
    again = run_chat("--thread", "t1", input="again\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "again\n"


def test_without_the_stdin_conduit_it_says_what_to_install(run_chat: RunChat) -> None:
    chat = run_chat(input="hello\n", env={"ORE_LOAD_PLUGINS": "ore-openai"})
    assert chat.returncode == 1
    assert "pip install ./conduits/stdin" in chat.stderr


def test_sigterm_ends_the_chat_cleanly_and_stops_its_nats_server(
    chat_env: dict[str, str],
) -> None:
    process = subprocess.Popen(
        [str(ORE), "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=chat_env,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        assert process.stdout.readline() == "hello\n"  # running, input still open
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    # The server's data directory is removed only after the server stopped.
    assert list(Path(chat_env["TMPDIR"]).glob("ore-chat-nats-*")) == []


def test_an_explicitly_configured_processor_is_kept(
    ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__NAME", "echo")
    choice = choose_processor(load_settings(), ["echo", "openai"], {"OPENAI_API_KEY": "k"})
    assert choice.settings.processor.name == "echo"
    assert choice.echo_reason == "processor.name is echo"


def test_openai_is_chosen_when_installed_and_an_endpoint_is_set(ore_isolated_env: Path) -> None:
    env = {"ORE_OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}
    choice = choose_processor(load_settings(), ["echo", "openai"], env)
    assert choice.settings.processor.name == "openai"
    assert choice.echo_reason is None
    assert choice.source == "auto: ORE_OPENAI_BASE_URL is set"


def test_other_processor_settings_are_kept_when_openai_is_chosen(
    ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__MODEL", "llama3.2")
    choice = choose_processor(load_settings(), ["echo", "openai"], {"OPENAI_API_KEY": "k"})
    assert choice.settings.processor.model_dump() == {"name": "openai", "model": "llama3.2"}


def test_without_an_endpoint_echo_answers_and_the_notice_says_what_to_export(
    ore_isolated_env: Path,
) -> None:
    choice = choose_processor(OreSettings(), ["echo", "openai"], {})
    assert choice.settings.processor.name == "echo"
    assert choice.echo_reason is not None
    assert "set OPENAI_API_KEY or ORE_OPENAI_BASE_URL" in choice.echo_reason
    assert "pip install" not in choice.echo_reason


def test_without_the_openai_plugin_the_notice_says_what_to_install(
    ore_isolated_env: Path,
) -> None:
    choice = choose_processor(OreSettings(), ["echo"], {"OPENAI_API_KEY": "k"})
    assert choice.settings.processor.name == "echo"
    assert choice.echo_reason is not None
    assert "pip install ./plugins/openai" in choice.echo_reason


# --- one-shot prompts, stdin as one message, -m, dropped lines ---------------------------


def threads_json(chat_env: dict[str, str]) -> list[dict[str, object]]:
    listed = subprocess.run(
        [str(ORE), "threads", "list", "--all", "--json"],
        capture_output=True,
        text=True,
        env=chat_env,
        timeout=TIMEOUT,
        check=True,
    )
    threads: list[dict[str, object]] = json.loads(listed.stdout)
    return threads


def test_a_prompt_argument_is_one_message_answered_once(run_chat: RunChat) -> None:
    chat = run_chat("what", "is", "ore?", input="")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "what is ore?\n"


def test_piped_input_joins_the_prompt_as_one_message(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    chat = run_chat("summarise this", input="# Notes\n\nline one\nline two\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "summarise this\n\n# Notes\n\nline one\nline two\n"
    (thread,) = threads_json(chat_env)
    assert thread["turns"] == 2  # one message, one answer


def test_an_empty_pipe_starts_no_thread(run_chat: RunChat, chat_env: dict[str, str]) -> None:
    assert run_chat(input="\n\n").returncode == 0
    assert threads_json(chat_env) == []


def test_dash_m_chooses_the_model(run_chat: RunChat) -> None:
    with MockOpenAIServer(["ok"]) as model:
        url = model.base_url
        chat = run_chat("-m", "llama3.2", "hi", input="", env={"ORE_OPENAI_BASE_URL": url})
        assert chat.returncode == 0, chat.stderr
        assert [request["model"] for request in model.requests] == ["llama3.2"]
    assert chat.stderr == f"answering with openai model llama3.2 at {url}\n"


def test_lines_dropped_by_an_interceptor_make_the_exit_status_1(run_chat: RunChat) -> None:
    guard = {
        "ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-guard",
        "ORE_PLUGINS__GUARD__BURST": "1",
        "ORE_PLUGINS__GUARD__RATE": "1",
        "ORE_PLUGINS__GUARD__PER": "3600",
    }
    chat = run_chat(input="first\nsecond\n", env=guard)
    assert chat.returncode == 1
    assert chat.stdout == "first\n"  # the second line was rate limited, not answered
    assert chat.stderr.splitlines()[-1].startswith(
        "Error: 1 of 2 message(s) were dropped by an interceptor on thread "
    )


def test_a_state_directory_that_cannot_be_written_is_one_error_line(
    run_chat: RunChat, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    chat = run_chat("hi", input="", env={"XDG_STATE_HOME": str(blocker / "state")})
    assert chat.returncode == 1
    (line,) = chat.stderr.splitlines()
    assert line.startswith(f"Error: cannot write {blocker}")


def test_a_chat_killed_with_sigkill_leaves_nothing_behind_after_the_next_chat(
    chat_env: dict[str, str], run_chat: RunChat
) -> None:
    process = subprocess.Popen(
        [str(ORE), "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=chat_env,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        assert process.stdout.readline() == "hello\n"  # running, its nats-server too
        record = Path(chat_env["XDG_STATE_HOME"]) / "ore" / "chats" / f"{process.pid}.json"
        server = json.loads(record.read_text())
        process.kill()
        process.wait(TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    assert Path(server["directory"]).exists()  # SIGKILL: nothing could clean up
    assert run_chat(input="next\n").returncode == 0
    assert not Path(server["directory"]).exists()
    assert (
        not Path(f"/proc/{server['server']}").exists()
        or b"nats-server" not in Path(f"/proc/{server['server']}/cmdline").read_bytes()
    )
    assert list(Path(chat_env["TMPDIR"]).glob("ore-chat-nats-*")) == []


def test_a_chat_killed_with_sigkill_takes_its_nats_server_with_it(
    chat_env: dict[str, str],
) -> None:
    process = subprocess.Popen(
        [str(ORE), "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=chat_env,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        assert process.stdout.readline() == "hello\n"  # running, its nats-server too
        record = Path(chat_env["XDG_STATE_HOME"]) / "ore" / "chats" / f"{process.pid}.json"
        server = json.loads(record.read_text())
        assert runs_in(server["server"], server["directory"])
        process.kill()
        process.wait(TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    deadline = time.monotonic() + TIMEOUT
    while runs_in(server["server"], server["directory"]) and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel signals it; nothing to wait on but its exit
    survived = runs_in(server["server"], server["directory"])
    if survived:  # without the parent-death signal: stopped here, not left running
        os.kill(server["server"], signal.SIGKILL)
    assert not survived


def test_the_start_up_line_says_the_guards_limits(run_chat: RunChat) -> None:
    chat = run_chat(input="hello\n", env={"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-guard"})
    assert chat.returncode == 0, chat.stderr
    (line,) = chat.stderr.splitlines()
    assert line.startswith("answering with echo: ")
    assert line.endswith(
        "; guard: per sender 20 at once, then 60 per 60 s; "
        "per thread without a user 40, then 120; redacting secrets"
    )


def test_dash_s_sends_the_system_prompt_before_the_conversation(run_chat: RunChat) -> None:
    with MockOpenAIServer(["ok"]) as model:
        url = model.base_url
        chat = run_chat("-s", "answer in French", "hi", input="", env={"ORE_OPENAI_BASE_URL": url})
        assert chat.returncode == 0, chat.stderr
        (request,) = model.requests
    assert request["messages"] == [
        {"role": "system", "content": "answer in French"},
        {"role": "user", "content": "hi"},
    ]


def test_dash_c_continues_the_thread_of_the_last_prompt(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    assert run_chat("first", input="").returncode == 0
    chat = run_chat("-c", "second", input="")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "second\n"
    (thread,) = threads_json(chat_env)
    assert thread["turns"] == 4  # two messages, two answers, one thread


def test_dash_c_continues_the_thread_of_the_last_pipe(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    assert run_chat(input="one\n").returncode == 0
    assert run_chat("-c", input="two\n").returncode == 0
    (thread,) = threads_json(chat_env)
    assert thread["turns"] == 4


def test_without_dash_c_a_prompt_still_starts_a_new_thread(
    run_chat: RunChat, chat_env: dict[str, str]
) -> None:
    assert run_chat("first", input="").returncode == 0
    assert run_chat("second", input="").returncode == 0
    assert len(threads_json(chat_env)) == 2


def test_dash_c_with_no_earlier_thread_is_one_error_line(run_chat: RunChat) -> None:
    chat = run_chat("-c", "hi", input="")
    assert chat.returncode == 1
    assert chat.stderr.splitlines()[-1] == (
        "Error: -c: no thread to continue yet: start one with `ore chat` or `ore chat TEXT`"
    )
