"""Files through the web API (issue 39): an upload checked against the operator's
`[files]` policy and stored once by content, a message that carries it, the thread's
tree that shows it, and the route that serves it back. A real nats-server, core and
conduit (`WebStack`, its uploads checked against a small policy); the bucket is read
with the core's own `FileStore` to see what was stored."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import nats
import pytest_asyncio

from ore_conduit_web.testing import TIMEOUT, WebStack, answered, read_events
from ore_core.files import FilePolicy, FileStore
from ore_core.subjects import Subjects

POLICY = FilePolicy(max_size=64_000, allowed_types=("image/*", "text/*", "application/pdf"))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[WebStack]:
    async with WebStack(tmp_path, files=POLICY) as running:
        yield running


async def stored_files(stack: WebStack) -> list[str]:
    """The sha256 of every file in the bucket."""
    nc = await nats.connect(stack.nats_url)
    try:
        store = FileStore(nc.jetstream(), Subjects().files_bucket)
        return [stored.sha256 for stored in await store.stored_files()]
    finally:
        await nc.close()


async def upload(http: httpx.AsyncClient, name: str, data: bytes, media: str) -> httpx.Response:
    return await http.post(
        "/api/files", params={"name": name}, content=data, headers={"Content-Type": media}
    )


async def new_thread(http: httpx.AsyncClient) -> str:
    made = await http.post("/api/threads", json={})
    thread_id: str = made.json()["id"]
    return thread_id


async def send_file(http: httpx.AsyncClient, thread_id: str, name: str, data: bytes) -> None:
    uploaded = await upload(http, name, data, "image/png")
    assert uploaded.status_code == 201, uploaded.text
    body = {"text": "look", "files": [uploaded.json()["id"]]}
    sent = await http.post(f"/api/threads/{thread_id}/messages", json=body)
    assert sent.status_code == 202, sent.text
    async with asyncio.timeout(TIMEOUT):
        await read_events(http, thread_id, answered(), after="0")


async def test_me_says_which_files_are_taken(http: httpx.AsyncClient) -> None:
    me = (await http.get("/api/me")).json()
    assert me["files"] == {"max_size": 64_000, "allowed_types": list(POLICY.allowed_types)}


async def test_a_sent_file_is_on_its_turn_and_served_with_its_type_and_name(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    await send_file(http, thread_id, "chart ü.png", PNG)
    tree = (await http.get(f"/api/threads/{thread_id}")).json()
    views = {view["id"]: view for view in tree["turns"]}
    question = views[tree["path"][0]]
    sha256 = hashlib.sha256(PNG).hexdigest()
    assert question["files"] == [
        {
            "name": "chart ü.png",
            "media_type": "image/png",
            "size": len(PNG),
            "sha256": sha256,
            "inline": True,
        }
    ]
    served = await http.get(f"/api/threads/{thread_id}/files/{sha256}")
    assert served.status_code == 200
    assert served.content == PNG
    assert served.headers["content-type"] == "image/png"
    assert served.headers["content-disposition"] == (
        "inline; filename=\"chart _.png\"; filename*=UTF-8''chart%20%C3%BC.png"
    )
    assert served.headers["x-content-type-options"] == "nosniff"


async def test_a_file_not_shown_inline_is_served_as_a_download(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    uploaded = await upload(http, "page.html", b"<script>alert(1)</script>", "text/html")
    body = {"text": "", "files": [uploaded.json()["id"]]}
    assert (await http.post(f"/api/threads/{thread_id}/messages", json=body)).status_code == 202
    await read_events(http, thread_id, answered(), after="0")
    sha256 = hashlib.sha256(b"<script>alert(1)</script>").hexdigest()
    served = await http.get(f"/api/threads/{thread_id}/files/{sha256}")
    assert served.headers["content-disposition"].startswith('attachment; filename="page.html"')
    assert "sandbox" in served.headers["content-security-policy"]


async def test_the_same_file_twice_is_stored_once(stack: WebStack, http: httpx.AsyncClient) -> None:
    first = await upload(http, "a.png", PNG, "image/png")
    second = await upload(http, "b.png", PNG, "image/png")
    assert first.json()["id"] != second.json()["id"]
    assert await stored_files(stack) == [hashlib.sha256(PNG).hexdigest()]


async def test_a_file_over_the_limit_is_a_413_naming_it_and_nothing_is_stored(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    reply = await upload(http, "big.png", bytes(64_001), "image/png")
    assert reply.status_code == 413
    assert reply.json()["error"]["message"] == (
        "big.png is 64.0 kB, over the 64.0 kB limit for files (files.max_size)"
    )
    assert await stored_files(stack) == []


async def test_a_file_over_the_limit_without_a_length_is_cut_off_with_413(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield bytes(1000)

    reply = await http.post(
        "/api/files",
        params={"name": "stream.png"},
        content=chunks(),
        headers={"Content-Type": "image/png"},
    )
    assert reply.status_code == 413
    assert "limit for files" in reply.json()["error"]["message"]
    assert await stored_files(stack) == []


async def test_a_type_not_allowed_is_a_415_naming_the_allowed_ones(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    reply = await upload(http, "tool.zip", b"PK\x03\x04", "application/zip")
    assert reply.status_code == 415
    assert reply.json()["error"] == {
        "code": "unsupported_type",
        "message": "tool.zip: files of type application/zip are not allowed here "
        "(files.allowed_types: image/*, text/*, application/pdf)",
    }
    assert await stored_files(stack) == []


async def test_without_a_type_the_name_says_it(http: httpx.AsyncClient) -> None:
    reply = await upload(http, "notes.txt", b"hello", "application/octet-stream")
    assert reply.status_code == 201
    assert reply.json()["media_type"] == "text/plain"


async def test_a_truncated_upload_stores_nothing_and_the_conduit_goes_on(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    address = urlsplit(stack.base)
    head = (
        f"POST /api/files?name=cut.png HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: Bearer {stack.token}\r\nContent-Type: image/png\r\n"
        "Content-Length: 10000\r\n\r\n"
    ).encode()

    def send_half() -> None:
        with socket.create_connection((address.hostname, address.port), timeout=TIMEOUT) as sock:
            sock.sendall(head + PNG)  # 208 of the 10000 bytes promised, then the end
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass

    await asyncio.to_thread(send_half)
    assert await stored_files(stack) == []
    assert (await upload(http, "whole.png", PNG, "image/png")).status_code == 201


async def test_a_message_naming_an_unknown_upload_is_refused_and_not_sent(
    stack: WebStack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    body = {"text": "look", "files": ["not-an-upload"]}
    reply = await http.post(f"/api/threads/{thread_id}/messages", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "unknown_file"
    assert (await http.get(f"/api/threads/{thread_id}")).json()["path"] == []


async def test_another_user_cannot_send_an_upload_of_mine(tmp_path: Path) -> None:
    other = "b" * 24
    async with WebStack(tmp_path, files=POLICY, users={"bea": other}) as stack:
        mine = {"Authorization": f"Bearer {stack.token}"}
        hers = {"Authorization": f"Bearer {other}"}
        async with httpx.AsyncClient(base_url=stack.base, timeout=TIMEOUT) as http:
            uploaded = await http.post(
                "/api/files", params={"name": "a.png"}, content=PNG, headers=mine
            )
            thread_id = (await http.post("/api/threads", json={}, headers=hers)).json()["id"]
            body = {"text": "x", "files": [uploaded.json()["id"]]}
            reply = await http.post(f"/api/threads/{thread_id}/messages", json=body, headers=hers)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "unknown_file"


async def test_a_file_no_turn_of_the_thread_has_is_404(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    await send_file(http, thread_id, "a.png", PNG)
    elsewhere = await new_thread(http)
    sha256 = hashlib.sha256(PNG).hexdigest()
    reply = await http.get(f"/api/threads/{elsewhere}/files/{sha256}")
    assert reply.status_code == 404
    assert reply.json()["error"]["code"] == "not_found"
