"""Files a platform cannot take (issue 39): the copy engine degrades, never drops.

A scripted platform that takes images up to 1 MB, run as a conduit against a real core
(with `files_link_base` set, or not): an image it takes goes to the adapter on the
copy's part; a PDF it cannot take shows as a signed link that reads the file, or,
without links, as a line naming it and its size.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import ClassVar

import pytest

from ore_core.bus.server.streams import BusConfig
from ore_core.conduit import Capabilities, ConduitClient, ControlClient
from ore_core.files import Attachment
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform, conduit_for

THREAD = "files-1"
ROOM = "room-1"
TIMEOUT = 30.0
LINK_BASE = "https://chat.example.com/files/link"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
PDF = b"%PDF-1.7 " + bytes(range(256)) * 6000  # 1.5 MB: over the platform's limit


class ImagesOnly(ScriptedPlatform):
    """Takes images up to 1 MB as files, nothing else."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True, delete=True, idempotency="key", file_max_bytes=10**6, file_types=("image/*",)
    )


@pytest.fixture
def link_base() -> str:
    return LINK_BASE


@pytest.fixture
def ore_bus_config(link_base: str) -> BusConfig:
    return BusConfig(partitions=2, files_link_base=link_base, files_link_secret="engine-files")


async def relay_files(
    core: ConduitCore, start: StartConduit, *files: tuple[bytes, str, str]
) -> tuple[ImagesOnly, ConduitClient]:
    """Send "see these" with `files` (data, name, type) from web to the platform's room;
    the platform once the copy is shown there."""
    web = core.client_for("web")
    await web.create_thread(THREAD)
    endpoint = {"namespace": "memo", "key": "memo.room", "value": ROOM}
    await ControlClient.beside(core.client).call(
        "links.add", {"thread": THREAD, "endpoint": endpoint}
    )
    platform = ImagesOnly()
    await start(conduit_for(platform), {})
    await asyncio.wait_for(platform.connected.wait(), TIMEOUT)
    attachments = [await web.upload(data, name, kind) for data, name, kind in files]
    await web.send(THREAD, "see these", user_name="Ana", attachments=attachments)
    await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT)
    return platform, web


async def test_a_file_the_platform_takes_goes_to_the_adapter_on_the_part(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform, _ = await relay_files(
        ore_conduit_core, ore_start_conduit, (PNG, "a.png", "image/png")
    )
    (part,) = platform.parts.values()
    assert [a.sha256 for a in part.attachments] == [hashlib.sha256(PNG).hexdigest()]
    assert part.text == "Ana (web): see these"


async def test_a_file_the_platform_cannot_take_shows_as_a_link_that_reads_it(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform, _ = await relay_files(
        ore_conduit_core,
        ore_start_conduit,
        (PNG, "a.png", "image/png"),
        (PDF, "q3.pdf", "application/pdf"),
    )
    (part,) = platform.parts.values()
    assert [a.name for a in part.attachments] == ["a.png"]
    first, line = part.text.split("\n")
    assert first == "Ana (web): see these"
    assert line.startswith(f"📎 q3.pdf (application/pdf, 1.5 MB): {LINK_BASE}/")
    token = line.rsplit("/", 1)[1]
    attachment, data = await ore_conduit_core.client.fetch_link(token)  # any conduit may
    assert (attachment.name, data) == ("q3.pdf", PDF)


@pytest.mark.parametrize("link_base", [""])
async def test_without_links_a_file_the_platform_cannot_take_shows_as_a_line_naming_it(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform, _ = await relay_files(
        ore_conduit_core, ore_start_conduit, (PDF, "q3.pdf", "application/pdf")
    )
    (part,) = platform.parts.values()
    assert part.attachments == ()
    assert part.text == "Ana (web): see these\n📎 q3.pdf (application/pdf, 1.5 MB) (not shown here)"


def test_a_platform_s_file_line_names_the_file_and_its_size() -> None:
    from ore_core.conduit.file_fit import file_line

    pdf = Attachment("q3.pdf", "application/pdf", 5 * 10**6, "a" * 64, "ORE_FILES")
    assert file_line(pdf, None) == "📎 q3.pdf (application/pdf, 5.0 MB) (not shown here)"
