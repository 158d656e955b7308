"""The NATS connection, as the core and every conduit open and use it.

Credentials and TLS: the core (`CoreService`), every conduit (`ConduitClient`) and
the CLI pass one `NatsCredentials`; `NatsCredentials.from_settings` reads it from the
`[nats]` table of the configuration and `connect_options()` maps it onto nats-py.

The subscription barrier: nats-py's `flush()` writes its PING straight to the socket
while SUB commands may still wait in the client's pending buffer, so a returned flush
does not prove a subscription is live (seen here: requests answered "no responders",
live events missed). `subscriptions_registered` writes the pending buffer first and
then flushes, so the PONG proves the server registered them. It needs no publish
permission.

Permission refusals: NATS reports a subject the user may not use as an `-ERR` on the
connection, not as a reply: without a watch a refused request just times out and a
refused subscription stays silent. The client feeds every connection error to
`PermissionWatch.observe`; calls wrapped in `guard` fail with `PermissionDenied` as
soon as the server refuses their subject, and `watch_subscription` callbacks hear
about refused subscriptions (which the server may report a little after a flush).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nats.aio.client import Client as NatsClient

from ore_core.errors import PermissionDenied

if TYPE_CHECKING:
    from ore_core.config import NatsSettings

__all__ = [
    "PermissionWatch",
    "NatsCredentials",
    "TlsFiles",
    "subscriptions_registered",
]

_StrPath = str | os.PathLike[str]
_SEED = re.compile(r"S[A-Z2-7]{57}")  # an nkey seed, as opposed to a file holding one


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for TLS: `ca_file` to trust the server, `cert_file`+`key_file` for mTLS."""

    ca_file: _StrPath | None = None
    cert_file: _StrPath | None = None
    key_file: _StrPath | None = None

    def context(self) -> ssl.SSLContext:
        """An SSL context that verifies the server (with `ca_file` if given)."""
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=None if self.ca_file is None else str(self.ca_file)
        )
        if self.cert_file is not None:
            key = None if self.key_file is None else str(self.key_file)
            context.load_cert_chain(str(self.cert_file), key)
        return context


@dataclass(frozen=True, slots=True)
class NatsCredentials:
    """How a connection authenticates to NATS: one object for the core, conduits and CLI.

    `user`+`password`, `token`, `nkey_seed` (a seed `SU...` or the path of a file
    holding one) and `creds_file` (a `.creds` file: JWT + seed) need the server's
    matching setup (nkeys and creds need the `nkeys` package); `tls` is a ready
    SSLContext or `TlsFiles`. All unset: no authentication, and nats-py's TLS defaults
    (TLS only for `tls://` URLs). `repr` never shows the password or the token.
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    nkey_seed: str | _StrPath | None = field(default=None, repr=False)
    creds_file: _StrPath | None = None
    tls: ssl.SSLContext | TlsFiles | None = None

    @classmethod
    def from_settings(cls, nats: NatsSettings) -> NatsCredentials:
        """The credentials and TLS files of the `[nats]` settings."""
        tls_files = (nats.tls_ca_file, nats.tls_cert_file, nats.tls_key_file)
        return cls(
            user=nats.user,
            password=nats.password.get_secret_value() if nats.password else None,
            token=nats.token.get_secret_value() if nats.token else None,
            nkey_seed=nats.nkey_seed_file,
            creds_file=nats.creds_file,
            tls=TlsFiles(*tls_files) if any(tls_files) else None,
        )

    def connect_options(self) -> dict[str, Any]:
        """The nats-py `connect` keyword arguments for these credentials."""
        tls = self.tls
        options: dict[str, Any] = {
            "user": self.user,
            "password": self.password,
            "token": self.token,
            "user_credentials": None if self.creds_file is None else str(self.creds_file),
            "tls": tls.context() if isinstance(tls, TlsFiles) else tls,
        }
        if self.nkey_seed is not None:
            seed = str(self.nkey_seed).strip()
            if _SEED.fullmatch(seed):
                options["nkeys_seed_str"] = seed
            else:
                options["nkeys_seed"] = str(Path(seed))
        return options


async def subscriptions_registered(nc: NatsClient, within: int = 5) -> None:
    """Return once the server has processed every subscription made on `nc` so far."""
    write_pending = getattr(nc, "_flush_pending", None)
    if write_pending is not None:
        await write_pending(force_flush=True)
    else:  # a client without the private hook: one round trip lets its flusher run
        await nc.flush(within)
    await nc.flush(within)


_T = TypeVar("_T")
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"', re.I)

RefusalCallback = Callable[[PermissionDenied], object]


class PermissionWatch:
    """Matches the server's permission errors to the calls that caused them.

    One per connection; every method runs on the connection's event loop. nats-py
    lowercases server errors, so subjects are compared lowercased.
    """

    def __init__(self) -> None:
        self._publishers: defaultdict[str, set[asyncio.Future[None]]] = defaultdict(set)
        self._subscribers: defaultdict[str, list[RefusalCallback]] = defaultdict(list)

    def observe(self, error: Exception) -> bool:
        """Dispatch `error` if it is a permission violation; True when it was one."""
        match = _VIOLATION.search(str(error))
        if match is None:
            return False
        action, subject = match.groups()
        key = subject.lower()
        if action.lower() == "subscription":
            for callback in list(self._subscribers.get(key, ())):
                callback(PermissionDenied("subscribe to", subject))
            return True
        for waiter in self._publishers.get(key, ()):
            if not waiter.done():
                waiter.set_result(None)
        return True

    def watch_subscription(self, subject: str, on_refused: RefusalCallback) -> Callable[[], None]:
        """Call `on_refused` if the server refuses a subscription to `subject`; unwatch."""
        key = subject.lower()
        self._subscribers[key].append(on_refused)

        def unwatch() -> None:
            callbacks = self._subscribers.get(key, [])
            if on_refused in callbacks:
                callbacks.remove(on_refused)
            if not callbacks:
                self._subscribers.pop(key, None)

        return unwatch

    async def guard(self, subject: str, call: Awaitable[_T]) -> _T:
        """Await `call` (which publishes to `subject`); PermissionDenied if it is refused."""
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = subject.lower()
        waiters = self._publishers[key]
        waiters.add(refused)
        task = asyncio.ensure_future(call)
        either: set[asyncio.Future[Any]] = {task, refused}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiters.discard(refused)
            if not waiters:
                self._publishers.pop(key, None)
            if not task.done():
                task.cancel()
        if refused.done():
            if task.done() and not task.cancelled():
                task.exception()  # the refusal is the error worth reporting
            raise PermissionDenied("publish to", subject)
        return task.result()
