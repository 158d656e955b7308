"""`ore conduit` and `ore chat` give the operator's `[files]` rules to the conduit's
client, so a conduit refuses a file before it fetches or uploads a byte of it."""

from __future__ import annotations

import pytest

from ore_core.cli.options import connect_conduit
from ore_core.config import FilesSettings, NatsSettings
from ore_core.files import FilePolicy, FileRefused

pytestmark = pytest.mark.asyncio


async def test_a_conduits_client_checks_files_against_the_operators_rules(
    ore_nats_url: str,
) -> None:
    rules = FilesSettings(max_size=1000, allowed_types=["image/*"])
    client = await connect_conduit("slack", NatsSettings(url=[ore_nats_url]), 5.0, rules)
    async with client:
        assert client.files.policy == FilePolicy(1000, ("image/*",))
        with pytest.raises(FileRefused, match=r"files\.max_size"):
            await client.upload(b"x" * 1001, "big.png")
