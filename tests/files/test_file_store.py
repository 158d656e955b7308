"""Files stored once (issue 39): the object store bucket `ore serve` creates, by content.

A real nats-server per test, the bucket made by `ensure_streams` as at start, and the
`FileStore` a conduit uses. Each test is one behaviour: the same bytes stored once, a
round trip byte for byte, a refused file never stored, a missing or altered object
reported instead of handed on.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from ore_core._nats.object_store import chunk_subject, object_stream
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.files import (
    Attachment,
    FileCorrupt,
    FileMissing,
    FilePolicy,
    FileRefused,
    FileStore,
)
from ore_core.subjects import Subjects

pytestmark = pytest.mark.asyncio

BUCKET = Subjects().files_bucket


@pytest_asyncio.fixture
async def files(ore_nats_client: Client) -> AsyncIterator[FileStore]:
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), BusConfig(partitions=1))
    yield FileStore(ore_nats_client.jetstream(), BUCKET)


async def test_serve_s_layout_creates_the_files_bucket(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, Subjects(), BusConfig(partitions=1, files_max_bytes=10**9))
    info = await js.stream_info(object_stream("ORE_FILES"))
    assert info.config.subjects == ["$O.ORE_FILES.C.>", "$O.ORE_FILES.M.>"]
    assert info.config.max_bytes == 10**9
    assert (await js.object_store("ORE_FILES")).__class__.__name__ == "ObjectStore"


async def test_the_same_bytes_sent_twice_are_stored_once(
    files: FileStore, ore_nats_client: Client
) -> None:
    js = ore_nats_client.jetstream()
    data = b"x" * 300_000  # three chunks
    first = await files.upload(data, "a.txt", "text/plain")
    after_one = (await js.stream_info(object_stream(BUCKET))).state
    second = await files.upload(data, "copy of a.txt", "text/plain")
    assert second.sha256 == first.sha256
    assert second.name == "copy of a.txt"
    after_two = (await js.stream_info(object_stream(BUCKET))).state
    assert (after_two.last_seq, after_two.bytes) == (after_one.last_seq, after_one.bytes)


async def test_an_uploaded_file_comes_back_byte_for_byte(files: FileStore, tmp_path: Path) -> None:
    data = bytes(range(256)) * 2000
    path = tmp_path / "photo.png"
    path.write_bytes(data)
    attachment = await files.upload(path)
    assert attachment == Attachment(
        "photo.png", "image/png", len(data), hashlib.sha256(data).hexdigest(), BUCKET
    )
    assert await files.fetch(attachment) == data


async def test_an_empty_file_round_trips(files: FileStore) -> None:
    attachment = await files.upload(b"", "empty.txt")
    assert await files.fetch(attachment) == b""


async def test_fetch_to_saves_under_a_free_name(files: FileStore, tmp_path: Path) -> None:
    attachment = await files.upload(b"notes", "notes.txt")
    (tmp_path / "notes.txt").write_text("mine")
    saved = await files.fetch_to(attachment, tmp_path)
    assert saved == tmp_path / "notes (2).txt"
    assert saved.read_bytes() == b"notes"
    assert (tmp_path / "notes.txt").read_text() == "mine"


async def test_a_file_over_the_limit_is_refused_and_not_stored(files: FileStore) -> None:
    files.policy = FilePolicy(max_size=10)
    before = await files.stored_bytes()
    with pytest.raises(FileRefused, match=r"big.txt is 11 B, over the 10 B limit"):
        await files.upload(b"x" * 11, "big.txt")
    assert await files.stored_bytes() == before


async def test_a_type_outside_the_allow_list_is_refused(files: FileStore) -> None:
    with pytest.raises(FileRefused, match=r"run.exe: files of type application/x-msdos"):
        await files.upload(b"MZ", "run.exe")


async def test_a_missing_object_is_reported_by_name(files: FileStore) -> None:
    gone = Attachment("gone.pdf", "application/pdf", 3, "0" * 64, BUCKET)
    with pytest.raises(FileMissing, match=r"gone.pdf is no longer stored"):
        await files.fetch(gone)


async def test_bytes_cut_short_in_the_bucket_are_reported_not_handed_on(
    files: FileStore, ore_nats_client: Client
) -> None:
    attachment = await files.upload(b"y" * 300_000, "log.txt")
    js = ore_nats_client.jetstream()
    info = await js.object_store(BUCKET)
    nuid = (await info.get_info(attachment.sha256)).nuid
    stream = object_stream(BUCKET)
    last = await js.get_last_msg(stream, chunk_subject(BUCKET, nuid))
    await js.delete_msg(stream, last.seq)
    with pytest.raises(FileCorrupt, match=r"log.txt: the stored bytes are not the file sent"):
        await files.fetch(attachment)


async def test_a_reference_to_other_bytes_is_not_served_as_them(files: FileStore) -> None:
    real = await files.upload(b"the real file", "a.txt")
    forged = Attachment("a.txt", "text/plain", real.size + 1, real.sha256, BUCKET)
    with pytest.raises(FileCorrupt):
        await files.fetch(forged)
