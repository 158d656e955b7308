"""The threads of a store that lives in NATS, read and changed through `ore serve`.

`ore threads` and `ore doctor` open the configured store themselves, next to a running
`ore serve`. The jetstream store cannot be opened like that: it runs inside `ore
serve`, bound to the core's connection. For it they use the running core's operator
API (`P.admin.threads.*`, protocol.md "Control API") instead, and `ControlStore`
offers that as the part of the Store protocol those commands use: list ids, get a
thread (its metadata, tip and the turns of its active path: the API sends no other
branch), move the tip (the only change `ore threads` saves), delete.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

import pluggy

from ore_core._nats.connection import NatsCredentials
from ore_core.cli.app import open_store
from ore_core.cli.running import find_running
from ore_core.conduit.control import ControlClient
from ore_core.config import OreSettings
from ore_core.errors import ApiError, OreError, ThreadNotFound
from ore_core.ledger.thread import Thread
from ore_core.plugins.registry import collect_registrations
from ore_core.session.protocols import Store
from ore_core.session.stores.thread_json import build_thread
from ore_core.turn import turn_from_dict

__all__ = ["NATS_STORES", "ControlStore", "open_threads"]

NATS_STORES = frozenset({"jetstream"})
"""Stores that live in NATS: only a running `ore serve` can open them."""

CONNECT_TIMEOUT = 5.0
_PAGE = 1000


class ControlStore:
    """`ore serve`'s threads through its operator API (see the module docstring)."""

    def __init__(self, client: ControlClient, name: str, location: str) -> None:
        self._client = client
        self.name = name
        self.location = location

    @classmethod
    async def connect(cls, settings: OreSettings, servers: list[str], name: str) -> ControlStore:
        """Connect to the core at `servers` with the `[nats]` credentials (an admin's)."""
        if not servers:
            raise OreError(
                f"the {name} store lives in NATS and only `ore serve` opens it: start "
                f"`ore serve --store {name}`, or set nats.url to the NATS of the one running"
            )
        nats = settings.nats
        client = await ControlClient.connect(
            servers,
            name="ore-threads",
            prefix=nats.subject_prefix,
            credentials=NatsCredentials.from_settings(nats),
            connect_timeout=CONNECT_TIMEOUT,
            reconnect=False,  # a command: a lost server is its error, not a wait
        )
        return cls(client, name, f"{name} (through ore serve at {', '.join(servers)})")

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """Thread ids in ascending order after `after`, at most `limit` (all: None)."""
        ids: builtins.list[str] = []
        cursor: str | None = after or None
        while limit is None or len(ids) < limit:
            body: dict[str, Any] = {"limit": _PAGE if limit is None else min(_PAGE, limit)}
            if cursor:
                body["after"] = cursor
            page = await self._client.call("threads.list", body)
            ids += [str(thread_id) for thread_id in page["threads"]]
            cursor = page.get("next")
            if not cursor:
                break
        return ids if limit is None else ids[:limit]

    async def get(self, thread_id: str) -> Thread:
        """The thread with its metadata, tip and active path; ThreadNotFound if unknown."""
        try:
            info = await self._client.call("threads.get", {"id": thread_id})
            path = await self._client.call("threads.turns", {"id": thread_id})
        except ApiError as exc:
            if exc.status == 404:
                raise ThreadNotFound(f"thread {thread_id} not found in {self.location}") from exc
            raise
        turns = [turn_from_dict(turn) for turn in path["turns"]]
        return build_thread(thread_id, turns, str(info["current_tip"]), info["metadata"])

    async def list(self) -> builtins.list[Thread]:
        """Every thread (ones deleted meanwhile are skipped)."""
        threads: builtins.list[Thread] = []
        for thread_id in await self.list_ids():
            try:
                threads.append(await self.get(thread_id))
            except ThreadNotFound:
                continue
        return threads

    async def save(self, thread: Thread) -> None:
        """Move the stored thread's tip to `thread`'s (the only change `ore threads` makes)."""
        await self._client.call("threads.fork", {"id": thread.id, "turn_id": thread.current_tip})

    async def delete(self, thread_id: str) -> bool:
        reply = await self._client.call("threads.delete", {"id": thread_id})
        return bool(reply["deleted"])

    async def close(self) -> None:
        await self._client.close()


async def open_threads(
    settings: OreSettings, plugins: pluggy.PluginManager, section: Mapping[str, Any]
) -> Store | ControlStore:
    """The store `section` names, opened here; for one in NATS, the running serve's."""
    name = str(section["name"])
    if name in NATS_STORES:
        running = find_running()
        servers = [running.nats_url] if running is not None else list(settings.nats.url or [])
        return await ControlStore.connect(settings, servers, name)
    return open_store(collect_registrations(plugins, settings), section)
