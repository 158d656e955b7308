"""`ore serve` as a real process: protocol.md over a real nats-server, embedded default, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ore_core.bus.server.embedded import EmbeddedNatsServer, data_dir_holder, runs_in
from ore_core.cli.running import RunningCore, find_running
from ore_core.conduit import ConduitClient
from ore_core.session.stores import SQLiteStore
from ore_core.subjects import partition_of
from ore_openai.testing import MockOpenAIServer
from tests.bus.server.test_nats_sync import INTERVAL_LINE, OPERATOR_R1_LINE, jetstream_config
from tests.ore_process import EXIT_TIMEOUT, ORE, READY_TIMEOUT

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it


@dataclass
class Served:
    """A running `ore serve` process and where its threads are stored."""

    process: subprocess.Popen[str]
    store_path: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    async def terminate(self) -> int:
        """SIGTERM, then the exit status (waited for off the event loop)."""
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, EXIT_TIMEOUT)


@pytest.fixture
def start_serve(ore_isolated_env: Path, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """`start_serve(*args)` runs `ore serve *args`; every process is gone after the test."""
    started: list[Served] = []

    def start(*args: str, config: Path | None = None, env: dict[str, str] | None = None) -> Served:
        index = len(started)
        store_path = tmp_path / f"serve{index}.db"
        stderr_path = tmp_path / f"serve{index}.log"
        environment = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "",  # no test plugins from the venv
            "ORE_STORE__PATH": str(store_path),
            "ORE_LOG__FORMAT": "json",
            **(env or {}),
        }
        # Never the fixed default port 4222 in a test: any free port.
        port = [] if "--nats" in args or "--port" in args else ["--port", "0"]
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [str(ORE), *(["--config", str(config)] if config else []), "serve", *port, *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=environment,
            )
        served = Served(process, store_path, stderr_path)
        started.append(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait()
        if served.process.stdout is not None:
            served.process.stdout.close()


@pytest.fixture
async def client_of() -> AsyncIterator[Callable[[str], Any]]:
    """`await client_of(url)`: a nats-py connection closed after the test."""
    clients: list[Client] = []

    async def connect(url: str) -> Client:
        clients.append(await nats.connect(url, max_reconnect_attempts=0))
        return clients[-1]

    yield connect
    for client in clients:
        await client.close()


async def wait_until_serving(nc: Client, served: Served) -> dict[str, Any]:
    """Poll the control API's health endpoint until the core answers (it is the last to start).

    The core has no way to announce readiness to another process, so this polls, and
    fails early with the core's log if the process died.
    """
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            reply = await nc.request("ore.admin.health", b"{}", timeout=0.5)
            answer: dict[str, Any] = json.loads(reply.data)
            return answer
        except (NoRespondersError, NatsTimeout):
            if served.process.poll() is not None:
                pytest.fail(
                    f"ore serve exited with {served.process.returncode}:\n{served.stderr()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"ore serve did not answer within {READY_TIMEOUT}s:\n{served.stderr()}")
            await asyncio.sleep(0.05)


async def converse(nc: Client, thread_id: str, text: str, wait: float = 10) -> list[dict[str, Any]]:
    """Send one user message as protocol.md's raw client does; the events until `done`."""
    events: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def on_event(msg: Any) -> None:
        message = json.loads(msg.data)
        for event in message["events"] if message["kind"] == "batch" else [message]:
            events.append(event)
            if event["kind"] == "lifecycle" and event["phase"] == "done":
                done.set()

    await nc.subscribe(f"ore.out.raw.{thread_id}", cb=on_event)
    message = {"kind": "user_message", "id": uuid.uuid4().hex, "content": text}
    await nc.jetstream().publish(
        f"ore.in.raw.{thread_id}",
        json.dumps(message).encode(),
        headers={"Nats-Msg-Id": message["id"]},
    )
    await asyncio.wait_for(done.wait(), wait)
    return events


