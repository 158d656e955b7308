"""ControlClient: an operator's client of the core's control API (`P.admin.*`).

What `ore threads`, `ore link`, `ore chat`'s look-ups of another namespace and an
operator's scripts use: every thread of every namespace, the links and the gateways
(protocol.md "Control API", the admin methods). A conduit's NATS user may not call them
(`PermissionDenied`); a conduit uses `ConduitClient`, which keeps what a conduit needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client as NatsClient

from ore_core._nats.connection import NatsCredentials, PermissionWatch
from ore_core.conduit.client import ConduitClient, ThreadInfo
from ore_core.conduit.requests import ApiRequests
from ore_core.subjects import DEFAULT_PREFIX, Subjects

__all__ = ["ControlClient"]


class ControlClient:
    """The admin methods of the core at subject prefix `prefix`, over `nc`.

    Build it with `await ControlClient.connect(...)` (its own connection, closed by
    `close`), or on a connection that is already open with `ControlClient(nc, ...)` or
    `ControlClient.beside(client)` (a conduit client's connection whose user is an
    operator's, as in tests); the connection is then left to its owner. API errors
    raise `ApiError`, a core that does not answer `BusError`.
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        request_timeout: float = 5.0,
        permissions: PermissionWatch | None = None,
        owner: ConduitClient | None = None,
    ) -> None:
        self.subjects = Subjects(prefix)
        self._request = ApiRequests(nc, permissions or PermissionWatch(), prefix, request_timeout)
        self._owner = owner

    @classmethod
    async def connect(
        cls,
        servers: str | list[str],
        *,
        name: str = "ore-admin",
        prefix: str = DEFAULT_PREFIX,
        credentials: NatsCredentials | None = None,
        request_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        reconnect: bool = True,
    ) -> ControlClient:
        """Connect to NATS as operator `name`, with replies on `_INBOX` (where an
        operator's user of `ore auth` may listen); the same checks and errors as
        `ConduitClient.connect`, whose connection it opens and closes. A one-shot
        command passes `reconnect=False`: a lost or wrong server is then its one error
        line at once, not a wait."""
        client = await ConduitClient.connect(
            servers,
            name=name,
            prefix=prefix,
            inbox_prefix="_INBOX",
            credentials=credentials,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            reconnect=reconnect,
        )
        return cls(
            client.nc,
            prefix=prefix,
            request_timeout=request_timeout,
            permissions=client.permissions,
            owner=client,
        )

    @classmethod
    def beside(cls, client: ConduitClient) -> ControlClient:
        """The admin methods on `client`'s connection, which stays `client`'s."""
        return cls(client.nc, prefix=client.subjects.prefix, permissions=client.permissions)

    async def close(self) -> None:
        """Close the connection `connect` opened (one given to it stays open)."""
        if self._owner is not None:
            await self._owner.close()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def call(self, method: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Call `P.admin.<method>` (protocol.md lists them) with `body`; its reply."""
        return await self._request(self.subjects.admin(method), body)

    async def get_thread(self, thread_id: str) -> ThreadInfo:
        """Any thread of any namespace."""
        return ThreadInfo.from_reply(await self.call("threads.get", {"id": thread_id}))

    async def delete_thread(self, thread_id: str) -> bool:
        """Delete the thread; False if it did not exist."""
        return bool((await self.call("threads.delete", {"id": thread_id}))["deleted"])
