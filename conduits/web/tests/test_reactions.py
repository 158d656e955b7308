"""Reactions through the web API (issue 39): a reaction is one core `react`, reaches the
thread's pages as a stored `reaction` event, shows in the tree with who reacts, and
never starts a model turn. A real nats-server, core (the scripted model, which counts
the turns it starts) and conduit."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ore_conduit_web.testing import TIMEOUT, Events, WebStack, answered, read_events


async def answered_thread(http: httpx.AsyncClient) -> tuple[str, str]:
    """A thread with one answered question: its id and the answer's turn id."""
    thread_id = (await http.post("/api/threads", json={})).json()["id"]
    sent = await http.post(f"/api/threads/{thread_id}/messages", json={"text": "E2E_REPLY:hi"})
    assert sent.status_code == 202
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, answered(), after="0")
    tree = (await http.get(f"/api/threads/{thread_id}")).json()
    return thread_id, tree["path"][-1]


def reactions_stored(count: int) -> Any:
    def check(events: Events) -> bool:
        return events.kinds().count("reaction") >= count

    return check


async def react(
    http: httpx.AsyncClient, thread_id: str, turn_id: str, emoji: str, remove: bool = False
) -> None:
    reply = await http.post(
        f"/api/threads/{thread_id}/turns/{turn_id}/reactions",
        json={"emoji": emoji, "remove": remove},
    )
    assert reply.status_code == 202, reply.text


async def test_a_reaction_reaches_the_page_as_a_reaction_event(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id, answer = await answered_thread(http)
    await react(http, thread_id, answer, "👍")
    async with asyncio.timeout(TIMEOUT):
        events = await read_events(http, thread_id, reactions_stored(1), after="0")
    reaction = next(d for _, d in events.stored() if d["kind"] == "reaction")
    me = (await http.get("/api/me")).json()
    assert (reaction["turn"], reaction["emoji"], reaction["reactors"]) == (
        answer,
        "👍",
        [me["reactor"]],
    )


async def test_the_tree_shows_who_reacts_and_a_removal_takes_it_away(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id, answer = await answered_thread(http)
    await react(http, thread_id, answer, "🎉")
    await react(http, thread_id, answer, "👀")
    await react(http, thread_id, answer, "🎉", remove=True)
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, reactions_stored(3), after="0")
    tree = (await http.get(f"/api/threads/{thread_id}")).json()
    view = next(v for v in tree["turns"] if v["id"] == answer)
    assert view["reactions"] == {"👀": [f"web:{(await http.get('/api/me')).json()['user']}"]}


async def test_a_reaction_never_starts_a_model_turn(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id, answer = await answered_thread(http)
    started = stack.model.started
    await react(http, thread_id, answer, "👍")
    async with asyncio.timeout(TIMEOUT):
        events = await read_events(http, thread_id, answered(2), after="0")
    assert "reaction" in events.kinds()
    assert stack.model.started == started == 1


async def test_a_blank_emoji_is_a_400(stack: WebStack, http: httpx.AsyncClient) -> None:
    thread_id, answer = await answered_thread(http)
    reply = await http.post(
        f"/api/threads/{thread_id}/turns/{answer}/reactions", json={"emoji": "  "}
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "bad_request"
