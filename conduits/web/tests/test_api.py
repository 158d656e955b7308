"""The HTTP API against a real server on a loopback port, with a real core behind it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ore_conduit_web.testing import TIMEOUT, Events, WebStack, answered, read_events


async def new_thread(http: httpx.AsyncClient, title: str = "") -> str:
    reply = await http.post("/api/threads", json={"title": title})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


async def converse(http: httpx.AsyncClient, thread_id: str, text: str, **extra: Any) -> Any:
    """Send `text` and read the thread's events until it is answered; the events."""
    cursor = (await http.get(f"/api/threads/{thread_id}")).json()["cursor"] or "0"
    reply = await http.post(f"/api/threads/{thread_id}/messages", json={"text": text, **extra})
    assert reply.status_code == 202, reply.text
    async with asyncio.timeout(TIMEOUT):
        return await read_events(http, thread_id, answered(), after=cursor)


async def tree(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    reply = await http.get(f"/api/threads/{thread_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def path_texts(found: dict[str, Any]) -> list[str]:
    views = {view["id"]: view for view in found["turns"]}
    return [views[turn_id]["text"] for turn_id in found["path"]]


def error_code(reply: httpx.Response) -> str:
    return str(reply.json()["error"]["code"])


async def test_openapi_is_served_without_a_token_and_declares_the_event_stream(
    stack: WebStack,
) -> None:
    async with httpx.AsyncClient(base_url=stack.base) as anonymous:
        reply = await anonymous.get("/openapi.json")
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    events = reply.json()["paths"]["/api/threads/{thread_id}/events"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]


async def test_health_and_readiness_need_no_token(stack: WebStack) -> None:
    async with httpx.AsyncClient(base_url=stack.base) as anonymous:
        assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
        assert (await anonymous.get("/readyz")).json() == {"status": "ready"}


async def test_a_request_without_a_token_is_refused_with_a_json_401(stack: WebStack) -> None:
    async with httpx.AsyncClient(base_url=stack.base) as anonymous:
        reply = await anonymous.get("/api/threads")
    assert reply.status_code == 401
    assert error_code(reply) == "unauthorized"
    assert reply.headers["www-authenticate"] == "Bearer"


async def test_a_wrong_token_is_refused_with_a_json_401(stack: WebStack) -> None:
    headers = {"Authorization": "Bearer not-the-token"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers) as stranger:
        reply = await stranger.get("/api/threads")
    assert reply.status_code == 401
    assert "wrong token" in reply.json()["error"]["message"]


async def test_the_signed_in_url_sets_a_cookie_that_signs_the_page_in(stack: WebStack) -> None:
    async with httpx.AsyncClient(base_url=stack.base) as browser:
        reply = await browser.get(stack.url.removeprefix(stack.base))
        assert reply.status_code == 303
        assert (await browser.get("/api/threads")).status_code == 200


async def test_a_thread_is_listed_renamed_and_deleted(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http, "first")
    listed = (await http.get("/api/threads")).json()["threads"]
    assert [(t["id"], t["title"]) for t in listed] == [(thread_id, "first")]
    renamed = await http.patch(f"/api/threads/{thread_id}", json={"title": "second"})
    assert renamed.json()["title"] == "second"
    assert (await http.delete(f"/api/threads/{thread_id}")).status_code == 204
    assert (await http.get("/api/threads")).json()["threads"] == []
    assert (await http.get(f"/api/threads/{thread_id}")).status_code == 404


async def test_a_message_is_answered_with_deltas_then_the_stored_answer(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    events = await converse(http, thread_id, "E2E_REPLY:hello there, world")
    live = [d for e, _, d in events.frames if e == "live" and d["kind"] == "text_delta"]
    assert "".join(d["content"] for d in live) in "hello there, world"
    assert {"kind": "text", "content": "hello there, world"}.items() <= dict(
        next(d for _, d in events.stored() if d["kind"] == "text")
    ).items()
    assert path_texts(await tree(http, thread_id)) == [
        "E2E_REPLY:hello there, world",
        "hello there, world",
    ]


async def test_the_first_message_titles_the_thread(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_REPLY:ok")
    assert (await tree(http, thread_id))["title"] == "E2E_REPLY:ok"


async def test_stored_events_have_increasing_sequence_ids(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    events = await converse(http, thread_id, "one")
    ids = [tuple(int(p) for p in i.split(".")) for i, _ in events.stored()]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


async def test_last_event_id_resumes_exactly_after_that_event(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "one")
    await converse(http, thread_id, "two")
    everything = (await read_events(http, thread_id, answered(2), after="0")).stored()
    middle = len(everything) // 2
    rest = await read_events(
        http,
        thread_id,
        lambda e: len(e.stored()) == len(everything) - middle - 1,
        last_event_id=everything[middle][0],
    )
    assert rest.stored() == everything[middle + 1 :]


def shown_text(events: Events) -> str:
    """The answer a page shows from these frames: the snapshot, then the deltas."""
    text = ""
    for event, _, data in events.frames:
        if event == "partial":
            text = data["text"]
        elif event == "live" and data["kind"] == "text_delta":
            text += data["content"]
    return text


async def test_a_page_opened_mid_answer_gets_the_answer_so_far_then_the_rest(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    sent = await http.post(
        f"/api/threads/{thread_id}/messages", json={"text": "E2E_SLOW_REPLY:abcdefghijkl"}
    )
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, lambda e: shown_text(e) == "abcdef")
        reloaded = await read_events(http, thread_id, lambda e: len(e.frames) == 1)
        stack.model.release()
        await read_events(http, thread_id, answered(), events=reloaded, after="0")
    event, _, partial = reloaded.frames[0]
    assert (event, partial["text"]) == ("partial", "abcdef")
    assert partial["pending"] == [
        {"event_id": sent.json()["event_id"], "text": "E2E_SLOW_REPLY:abcdefghijkl"}
    ]
    text = next(d for _, d in reloaded.stored() if d["kind"] == "text")
    assert text["content"] == "abcdefghijkl"


async def test_interrupt_stops_the_model_in_the_core(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    await http.post(f"/api/threads/{thread_id}/messages", json={"text": "E2E_SLOW_REPLY:abcdef"})
    async with asyncio.timeout(TIMEOUT):
        await stack.model.holding.wait()
        assert (await http.post(f"/api/threads/{thread_id}/interrupt")).status_code == 202
        events = await read_events(http, thread_id, answered(), after="0")
    assert stack.model.cancelled == 1
    assert ("lifecycle", "cancelled") in [(d["kind"], d.get("phase")) for _, d in events.stored()]


async def test_an_edit_branches_and_both_versions_are_siblings(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_REPLY:first")
    before = await tree(http, thread_id)
    question = before["path"][0]
    await converse(http, thread_id, "E2E_REPLY:second", parent_id="", edit_of=question)
    after = await tree(http, thread_id)
    assert path_texts(after) == ["E2E_REPLY:second", "second"]
    edited = next(v for v in after["turns"] if v["id"] == after["path"][0])
    assert edited["siblings"] == [question, after["path"][0]]


async def test_an_edit_saved_without_an_answer_branches_and_asks_no_model(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_COUNTED_REPLY:kept")
    question = (await tree(http, thread_id))["path"][0]
    events = await converse(
        http, thread_id, "E2E_COUNTED_REPLY:kept", parent_id="", edit_of=question, answer=False
    )
    after = await tree(http, thread_id)
    assert path_texts(after) == ["E2E_COUNTED_REPLY:kept"]
    kinds = [d["kind"] for _, d in events.stored() if d["kind"] != "properties"]
    assert kinds == ["turn_complete", "lifecycle"]  # no answer; its metadata aside
    edited = next(v for v in after["turns"] if v["id"] == after["path"][0])
    assert edited["siblings"] == [question, after["path"][0]]
    await converse(http, thread_id, "E2E_COUNTED_REPLY:kept")  # the model's next call
    assert path_texts(await tree(http, thread_id))[-1] == "kept #2"  # not #3: none between


async def test_regenerate_adds_a_sibling_answer_to_the_same_question(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_COUNTED_REPLY:answer")
    first = await tree(http, thread_id)
    question, answer = first["path"]
    cursor = first["cursor"]
    reply = await http.post(f"/api/threads/{thread_id}/regenerate", json={"turn_id": answer})
    assert reply.status_code == 202
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, answered(), after=cursor)
    second = await tree(http, thread_id)
    assert path_texts(second) == ["E2E_COUNTED_REPLY:answer", "answer #2"]
    assert second["path"][0] == question
    new_answer = next(v for v in second["turns"] if v["id"] == second["path"][1])
    assert new_answer["siblings"] == [answer, second["path"][1]]
    selected = await http.post(f"/api/threads/{thread_id}/select", json={"turn_id": answer})
    assert path_texts(selected.json()) == ["E2E_COUNTED_REPLY:answer", "answer #1"]


async def test_deleting_a_message_removes_it_from_the_conversation(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_REPLY:one")
    before = await tree(http, thread_id)
    question = before["path"][0]
    reply = await http.delete(f"/api/threads/{thread_id}/turns/{question}")
    assert reply.status_code == 204
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, answered(), after=before["cursor"])
    assert question not in (await tree(http, thread_id))["path"]


async def test_deleting_an_unknown_message_is_a_404(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await converse(http, thread_id, "E2E_REPLY:one")
    reply = await http.delete(f"/api/threads/{thread_id}/turns/nosuchturn")
    assert reply.status_code == 404


async def test_a_failed_turn_reports_an_error_event(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    events = await converse(http, thread_id, "E2E_FAIL:model down")
    errors = [d for _, d in events.stored() if d["kind"] == "error"]
    assert len(errors) == 1
    assert "model down" in errors[0]["message"]


async def test_search_finds_threads_by_title_and_by_text(http: httpx.AsyncClient) -> None:
    by_title = await new_thread(http, "Holiday plans")
    by_text = await new_thread(http, "other")
    await converse(http, by_text, "E2E_REPLY:the holiday starts monday")
    await new_thread(http, "unrelated")
    found = (await http.get("/api/threads", params={"q": "HOLIDAY"})).json()["threads"]
    assert sorted(t["id"] for t in found) == sorted([by_title, by_text])


async def test_export_gives_markdown_and_json(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http, "Notes")
    await converse(http, thread_id, "E2E_REPLY:**bold**")
    markdown = await http.get(f"/api/threads/{thread_id}/export", params={"format": "markdown"})
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.text.startswith("# Notes\n")
    assert "## Assistant\n\n**bold**" in markdown.text
    exported = await http.get(f"/api/threads/{thread_id}/export", params={"format": "json"})
    assert path_texts(exported.json()) == ["E2E_REPLY:**bold**", "**bold**"]


async def test_another_users_thread_answers_like_an_unknown_one(tmp_path: Any) -> None:
    other = "b" * 24
    async with WebStack(tmp_path, users={"bob": other}) as stack:
        owner = httpx.AsyncClient(
            base_url=stack.base, headers={"Authorization": f"Bearer {stack.token}"}
        )
        bob = httpx.AsyncClient(base_url=stack.base, headers={"Authorization": f"Bearer {other}"})
        async with owner, bob:
            thread_id = await new_thread(owner, "mine")
            assert (await bob.get("/api/threads")).json()["threads"] == []
            for reply in (
                await bob.get(f"/api/threads/{thread_id}"),
                await bob.post(f"/api/threads/{thread_id}/messages", json={"text": "hi"}),
                await bob.get(f"/api/threads/{thread_id}/events"),
                await bob.delete(f"/api/threads/{thread_id}"),
            ):
                assert reply.status_code == 404
                assert error_code(reply) == "not_found"
            assert len((await owner.get("/api/threads")).json()["threads"]) == 1


async def test_an_unknown_thread_is_a_json_404(http: httpx.AsyncClient) -> None:
    reply = await http.get("/api/threads/0123456789abcdef")
    assert reply.status_code == 404
    assert error_code(reply) == "not_found"


async def test_a_path_like_thread_id_is_refused(http: httpx.AsyncClient) -> None:
    reply = await http.get("/api/threads/..%2Fetc")
    assert reply.status_code in (400, 404)
    assert "error" in reply.json()


async def test_bad_json_is_a_400_and_sends_nothing(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    reply = await http.post(
        f"/api/threads/{thread_id}/messages",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert reply.status_code == 400
    assert error_code(reply) == "bad_request"
    assert stack.model.started == 0


async def test_a_message_over_the_limit_is_a_413(tmp_path: Any) -> None:
    async with WebStack(tmp_path, max_message_length=10) as stack:
        headers = {"Authorization": f"Bearer {stack.token}"}
        async with httpx.AsyncClient(base_url=stack.base, headers=headers) as http:
            thread_id = await new_thread(http)
            reply = await http.post(f"/api/threads/{thread_id}/messages", json={"text": "x" * 11})
            assert reply.status_code == 413
            assert error_code(reply) == "too_large"
            assert (await tree(http, thread_id))["turns"] == []


async def test_a_body_over_the_limit_is_a_413(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    reply = await http.post(
        f"/api/threads/{thread_id}/messages", json={"text": "x" * (2 * 1024 * 1024)}
    )
    assert reply.status_code == 413
    assert error_code(reply) == "too_large"


async def test_a_bad_last_event_id_is_a_400(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    reply = await http.get(f"/api/threads/{thread_id}/events", headers={"Last-Event-ID": "../../x"})
    assert reply.status_code == 400
    assert error_code(reply) == "bad_request"


async def test_a_retried_message_with_one_client_id_is_answered_once(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    body = {"text": "E2E_COUNTED_REPLY:once", "client_id": "abc-1"}
    for _ in range(2):
        assert (await http.post(f"/api/threads/{thread_id}/messages", json=body)).status_code == 202
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, answered(), after="0")
    assert path_texts(await tree(http, thread_id)) == ["E2E_COUNTED_REPLY:once", "once #1"]
    assert stack.model.started == 1
