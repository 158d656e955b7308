"""`GET /files/link/{token}` (issue 39): the web conduit serves a file to a signed,
expiring link the core made (`files.link_base` points here), with its type and name;
a forged or expired token is a JSON 403. A real core, nats-server and HTTP server."""

from __future__ import annotations

import time

import httpx
import pytest
from nats.js.errors import KeyWrongLastSequenceError

from ore_conduit_web.testing import WebStack
from ore_core.bus.api.files import LINK_KEY
from ore_core.conduit import ConduitClient
from ore_core.files import Attachment
from ore_core.files.links import FileLinks
from ore_core.subjects import Subjects

KEY = b"the deployment's link key, 32 b."
PDF = b"%PDF-1.7 " + bytes(range(256)) * 500


async def stored(stack: WebStack, data: bytes, name: str, media_type: str) -> Attachment:
    """`data` uploaded to the files bucket, and the core's link key set to KEY."""
    async with await ConduitClient.connect(stack.nats_url, name="web") as client:
        kv = await client.nc.jetstream().key_value(Subjects().links_bucket)
        try:
            await kv.create(LINK_KEY, KEY)  # the key the core generates when it needs one
        except KeyWrongLastSequenceError:
            assert (await kv.get(LINK_KEY)).value == KEY
        return await client.upload(data, name, media_type)


def signer(key: bytes = KEY) -> FileLinks:
    return FileLinks("http://web/files/link", key, Subjects().files_bucket, ttl=600.0)


async def get(stack: WebStack, token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.base) as anonymous:  # the link is the credential
        return await anonymous.get(f"/files/link/{token}")


async def test_a_link_serves_the_file_as_a_download_of_its_type(stack: WebStack) -> None:
    pdf = await stored(stack, PDF, "Q3 report.pdf", "application/pdf")
    reply = await get(stack, signer().sign(pdf))
    assert reply.status_code == 200
    assert reply.content == PDF
    assert reply.headers["content-type"] == "application/pdf"
    assert reply.headers["content-disposition"] == "attachment; filename*=UTF-8''Q3%20report.pdf"


async def test_an_image_link_is_shown_inline(stack: WebStack) -> None:
    png = await stored(stack, b"\x89PNG\r\n\x1a\n" + b"x" * 100, "a.png", "image/png")
    reply = await get(stack, signer().sign(png))
    assert reply.headers["content-disposition"].startswith("inline;")


async def test_a_forged_link_is_a_403(stack: WebStack) -> None:
    pdf = await stored(stack, PDF, "q3.pdf", "application/pdf")
    reply = await get(stack, signer(b"someone else's key").sign(pdf))
    assert reply.status_code == 403
    assert reply.json()["error"]["code"] == "link_forged"


async def test_an_expired_link_is_a_403(stack: WebStack) -> None:
    pdf = await stored(stack, PDF, "q3.pdf", "application/pdf")
    reply = await get(stack, signer().sign(pdf, now=time.time() - 601.0))
    assert reply.status_code == 403
    assert reply.json()["error"]["code"] == "link_expired"


@pytest.mark.parametrize("token", ["not-a-token", "a.b"])
async def test_a_malformed_link_is_refused_without_asking_the_core(
    stack: WebStack, token: str
) -> None:
    assert (await get(stack, token)).status_code == 400
