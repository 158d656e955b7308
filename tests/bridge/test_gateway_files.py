"""Files across a gateway Discord <-> Matrix <-> NATS (issue 39): one image and one
5 MB PDF sent from each endpoint reach every other endpoint once, byte-identical.

The three conduits run on the engine in this process, each on its platform (the fake
Discord, the fake homeserver, a plain NATS client of the NATS bridge), with the kit's
core on a real nats-server. A NATS channel gets its ore thread the usual way (a client
writes to it); a Discord channel and a Matrix room are linked to it with `answer =
"none"`. Each endpoint then sends its two files; what each shows of the others' is
counted by name and sha256: delivered, lost, doubled, corrupt (bytes not the sent
ones). Every file fits every platform here (Discord 10 MiB, Matrix 50 MiB, NATS a
reference), so none is shown as a link or notice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ore_conduit_discord import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.testing import GUILD, RANDOM, FakeDiscord
from ore_conduit_matrix import CONVERSATION_KEY, MatrixConduit
from ore_conduit_matrix.testing import FakeMatrix
from ore_conduit_nats import NatsBridge
from ore_conduit_nats.testing import PlainNatsClient
from ore_core import ConduitClient
from ore_core.conduit import ControlClient
from ore_core.files import Attachment
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit
from tests.bridge.files import files_from, sha
from tests.bridge.gateway import PATIENCE

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNEL = "gw"  # the NATS bridge's channel
ENDPOINTS = ("discord", "matrix", "nats")


def tally(shown: list[tuple[str, str]], endpoint: str) -> dict[str, int]:
    """What `endpoint` showed, (name, sha256 of the bytes), against the others' files."""
    wanted = {
        name: hashlib.sha256(data).hexdigest()
        for origin in ENDPOINTS
        if origin != endpoint
        for name, (_, data) in files_from(origin).items()
    }
    seen = Counter(name for name, _ in shown)
    good = {name for name, sha in shown if wanted.get(name) == sha}
    return {
        "delivered": len(good),
        "lost": len(set(wanted) - set(seen)),
        "doubled": sum(n - 1 for n in seen.values() if n > 1),
        "corrupt": len({name for name, sha in shown if name in wanted and wanted[name] != sha}),
        "echoed": sum(1 for name in seen if name.startswith(f"{endpoint}.")),
    }


async def test_each_endpoint_s_image_and_pdf_reach_every_other_once_byte_identical(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    hs = await FakeMatrix().start()
    raw = await PlainNatsClient.connect(ore_conduit_core.nats_url, patience=PATIENCE)
    nats = await ConduitClient.connect(ore_conduit_core.nats_url, name="nats")
    async with FakeDiscord() as discord:
        conduits: list[RunningConduit] = []
        try:
            room = await hs.create_room()
            discord_settings = {
                "token": discord.token,
                "api_url": f"{discord.url}/api/v10",
                "state_dir": str(tmp_path / "discord"),
                "identify_delay": 0,
            }
            conduits += [
                await ore_start_conduit(NatsBridge, {"output": "json"}),
                await ore_start_conduit(DiscordConduit, discord_settings),
                await ore_start_conduit(MatrixConduit, hs.conduit_settings(str(tmp_path / "m"))),
            ]
            await asyncio.wait_for(raw.wait_until_ready(), PATIENCE)
            await discord.wait_until(lambda: discord.gateway.readied > 0, PATIENCE)
            await hs.wait_until(lambda: hs.waiting > 0, PATIENCE)

            await raw.publish(CHANNEL, b'{"text": "start", "id": "start"}')
            await raw.next_out(CHANNEL)  # its answer: the thread exists
            thread, _ = await nats.lookup_or_create("nats.channel", CHANNEL)
            control = ControlClient.beside(ore_conduit_core.client)
            for endpoint in (
                {"namespace": "discord", "key": CHANNEL_KEY, "value": f"{GUILD}:{RANDOM}"},
                {"namespace": "matrix", "key": CONVERSATION_KEY, "value": room},
            ):
                await control.call(
                    "links.add", {"thread": thread, "endpoint": endpoint, "answer": "none"}
                )

            nats_shown: list[tuple[str, str]] = []
            nats_changed = asyncio.Condition()

            async def read_nats() -> None:
                """Each reference the bridge relays, fetched: the sha256 of its bytes."""
                while True:
                    body = json.loads((await raw.next_out(CHANNEL)).data)
                    for reference in body.get("attachments", []):
                        attachment = Attachment.from_dict(reference)
                        data = await nats.fetch(thread, attachment)
                        nats_shown.append((attachment.name, hashlib.sha256(data).hexdigest()))
                        async with nats_changed:
                            nats_changed.notify_all()

            reader = asyncio.create_task(read_nats())
            for name, (media_type, data) in files_from("discord").items():
                await discord.user_says(RANDOM, f"discord {name}", files=[(name, media_type, data)])
            for name, (media_type, data) in files_from("matrix").items():
                await hs.user_sends_file(room, name, media_type, data)
            for name, (media_type, data) in files_from("nats").items():
                attachment = await nats.upload(data, name, media_type)
                body = {"text": f"nats {name}", "attachments": [attachment.to_dict()]}
                await raw.publish(CHANNEL, json.dumps(body).encode())

            shown: dict[str, Callable[[], list[tuple[str, str]]]] = {
                "discord": lambda: [(n, sha(d)) for n, d in discord.files_of(RANDOM)],
                "matrix": lambda: [(n, sha(d)) for n, d in hs.files_of(room)],
                "nats": lambda: list(nats_shown),
            }
            wanted = 4  # two files from each of the two others

            def has_all(endpoint: str) -> bool:
                return tally(shown[endpoint](), endpoint)["delivered"] >= wanted

            try:
                await discord.wait_until(lambda: has_all("discord"), PATIENCE)
                await hs.wait_until(lambda: has_all("matrix"), PATIENCE)
                async with asyncio.timeout(PATIENCE), nats_changed:
                    await nats_changed.wait_for(lambda: has_all("nats"))
            except TimeoutError:
                pass  # the counts below say what is missing
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            counts = {e: tally(shown[e](), e) for e in ENDPOINTS}
            print(f"files across discord <-> matrix <-> nats (6 sent): {counts}")
            clean = {"delivered": wanted, "lost": 0, "doubled": 0, "corrupt": 0, "echoed": 0}
            assert counts == {e: clean for e in ENDPOINTS}, counts
        finally:
            for conduit in reversed(conduits):
                await conduit.stop()
            await nats.close()
            await raw.close()
            await hs.close()
