"""What a failed first connect to NATS means, so that a refusal is said at once.

nats-py retries every failed first attempt until the caller's timeout, so wrong
credentials and a port that is not NATS at all used to read "cannot reach NATS ... is
the server running" after several seconds. A server that answers is reachable: what
it answered says what to fix. `FirstConnect` sits in the connection's error callback
during the first connect and raises `NatsRefused` on the first answer that retrying
cannot change:

- `Authorization Violation` (wrong, missing or expired credentials): NATS refused the
  user; check the `[nats]` credentials and the server's list of users.
- no INFO greeting (another protocol's banner, or silence from a port that accepted
  the connection: an HTTP server waits for a request): not a NATS server; check the
  port.

An unreachable server (refused or dropped connections) is left to the caller's timeout,
as before. After the first connect the callback passes every error on unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from ore_core.errors import BusError

__all__ = ["CREDENTIAL_OPTIONS", "FirstConnect", "NatsRefused", "refusal"]

CREDENTIAL_OPTIONS = (
    "user",
    "password",
    "token",
    "nkeys_seed",
    "nkeys_seed_str",
    "user_credentials",
)
"""nats-py's connect options that carry credentials."""

ErrorCallback = Callable[[Exception], Awaitable[None]]

GREETING_WAIT = 1.0
"""How long a port that accepted a connection may stay silent: nats-server greets at once."""

_CREDENTIALS = (
    "check the credentials in the [nats] settings (nats.user / nats.password, nats.token, "
    "nats.nkey_seed_file or nats.creds_file: `ore auth` writes them into core.toml and "
    "each conduit's file) and that the server's authorization lists that user"
)
_PORT = (
    "check the host and port in --nats / nats.url (NATS clients use port 4222 unless "
    "the server says otherwise; 8222 is its HTTP monitoring port)"
)
_AUTH_ERRORS = ("authorization violation", "authentication", "user authentication")
_NOT_NATS_ERRORS = ("expecting info", "info message")


class NatsRefused(BusError):
    """The NATS URL answered the first connect in a way no retry can change."""


def refusal(
    error: BaseException, servers: Sequence[str], *, anonymous: bool = False
) -> NatsRefused | None:
    """The refusal `error` reports at a first connect to `servers`, or None (retry).

    `anonymous`: the connection offered no credentials at all.
    """
    where = ", ".join(servers)
    text = str(error).lower()
    if any(marker in text for marker in _AUTH_ERRORS):
        reason = str(error).removeprefix("nats: ").strip("'\" ")
        if anonymous:
            return NatsRefused(
                f"NATS at {where} refused a connection without credentials ({reason}): "
                f"it needs a user; {_CREDENTIALS}"
            )
        return NatsRefused(f"NATS at {where} refused the user ({reason}): {_CREDENTIALS}")
    if any(marker in text for marker in _NOT_NATS_ERRORS):
        return not_nats(where)
    return None


def not_nats(where: str) -> NatsRefused:
    """The error for a server at `where` that answered but is not NATS."""
    return NatsRefused(f"the server at {where} answered but is not a NATS server: {_PORT}")


async def silent_port(server: str, wait: float = GREETING_WAIT) -> bool:
    """True when `server` accepts a TCP connection but sends no NATS greeting in `wait` s."""
    parts = urlsplit(server if "://" in server else f"nats://{server}")
    try:
        async with asyncio.timeout(wait):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 4222)
    except (OSError, TimeoutError):
        return False  # not reachable: the caller's timeout says so
    try:
        async with asyncio.timeout(wait):
            greeting = await reader.read(4)
    except (OSError, TimeoutError):
        greeting = b""
    finally:
        writer.close()
    return not greeting.upper().startswith(b"INFO")


class FirstConnect:
    """The error callback of one connection: refusals raise during the first connect."""

    def __init__(
        self, servers: Sequence[str], error_cb: ErrorCallback | None, *, anonymous: bool = False
    ) -> None:
        self._servers = list(servers)
        self._error_cb = error_cb
        self._anonymous = anonymous
        self._connecting = True

    def connected(self) -> None:
        """The first connect succeeded: from now on every error goes to the callback."""
        self._connecting = False

    async def on_error(self, error: Exception) -> None:
        if self._connecting:
            refused = refusal(error, self._servers, anonymous=self._anonymous)
            # No greeting within nats-py's connect timeout: a port that is not NATS?
            silent = refused is None and isinstance(error, TimeoutError)
            if silent and len(self._servers) == 1 and await silent_port(self._servers[0]):
                refused = not_nats(self._servers[0])
            if refused is not None:
                raise refused from error
        if self._error_cb is not None:
            await self._error_cb(error)
