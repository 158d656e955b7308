"""`ore chat --attach CONDUIT:KEY` (issue 29): the terminal joins a platform
conversation's thread, and what is typed there shows on the platform with its label.
`ore chat` is a real process; the core and the platform's conduit client are real."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Awaitable, Callable

import pexpect
import pytest

from ore_core import TurnProcessor
from ore_core.conduit import ConduitClient, ControlClient, SettingsCache, classify
from ore_core.events import LifecycleEvent
from ore_core.session.echo import EchoProcessor

RunChat = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.slow


async def test_a_terminal_attached_to_a_conversation_shows_there_with_its_label(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    run_chat: RunChat,
) -> None:
    await start_core(EchoProcessor())
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-conduit-nats", "USER": "ana"}
    async with await ConduitClient.connect(ore_nats_url, name="nats") as platform:
        thread, _ = await platform.lookup_or_create("nats.channel", "room")
        async with platform.events(thread) as feed:
            done = await asyncio.to_thread(
                run_chat,
                "--attach",
                "nats:room",
                "--nats",
                ore_nats_url,
                input="hello from the terminal\n",
                env=env,
            )
            assert done.returncode == 0, done.stderr
            async for delivery in feed:
                relayed = classify(delivery, "nats", SettingsCache().get(thread))
                if relayed.action == "relayed":
                    break
                event = delivery.event
                assert not (isinstance(event, LifecycleEvent) and event.phase == "done")
    assert relayed.text == "hello from the terminal"
    assert relayed.label.endswith("(stdin)")
    assert f"Attached to thread {thread}" in done.stderr


async def test_attach_to_a_terminal_thread_takes_a_unique_prefix_of_its_id(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    run_chat: RunChat,
) -> None:
    """`stdin:id=PREFIX` names the thread as `ore threads` does (issue 41)."""
    await start_core(EchoProcessor())
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin", "USER": "ana"}
    async with await ConduitClient.connect(ore_nats_url, name="stdin") as core:
        thread = await core.create_thread()
        done = await asyncio.to_thread(
            run_chat,
            "--attach",
            f"stdin:id={thread[:8]}",
            "--nats",
            ore_nats_url,
            input="",
            env=env,
        )
        listed = await ControlClient.beside(core).call("threads.list", {"namespace": "stdin"})
    assert done.returncode == 0, done.stderr
    assert f"Attached to thread {thread}" in done.stderr
    assert listed["threads"] == [thread]  # no second thread named by the prefix


async def test_attach_without_a_running_core_is_refused(run_chat: RunChat) -> None:
    done = await asyncio.to_thread(run_chat, "--attach", "stdin:id=t1", input="")
    assert done.returncode != 0
    assert "--attach joins a thread of a running `ore serve`" in done.stderr


async def test_a_message_from_the_platform_shows_while_the_prompt_waits_keeping_the_typed_line(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    spawn_chat: Callable[..., pexpect.spawn],
) -> None:
    await start_core(EchoProcessor())
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-conduit-nats", "USER": "ana"}
    async with await ConduitClient.connect(ore_nats_url, name="nats") as platform:
        thread, _ = await platform.lookup_or_create("nats.channel", "room")
        child = spawn_chat("--attach", "nats:room", "--nats", ore_nats_url, env=env)
        await asyncio.to_thread(child.expect, f"Attached to thread {thread}")
        await asyncio.to_thread(child.expect, "you>")
        child.send("half a li")  # typed, not sent: no Enter yet
        await asyncio.to_thread(child.expect, "half a li")
        await platform.send(thread, "news from the room", id="room-1", user_name="Bob")
        # Shown before any new line is typed (before: only after the next Enter).
        await asyncio.to_thread(child.expect, re.escape("Bob (nats): news from the room"))
        async with platform.events(thread) as feed:
            child.send("ne\r")  # the line typed before the message, finished now
            async for delivery in feed:
                relayed = classify(delivery, "nats", SettingsCache().get(thread))
                if relayed.action == "relayed":
                    break
    assert relayed.text == "half a line"


async def test_a_terminal_attached_where_the_agent_answers_all_shows_another_endpoint_s_answer(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    spawn_chat: Callable[..., pexpect.spawn],
) -> None:
    """`answer = all`: the agent's answer to the room is shown whole in the terminal too
    (`TerminalView.answer`), after the room's message it answers."""
    await start_core(EchoProcessor(prefix="echo: "))
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-conduit-nats", "USER": "ana"}
    async with await ConduitClient.connect(ore_nats_url, name="nats") as platform:
        thread, _ = await platform.lookup_or_create("nats.channel", "room")
        room = {"namespace": "nats", "key": "nats.channel", "value": "room"}
        await ControlClient.beside(platform).call(
            "links.add", {"thread": thread, "endpoint": room, "answer": "all", "exist_ok": True}
        )
        child = spawn_chat("--attach", "nats:room", "--nats", ore_nats_url, env=env)
        await asyncio.to_thread(child.expect, f"Attached to thread {thread}")
        await asyncio.to_thread(child.expect, "you>")
        await platform.send(thread, "a question from the room", id="room-1", user_name="Bob")
        await asyncio.to_thread(child.expect, re.escape("Bob (nats): a question from the room"))
        await asyncio.to_thread(child.expect, re.escape("echo: a question from the room"))


async def test_attach_to_a_conversation_no_conduit_has_seen_is_refused_off_a_terminal(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    run_chat: RunChat,
) -> None:
    await start_core(EchoProcessor())
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-conduit-nats"}
    done = await asyncio.to_thread(
        run_chat, "--attach", "nats:roon", "--nats", ore_nats_url, input="hi\n", env=env
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "Error: --attach: no nats conduit has seen nats:roon (a typo?); --create starts a "
        "thread for it"
    )
    async with await ConduitClient.connect(ore_nats_url, name="nats") as platform:
        links = await ControlClient.beside(platform).call("links.list", {})
    assert links == {"links": []}  # no stray link


async def test_attach_with_create_starts_a_thread_for_a_new_conversation(
    start_core: Callable[[TurnProcessor], Awaitable[None]],
    ore_nats_url: str,
    run_chat: RunChat,
) -> None:
    await start_core(EchoProcessor())
    env = {"ORE_LOAD_PLUGINS": "ore-conduit-stdin,ore-conduit-nats"}
    done = await asyncio.to_thread(
        run_chat, "--attach", "nats:fresh", "--create", "--nats", ore_nats_url, input="", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "Attached to thread " in done.stderr
