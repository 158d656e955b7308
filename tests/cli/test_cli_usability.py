"""One-line errors, the processor choice, the running-core record, ore doctor (in process)."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest

from ore_core import ThreadNotFound
from ore_core.cli import serve as serve_module
from ore_core.cli.failures import one_line
from ore_core.cli.processor import answering_line, choose_processor
from ore_core.cli.running import (
    ChatServer,
    RunningCore,
    find_running,
    record_chat_server,
    record_running,
    remove_record,
    state_dir,
)
from ore_core.config import OreSettings
from ore_openai.testing import MockOpenAIServer
from tests.cli.conftest import ore


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-openai,ore-conduit-stdin")


# --- one line per failure -----------------------------------------------------------


def test_an_unwritable_path_says_which_and_what_to_do() -> None:
    line = one_line(PermissionError(errno.EACCES, "Permission denied", "/var/lib/ore"))
    assert line.startswith("cannot write /var/lib/ore: permission denied; ")
    assert "XDG_STATE_HOME" in line


def test_an_address_in_use_names_the_port_and_the_options() -> None:
    error = OSError(
        errno.EADDRINUSE,
        "error while attempting to bind on address ('127.0.0.1', 8080): address already in use",
    )
    assert one_line(error) == (
        "cannot listen on 127.0.0.1:8080: another process uses it; choose another port "
        "(--port, --health-port) or stop that process"
    )


def test_an_unexpected_error_says_how_to_see_the_traceback() -> None:
    assert one_line(ExceptionGroup("x", [KeyError("k")])) == (
        "unexpected KeyError: 'k' (run with --debug (or ORE_DEBUG=1) to see the traceback)"
    )


def test_ore_errors_are_flattened_to_one_line() -> None:
    assert one_line(ThreadNotFound("thread t\nnot found")) == "thread t not found"


# --- one processor choice -----------------------------------------------------------


def test_config_shows_the_processor_serve_and_chat_would_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    result = ore("config")
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("processor.name")]
    assert row.split() == ["processor.name", "openai", "auto:", "OPENAI_API_KEY", "is", "set"]


def test_echo_chosen_explicitly_says_so() -> None:
    choice = choose_processor(
        OreSettings(processor={"name": "echo"}), ["echo", "openai"], {"OPENAI_API_KEY": "k"}
    )
    # OreSettings(...) arguments are not a "source" the way the file and env are: default.
    assert answering_line("echo", "echo", choice).startswith("answering with echo: ")


# --- where the parts find each other ---------------------------------------------------


def test_a_record_of_a_dead_process_is_ignored_and_removed() -> None:
    record_running(RunningCore(pid=2**22 + 12345, nats_url="nats://127.0.0.1:1", store="x"))
    assert find_running() is None
    assert not (state_dir() / "serve.d" / f"{2**22 + 12345}.json").exists()


def test_a_record_is_removed_only_by_its_own_process() -> None:
    mine = RunningCore(pid=os.getpid(), nats_url="nats://127.0.0.1:1", store="sqlite:/x")
    record_running(mine)
    remove_record(os.getpid() + 1)
    assert find_running() == mine
    remove_record(os.getpid())
    assert find_running() is None


def test_the_default_port_is_used_only_when_it_is_free() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # taken: any free port instead
        assert serve_module._embedded_port(None, default=port) is None
    assert serve_module._embedded_port(None, default=port) == port  # free again
    assert serve_module._embedded_port(0) is None
    assert serve_module._embedded_port(5555) == 5555


def test_conduit_without_a_url_or_a_running_serve_says_to_start_one() -> None:
    result = ore("conduit", "stdin")
    assert result.exit_code == 1
    assert "no running `ore serve` recorded; start `ore serve`" in result.output


# --- ore doctor -------------------------------------------------------------------------


def doctor_checks(*args: str) -> tuple[int, dict[str, dict[str, str]]]:
    result = ore("doctor", "--json", *args)
    return result.exit_code, {check["part"]: check for check in json.loads(result.stdout)}


def test_doctor_reports_every_part_and_passes_on_a_fresh_setup() -> None:
    code, checks = doctor_checks()
    assert code == 0
    assert list(checks)[:5] == ["config file", "settings", "state directory", "store", "processor"]
    assert checks["store"]["status"] == "ok"
    assert checks["processor"]["status"] == "warn"  # echo, and what to set
    assert "OPENAI_API_KEY" in checks["processor"]["found"]
    assert checks["running core"]["found"].startswith("none recorded")


def test_doctor_names_the_model_the_environment_configures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__MODEL", "llama3.2")
    with MockOpenAIServer(models=["llama3.2"]) as model:  # doctor asks it for its models
        monkeypatch.setenv("ORE_OPENAI_BASE_URL", model.base_url)
        _, checks = doctor_checks()
    assert checks["processor"] == {
        "part": "processor",
        "status": "ok",
        "found": "openai model llama3.2 (auto: ORE_OPENAI_BASE_URL is set)",
        "todo": "",
    }


def test_doctor_fails_on_an_unreadable_store_and_says_what_to_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ORE_STORE__PATH", str(blocker / "threads.db"))
    code, checks = doctor_checks()
    assert code == 1
    assert checks["store"]["status"] == "FAIL"
    assert "store.path" in checks["store"]["todo"]


def test_doctor_fails_on_a_recorded_core_whose_nats_does_not_answer() -> None:
    with socket.socket() as silent:  # bound, never listening: connections are refused
        silent.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{silent.getsockname()[1]}"
        record_running(RunningCore(pid=os.getpid(), nats_url=url, store="sqlite:/x"))
        code, checks = doctor_checks()
    assert code == 1
    assert checks["running core"]["status"] == "FAIL"
    assert checks["running core"]["todo"] == (
        f"stop process {os.getpid()} and start `ore serve` again"
    )


def test_doctor_lists_what_killed_chats_left_behind(tmp_path: Path) -> None:
    left = tmp_path / "ore-chat-nats-left"
    left.mkdir()
    record_chat_server(ChatServer(owner=2**22 + 4321, server=2**22 + 4322, directory=str(left)))
    _, checks = doctor_checks()
    assert checks["killed chats"]["status"] == "warn"
    assert str(left) in checks["killed chats"]["found"]
    assert left.exists()  # doctor changes nothing


def test_threads_reads_the_store_of_the_running_serve(tmp_path: Path) -> None:
    served = tmp_path / "served.db"
    record_running(
        RunningCore(pid=os.getpid(), nats_url="nats://127.0.0.1:1", store=f"sqlite:{served}")
    )
    result = ore("threads", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"No threads in sqlite:{served}.\n"