async def stored_turn_texts(store_path: Path, thread_id: str) -> list[tuple[str, str]]:
    store = SQLiteStore(store_path)
    try:
        thread = await store.get(thread_id)
    finally:
        await store.close()
    return [(str(t.role), t.artifacts[0].to_dict()["content"]) for t in thread.turns()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- against a given nats-server ---------------------------------------------------


async def test_serve_answers_a_raw_nats_client_as_protocol_md_describes(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    served = start_serve("--nats", ore_nats_server.url)
    nc = await client_of(ore_nats_server.url)
    await wait_until_serving(nc, served)
    events = await converse(nc, "raw-1", "hello core")
    stored = [e for e in events if e["kind"] != "text_delta"]
    # Live events as they happen, then the turn's stored batch (protocol.md "Batches").
    assert [(e["kind"], e.get("phase") or e.get("turn", {}).get("role")) for e in stored] == [
        ("lifecycle", "submitted"),
        ("lifecycle", "streaming"),
        ("turn_complete", "user"),
        ("text", None),
        ("turn_complete", "assistant"),
        ("lifecycle", "done"),
    ]
    assert [e["content"] for e in stored if e["kind"] == "text"] == ["hello core"]
    assert await served.terminate() == 0


async def test_sigterm_exits_0_with_the_conversation_in_the_configured_store(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    served = start_serve("--nats", ore_nats_server.url)
    nc = await client_of(ore_nats_server.url)
    await wait_until_serving(nc, served)
    await converse(nc, "kept", "remember me")
    assert await served.terminate() == 0
    assert await stored_turn_texts(served.store_path, "kept") == [
        ("user", "remember me"),
        ("assistant", "remember me"),
    ]


async def test_health_port_answers_readyz_while_serving(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    port = free_port()
    served = start_serve("--nats", ore_nats_server.url, "--health-port", str(port))
    await wait_until_serving(await client_of(ore_nats_server.url), served)
    url = f"http://127.0.0.1:{port}/readyz"
    status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).status)
    assert status == 200
    assert await served.terminate() == 0


async def test_health_port_prints_the_health_urls(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served]
) -> None:
    port = free_port()
    served = start_serve("--nats", ore_nats_server.url, "--health-port", str(port))
    lines = await read_until(served, "health: ")
    url = f"http://127.0.0.1:{port}"
    assert lines[-1] == f"health: {url}/healthz and {url}/readyz; metrics: {url}/metrics"
    assert await served.terminate() == 0


async def test_partitions_option_sets_the_ingress_partitions(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    served = start_serve("--nats", ore_nats_server.url, "--partitions", "2")
    nc = await client_of(ore_nats_server.url)
    await wait_until_serving(nc, served)
    consumers = await nc.jetstream().consumers_info("ORE_IN")
    assert sorted(info.name for info in consumers) == ["ore-core-p0", "ore-core-p1"]
    assert await served.terminate() == 0


async def test_a_new_deployment_without_a_configured_count_gets_eight_partitions(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    served = start_serve("--nats", ore_nats_server.url)
    nc = await client_of(ore_nats_server.url)
    await wait_until_serving(nc, served)
    consumers = await nc.jetstream().consumers_info("ORE_IN")
    assert sorted(info.name for info in consumers) == [f"ore-core-p{k}" for k in range(8)]
    assert await served.terminate() == 0


async def test_an_upgrade_without_a_configured_count_keeps_the_deployments_count(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    """A deployment made with another count (32 was the default) starts and answers on
    every one of its partitions, instead of refusing because the default changed."""
    nc = await client_of(ore_nats_server.url)
    made = start_serve("--nats", ore_nats_server.url, "--partitions", "4")
    await wait_until_serving(nc, made)
    assert await made.terminate() == 0

    served = start_serve("--nats", ore_nats_server.url)
    await wait_until_serving(nc, served)
    # One thread per partition: each partition's consumer must be pulled by this worker.
    threads: dict[int, str] = {}
    for n in range(1000):
        threads.setdefault(partition_of(f"t{n}", 4), f"t{n}")
        if len(threads) == 4:
            break
    for thread_id in threads.values():
        events = await converse(nc, thread_id, f"hello {thread_id}")
        assert [e["content"] for e in events if e["kind"] == "text"] == [f"hello {thread_id}"]
    consumers = await nc.jetstream().consumers_info("ORE_IN")
    assert sorted(info.name for info in consumers) == [f"ore-core-p{k}" for k in range(4)]
    logged = [json.loads(line) for line in served.stderr().splitlines() if line.startswith("{")]
    assert [e["partitions"] for e in logged if e["event"] == "ore core serving"] == [4]
    assert await served.terminate() == 0


async def test_a_configured_count_other_than_the_deployments_is_refused_with_the_way_out(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc = await client_of(ore_nats_server.url)
    made = start_serve("--nats", ore_nats_server.url, "--partitions", "4")
    await wait_until_serving(nc, made)
    assert await made.terminate() == 0

    refused = start_serve("--nats", ore_nats_server.url, env={"ORE_NATS__PARTITIONS": "8"})
    assert await asyncio.to_thread(refused.process.wait, EXIT_TIMEOUT) == 1
    assert "partition count is 4, configured 8" in refused.stderr()
    assert "ore migrate" in refused.stderr()


def test_partitions_that_are_not_a_power_of_two_are_a_usage_error(
    start_serve: Callable[..., Served],
) -> None:
    served = start_serve("--nats", "nats://127.0.0.1:1", "--partitions", "3")
    assert served.process.wait(EXIT_TIMEOUT) == 2
    assert "--partitions" in served.stderr()
    assert "power of two" in served.stderr()


# --- embedded default --------------------------------------------------------------


async def test_without_a_url_serve_starts_an_embedded_server_and_prints_its_url(
    start_serve: Callable[..., Served], client_of: Any, ore_isolated_env: Path
) -> None:
    served = start_serve()
    assert served.process.stdout is not None
    line = await asyncio.to_thread(served.process.stdout.readline)
    assert line.startswith("Embedded NATS server listening on nats://127.0.0.1:"), served.stderr()
    url = line.split()[5]
    assert str(ore_isolated_env / "state") in line  # its data lives in the user state dir
    nc = await client_of(url)
    await wait_until_serving(nc, served)
    events = await converse(nc, "embedded", "hi")
    assert events[-1] == {"kind": "lifecycle", "phase": "done", "context": {"provenance": "raw"}}
    await nc.close()
    assert await served.terminate() == 0
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # stopped with the core


async def test_serve_says_the_embedded_servers_durability_and_the_server_runs_with_it(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    served = start_serve(env={"ORE_NATS__SYNC": "interval:10s"})
    lines = await read_until(served, "Durability: ")
    assert lines[-1] == f"Durability: {INTERVAL_LINE}"
    store_dir = ore_isolated_env / "state" / "ore" / "nats"
    config = jetstream_config(monitor_url_of(store_dir))
    assert "sync_always" not in config
    assert config["sync_interval"] == 10_000_000_000
    await read_until(served, "ore core ready: NATS ")
    assert await served.terminate() == 0


async def test_serve_on_an_operators_server_says_what_its_replicas_mean(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served]
) -> None:
    served = start_serve("--nats", ore_nats_server.url)
    lines = await read_until(served, "Durability: ")
    assert lines[-1] == f"Durability: {OPERATOR_R1_LINE}"
    await read_until(served, "ore core ready: NATS ")
    assert await served.terminate() == 0


def monitor_url_of(store_dir: Path) -> str:
    """The monitoring URL in the ports file the embedded server wrote in `store_dir`."""
    (ports_file,) = store_dir.glob("*.ports")
    return str(json.loads(ports_file.read_text())["monitoring"][0])


# --- the processor, the known address, one-line errors -------------------------------


async def read_until(served: Served, prefix: str) -> list[str]:
    """stdout lines of `ore serve` up to the first one starting with `prefix`."""
    assert served.process.stdout is not None
    lines: list[str] = []
    while not (lines and lines[-1].startswith(prefix)):
        line = await asyncio.wait_for(
            asyncio.to_thread(served.process.stdout.readline), READY_TIMEOUT
        )
        if not line:
            pytest.fail(f"ore serve ended before printing {prefix!r}:\n{served.stderr()}")
        lines.append(line.rstrip("\n"))
    return lines


def recorded(state: Path, pid: int) -> dict[str, Any] | None:
    path = state / "ore" / "serve.d" / f"{pid}.json"
    return json.loads(path.read_text()) if path.exists() else None


async def test_serve_prints_and_records_its_nats_url_until_it_stops(
    start_serve: Callable[..., Served], client_of: Any, ore_isolated_env: Path
) -> None:
    served = start_serve()
    lines = await read_until(served, "ore core ready: NATS ")
    url = lines[-1].split()[4]
    record = recorded(ore_isolated_env / "state", served.process.pid)
    assert record is not None
    assert record.pop("processor").startswith("echo: ")  # as "answering with ..." says
    assert record == {
        "pid": served.process.pid,
        "nats_url": url,
        "store": f"sqlite:{served.store_path}",
    }
    await wait_until_serving(await client_of(url), served)  # the recorded URL answers
    assert await served.terminate() == 0
    assert recorded(ore_isolated_env / "state", served.process.pid) is None


async def test_a_second_worker_that_stops_leaves_the_first_one_s_record(
    start_serve: Callable[..., Served], client_of: Any, ore_isolated_env: Path
) -> None:
    first = start_serve()
    url = (await read_until(first, "ore core ready: NATS "))[-1].split()[4]
    second = start_serve("--nats", url)  # a worker of the same deployment
    await read_until(second, "ore core ready: NATS ")
    state = ore_isolated_env / "state"
    assert recorded(state, first.process.pid) is not None
    assert recorded(state, second.process.pid) is not None
    assert await second.terminate() == 0
    assert recorded(state, second.process.pid) is None
    assert find_running() == RunningCore(**(recorded(state, first.process.pid) or {}))
    assert find_running() is not None  # `ore chat` attaches to it, not an echo core of its own
    assert await first.terminate() == 0
    assert find_running() is None


async def test_a_worker_answering_with_another_processor_than_its_deployment_warns(
    start_serve: Callable[..., Served],
) -> None:
    first = start_serve()  # echo
    url = (await read_until(first, "ore core ready: NATS "))[-1].split()[4]
    with MockOpenAIServer(["Hello from the model."]) as model:
        second = start_serve(
            "--nats",
            url,
            env={"ORE_LOAD_PLUGINS": "ore-openai", "ORE_OPENAI_BASE_URL": model.base_url},
        )
        await read_until(second, "ore core ready: NATS ")
    assert await second.terminate() == 0
    warning = f"warning: ore serve (pid {first.process.pid}) at {url}"
    assert warning in second.stderr()
    assert "answers with echo: " in second.stderr()
    assert "this worker with openai" in second.stderr()


async def test_serve_answers_with_the_model_the_environment_configures(
    start_serve: Callable[..., Served], client_of: Any
) -> None:
    with MockOpenAIServer(["Hello from the model."]) as model:
        served = start_serve(
            env={"ORE_LOAD_PLUGINS": "ore-openai", "ORE_OPENAI_BASE_URL": model.base_url}
        )
        lines = await read_until(served, "ore core ready: NATS ")
        assert f"answering with openai model gpt-4o-mini at {model.base_url}" in lines
        nc = await client_of(lines[-1].split()[4])
        await wait_until_serving(nc, served)
        events = await converse(nc, "modelled", "hi")
        assert [e["content"] for e in events if e["kind"] == "text"] == ["Hello from the model."]
    assert await served.terminate() == 0


async def test_serve_says_the_guards_limits_on_its_start_up_line(
    start_serve: Callable[..., Served],
) -> None:
    served = start_serve(env={"ORE_LOAD_PLUGINS": "ore-guard"})
    lines = await read_until(served, "ore core ready: NATS ")
    [answering] = [line for line in lines if line.startswith("answering with ")]
    assert "; guard: per sender 20 at once, then 60 per 60 s; " in answering
    assert await served.terminate() == 0


async def test_serve_without_a_model_says_echo_answers_and_what_to_set(
    start_serve: Callable[..., Served],
) -> None:
    served = start_serve(env={"ORE_LOAD_PLUGINS": "ore-openai"})
    lines = await read_until(served, "ore core ready: NATS ")
    assert (
        "answering with echo: no model configured, set OPENAI_API_KEY or ORE_OPENAI_BASE_URL "
        "(e.g. ORE_OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama)"
    ) in lines
    assert await served.terminate() == 0


async def chat_beside(served: Served, text: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`ore chat TEXT` on the store of the running `served` (so it uses that core)."""
    return await asyncio.to_thread(
        subprocess.run,
        [str(ORE), "chat", text],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "ORE_LOAD_PLUGINS": "ore-conduit-stdin",
            "ORE_STORE__PATH": str(served.store_path),
            **env,
        },
        timeout=EXIT_TIMEOUT,
        check=False,
    )


async def test_chat_uses_the_running_core_on_the_same_store(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    served = start_serve()
    lines = await read_until(served, "ore core ready: NATS ")
    url = lines[-1].split()[4]
    [answering] = [line for line in lines if line.startswith("answering with ")]
    chat = await chat_beside(served, "hello running core")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "hello running core\n"
    assert chat.stderr.splitlines() == [
        f"Using ore serve (pid {served.process.pid}) at {url}, store sqlite:{served.store_path}"
        f"; {answering}"
    ]  # who answers is the serve's processor: no core of its own, no private nats-server
    assert await served.terminate() == 0
    store = SQLiteStore(served.store_path)
    try:
        (thread,) = await store.list()
    finally:
        await store.close()
    assert [str(turn.role) for turn in thread.turns()] == ["user", "assistant"]


async def test_a_model_key_set_for_a_chat_next_to_an_echo_serve_is_said_unused(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    served = start_serve()
    await read_until(served, "ore core ready: NATS ")
    chat = await chat_beside(served, "hello", OPENAI_API_KEY="sk-x")
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.splitlines()[1] == (
        f"OPENAI_API_KEY is set here, but the core that answers is ore serve (pid "
        f"{served.process.pid}), with echo: set it where `ore serve` runs, or type /model "
        "NAME in the chat"
    )
    assert await served.terminate() == 0


async def test_a_second_serve_on_the_same_store_is_refused_naming_the_first(
    start_serve: Callable[..., Served],
) -> None:
    first = start_serve()
    await read_until(first, "ore core ready: NATS ")
    second = start_serve("--port", "0", env={"ORE_STORE__PATH": str(first.store_path)})
    assert await asyncio.to_thread(second.process.wait, EXIT_TIMEOUT) == 1
    assert (
        second.stderr()
        .splitlines()[-1]
        .startswith(f"Error: ore serve (pid {first.process.pid}) at nats://127.0.0.1:")
    )
    assert await first.terminate() == 0


def test_a_gateway_endpoint_of_another_form_than_its_conduit_s_stops_the_start(
    start_serve: Callable[..., Served], tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[[gateway]]\nname = "support"\n'
        '[[gateway.endpoints]]\nconduit = "nats"\nkey = "room"\n'
        '[[gateway.endpoints]]\nconduit = "slack"\nkey = "C0123/1712.0001"\n'
    )
    served = start_serve(
        config=config, env={"ORE_LOAD_PLUGINS": "ore-conduit-nats,ore-conduit-slack"}
    )
    assert served.process.wait(EXIT_TIMEOUT) == 1
    errors = [line for line in served.stderr().splitlines() if not line.startswith("{")]
    assert errors == [
        "Error: gateway 'support': endpoint slack:C0123/1712.0001 is not a slack "
        "conversation: write slack:ENTERPRISE:TEAM:CHANNEL:THREAD_TS (e.g. "
        "slack:-:T0123:C0123:1712.0001), the slack conduit's slack.thread"
    ]
    assert served.process.stdout is not None
    assert "Embedded NATS server" not in served.process.stdout.read()  # nothing started


async def test_the_bridging_walk_through_sends_with_ore_send_and_attaches_to_that_thread(
    start_serve: Callable[..., Served],
) -> None:
    plugins = {"ORE_LOAD_PLUGINS": "ore-conduit-nats,ore-conduit-stdin"}
    served = start_serve(env=plugins)
    await read_until(served, "ore core ready: NATS ")
    env = {**os.environ, **plugins, "ORE_STORE__PATH": str(served.store_path)}

    def ore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ORE), *args],
            input="",
            capture_output=True,
            text=True,
            env=env,
            timeout=EXIT_TIMEOUT,
            check=False,
        )

    sent = await asyncio.to_thread(ore, "send", "nats:room", "hi", "--name", "Bo")
    assert sent.returncode == 0, sent.stderr
    thread = sent.stdout.split()[3]
    assert sent.stdout == f"sent to thread {thread} as nats:room\n"
    attached = await asyncio.to_thread(ore, "chat", "--attach", "nats:room")
    assert attached.returncode == 0, attached.stderr
    assert f"Attached to thread {thread} (nats)" in attached.stderr
    assert await served.terminate() == 0


def test_a_health_port_in_use_is_one_error_line(start_serve: Callable[..., Served]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        served = start_serve("--health-port", str(port))
        assert served.process.wait(EXIT_TIMEOUT) == 1
    errors = [line for line in served.stderr().splitlines() if not line.startswith("{")]
    assert errors == [
        f"Error: cannot listen on 127.0.0.1:{port}: another process uses it; choose another "
        "port (--port, --health-port) or stop that process"
    ]


def test_a_state_directory_that_cannot_be_written_is_one_error_line(
    start_serve: Callable[..., Served], tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    served = start_serve(env={"XDG_STATE_HOME": str(blocker / "state")})
    assert served.process.wait(EXIT_TIMEOUT) == 1
    (line,) = served.stderr().splitlines()
    assert line.startswith(f"Error: cannot write {blocker}")
    assert "XDG_STATE_HOME" in line


def test_debug_shows_the_traceback(start_serve: Callable[..., Served], tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    served = start_serve(env={"XDG_STATE_HOME": str(blocker / "state"), "ORE_DEBUG": "1"})
    assert served.process.wait(EXIT_TIMEOUT) == 1
    assert "Traceback (most recent call last)" in served.stderr()


async def test_a_crashed_loop_stops_serve_with_status_1_and_names_the_task(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    # ore-test-plugin crashes the ingress ack loop at its first acknowledgement.
    served = start_serve(
        "--nats",
        ore_nats_server.url,
        env={"ORE_LOAD_PLUGINS": "ore-test-plugin", "ORE_TEST_CRASH": "ingress-ack"},
    )
    nc = await client_of(ore_nats_server.url)
    await wait_until_serving(nc, served)
    await converse(nc, "crash-1", "the answer comes, its acknowledgement crashes")
    # No signal: the process stops by itself.
    status = await asyncio.to_thread(served.process.wait, EXIT_TIMEOUT)
    assert status == 1, served.stderr()
    lines = [json.loads(line) for line in served.stderr().splitlines() if line.startswith("{")]
    crashed = [line for line in lines if line["event"] == "background task crashed"]
    assert [(line["task"], line["level"]) for line in crashed] == [("ore-ingress-ack", "error")]
    assert "injected crash of the ingress ack loop" in json.dumps(crashed[0]["exception"])
    assert any(line["event"] == "ore core stopped" for line in lines)
    # The turn finished before the crash: its ack was sent on the way out, and it is stored.
    consumers = await nc.jetstream().consumers_info("ORE_IN")
    assert [(c.num_ack_pending, c.num_pending) for c in consumers if c.delivered.stream_seq] == [
        (0, 0)
    ]
    assert await stored_turn_texts(served.store_path, "crash-1") == [
        ("user", "the answer comes, its acknowledgement crashes"),
        ("assistant", "the answer comes, its acknowledgement crashes"),
    ]


# --- SIGHUP, kill -9 and the embedded server's data directory (issue 28) ----------------


def nats_dir_of(home: Path) -> Path:
    return home / "state" / "ore" / "nats"


async def until_gone(pid: int, directory: Path) -> None:
    """Until process `pid` no longer runs on `directory` (bounded: a hang fails)."""
    async with asyncio.timeout(EXIT_TIMEOUT):
        while runs_in(pid, str(directory)):  # noqa: ASYNC110 (another process: nothing to await)
            await asyncio.sleep(0.05)


async def test_sighup_stops_serve_like_sigterm_and_its_nats_server_with_it(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    served = start_serve()
    await read_until(served, "ore core ready: NATS ")
    holder = data_dir_holder(nats_dir_of(ore_isolated_env))
    assert holder is not None
    assert holder.owner == served.process.pid
    served.process.send_signal(signal.SIGHUP)  # the terminal closed
    assert await asyncio.to_thread(served.process.wait, EXIT_TIMEOUT) == 0
    assert not runs_in(holder.server, str(nats_dir_of(ore_isolated_env)))


async def test_kill_9_of_serve_takes_its_nats_server_along_and_the_next_serve_starts_cleanly(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    directory = nats_dir_of(ore_isolated_env)
    first = start_serve()
    await read_until(first, "ore core ready: NATS ")
    holder = data_dir_holder(directory)
    assert holder is not None
    first.process.kill()
    await asyncio.to_thread(first.process.wait, EXIT_TIMEOUT)
    await until_gone(holder.server, directory)  # it died with its parent

    second = start_serve()
    await read_until(second, "ore core ready: NATS ")
    again = data_dir_holder(directory)
    assert again is not None
    assert again.owner == second.process.pid
    assert "orphaned" not in second.stderr()  # nothing was left to stop
    assert await second.terminate() == 0


async def test_serve_stops_an_orphaned_nats_server_of_its_data_dir_that_doctor_reports(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    directory = nats_dir_of(ore_isolated_env)
    # A server whose starter died by SIGKILL without taking it along (an older ore, or
    # a system without PR_SET_PDEATHSIG): it keeps the data directory.
    starter = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
        [sys.executable, "-c", ORPHAN_STARTER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert starter.stdout is not None
    orphan = int(await asyncio.to_thread(starter.stdout.readline))
    starter.kill()
    await asyncio.to_thread(starter.wait, EXIT_TIMEOUT)
    starter.stdout.close()
    assert runs_in(orphan, str(directory))
    doctor = await asyncio.to_thread(
        subprocess.run,
        [str(ORE), "doctor", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "ORE_LOAD_PLUGINS": ""},
    )
    found = {check["part"]: check for check in json.loads(doctor.stdout)}["embedded NATS"]
    assert found["status"] == "warn"
    assert f"nats-server (pid {orphan}) still runs on {directory}" in found["found"]

    served = start_serve()
    await read_until(served, "ore core ready: NATS ")
    assert not runs_in(orphan, str(directory))
    assert "stopping an orphaned nats-server" in served.stderr()
    assert await served.terminate() == 0


async def test_a_second_embedded_serve_never_opens_the_data_dir_of_a_running_one(
    start_serve: Callable[..., Served], ore_isolated_env: Path
) -> None:
    first = start_serve()
    await read_until(first, "ore core ready: NATS ")
    second = start_serve()  # another store, the same state directory: the same NATS data
    assert await asyncio.to_thread(second.process.wait, EXIT_TIMEOUT) != 0
    directory = nats_dir_of(ore_isolated_env)
    assert f"the NATS data directory {directory} is in use by nats-server" in second.stderr()
    holder = data_dir_holder(directory)
    assert holder is not None
    assert holder.owner == first.process.pid
    assert await first.terminate() == 0


ORPHAN_STARTER = """
import sys, time
from ore_core.conduit import ConduitClient
from ore_core.bus.server.embedded import EmbeddedNatsServer, data_dir_holder, runs_in
server = EmbeddedNatsServer(sys.argv[1])
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


async def test_the_control_api_lists_the_models_the_processor_s_server_offers(
    start_serve: Callable[..., Served], client_of: Any
) -> None:
    with MockOpenAIServer(models=("small-1", "big-2")) as model:
        served = start_serve(
            env={
                "ORE_LOAD_PLUGINS": "ore-openai",
                "ORE_OPENAI_BASE_URL": model.base_url,
                "ORE_PROCESSOR__MODEL": "big-2",
            }
        )
        lines = await read_until(served, "ore core ready: NATS ")
        client = await ConduitClient.connect([lines[-1].split()[4]], name="picker", namespace="raw")
        try:
            offer = await client.models()
            await client.models()  # answered from the worker's short cache
        finally:
            await client.close()
        listed = [r.path for r in model.recorded]
    assert offer == {"processor": "openai", "model": "big-2", "models": ["big-2", "small-1"]}
    assert listed == ["/v1/models"]
    assert await served.terminate() == 0


async def test_the_control_api_says_echo_offers_no_models(
    start_serve: Callable[..., Served],
) -> None:
    served = start_serve()
    lines = await read_until(served, "ore core ready: NATS ")
    client = await ConduitClient.connect([lines[-1].split()[4]], name="picker", namespace="raw")
    try:
        offer = await client.models()
    finally:
        await client.close()
    assert offer == {"processor": "echo", "model": None, "models": []}
    assert await served.terminate() == 0
