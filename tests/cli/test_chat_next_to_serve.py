"""`ore chat` next to a running `ore serve` on the same SQLite store never forks a thread.

Both are real processes with a core each (chat runs its own core on a private NATS),
writing one thread at the same time: serve gets messages over its NATS, chat gets
lines on its stdin. Compare-and-set saves make the loser of every race reload and
answer again; in the end the thread is one line of conversation with every message
answered exactly once. (A message whose answer lost a race after newer turns were
stored is asked again at the end of the thread and answered there, so its user turn
may appear twice; its answer never does.)
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import nats
import pytest

from ore_core import Role, Text, Thread
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.session.stores import SQLiteStore
from tests.bus import raw
from tests.ore_process import ORE

pytest.importorskip("ore_conduit_stdin")

TIMEOUT = 90.0
ROUNDS = 8


def _env(tmp_path: Path, store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ORE_", "OPENAI_"))}
    home = tmp_path / "home"
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_STATE_HOME=str(home / "state"),
        TMPDIR=str(tmp_path / "tmp"),
        ORE_LOAD_PLUGINS="ore-conduit-stdin",
        ORE_STORE__PATH=str(store),
        ORE_PROCESSOR__DELAY="0.2",
        ORE_LOG__FORMAT="json",
    )
    return env


async def test_chat_and_serve_on_one_store_answer_everything_without_forking(
    ore_nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    store_path = tmp_path / "threads.db"
    env = _env(tmp_path, store_path)
    with (tmp_path / "serve.log").open("wb") as log:
        serve = await asyncio.create_subprocess_exec(
            str(ORE),
            "serve",
            "--nats",
            ore_nats_server.url,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
    chat: asyncio.subprocess.Process | None = None
    expected = {Text(f"{who} {n}") for who in ("serve", "chat") for n in range(ROUNDS)}
    nc = await nats.connect(ore_nats_server.url)
    try:
        await raw.until_core_answers(nc, TIMEOUT)
        # A chat that finds the running serve's record uses that core (issue 14); this
        # test is about two cores on one store, so the chat looks in a state dir of its own.
        chat = await asyncio.create_subprocess_exec(
            str(ORE),
            "chat",
            "--thread",
            "shared",
            "--new",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**env, "XDG_STATE_HOME": str(tmp_path / "home" / "chat-state")},
        )
        assert chat.stdin is not None
        assert chat.stdout is not None
        # Both cores hold the thread before the race starts.
        chat.stdin.write(b"chat 0\n")
        await chat.stdin.drain()
        first = await asyncio.wait_for(chat.stdout.readline(), TIMEOUT)
        js = nc.jetstream()
        for n in range(ROUNDS):
            body = {"kind": "user_message", "id": uuid.uuid4().hex, "content": f"serve {n}"}
            # local `ore chat` runs the stdin conduit: the thread is namespace stdin's
            await js.publish("ore.in.stdin.shared", json.dumps(body).encode())
            if n:
                chat.stdin.write(f"chat {n}\n".encode())
                await chat.stdin.drain()
        chat.stdin.close()
        rest, _ = await asyncio.wait_for(chat.communicate(), TIMEOUT)
        chat_out = first + rest
        thread = await _answered(store_path, expected)
    finally:
        await nc.close()
        for process in (serve, chat):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()

    assert chat.returncode == 0
    # Every line answered, in order (an answer that lost a race may be shown again).
    lines = chat_out.decode().splitlines()
    assert [line for n, line in enumerate(lines) if line not in lines[:n]] == [
        f"chat {n}" for n in range(ROUNDS)
    ]
    path = thread.turns()
    assert len(thread.all_turns()) == len(path)  # one line: no fork, no branch
    answers = [t.artifacts[0] for t in path if t.role == Role.ASSISTANT]
    assert sorted(answers, key=str) == sorted(expected, key=str)  # each answered once
    assert {t.artifacts[0] for t in path if t.role == Role.USER} == expected


async def _answered(store_path: Path, expected: set[Text]) -> Thread:
    """The stored thread once every expected message has an answer (polled: the two
    cores share no event stream the test could wait on)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            store = SQLiteStore(store_path)
            try:
                thread = await store.get("shared")
            finally:
                await store.close()
            answers = {t.artifacts[0] for t in thread.turns() if t.role == Role.ASSISTANT}
            if answers >= expected:
                return thread
            await asyncio.sleep(0.2)
