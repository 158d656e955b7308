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

The client of the core and of every conduit: `connect_nats` makes an `OreNatsClient`,
nats-py's client with less Python work per received message (its protocol parser,
`ore_core._nats.parser`; header parsing; callbacks called by the read loop itself;
sending is `ore_core._nats.wire`). It overrides private nats-py methods (of the nats-py
releases pyproject.toml pins); the tests in tests/conduit/test_client_work.py and
test_parser.py fail if a nats-py release stops calling them, and at connect
`ore_core._nats.internals` checks that the private names exist: if one is missing (or
`ORE_NATS_PLAIN=1`), `connect_nats` returns nats-py's own client and every function
here and in `wire` takes its public path.

Supported servers: an old server does not refuse what it does not know (nats-server
2.9 stores a stream config with a `subject_transform` it silently drops, and the
failure only shows up later as a cryptic consumer error). So right after connecting,
`check_server` compares the version in the server's INFO with what the caller's
features need, and the core asks JetStream for the account's info (`check_jetstream`;
conduits may have no `$JS.API` permission at all, so for them the server's INFO flag
must do). Every refusal is one line: the server's version, the minimum, what to do.
The features are declared here, next to the versions that brought them; the core's
stream layout (`ore_core.bus.server.layout`) says which of them each stream uses.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AccountInfo
from nats.js.errors import APIError

from ore_core.errors import BusError, PermissionDenied

if TYPE_CHECKING:
    from ore_core.config import NatsSettings

__all__ = [
    "CONDUIT_FEATURES",
    "CORE_FEATURES",
    "DIRECT_GET",
    "JETSTREAM",
    "LIMIT_ERROR_CODES",
    "MIN_SERVER_VERSION",
    "PER_KEY_TTL",
    "PRIORITY_GROUPS",
    "REPUBLISH",
    "SUBJECT_TRANSFORM",
    "TESTED_SERVER_VERSIONS",
    "Feature",
    "NatsCredentials",
    "OreNatsClient",
    "PermissionWatch",
    "ServerUnsupported",
    "TlsFiles",
    "Version",
    "check_jetstream",
    "check_server",
    "connect_nats",
    "format_version",
    "parse_version",
    "server_version",
    "subscribe_inline",
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


_PLAIN_HEADERS = re.compile(rb"(?:[!-9;-~]+:[ -~]*\r\n)*(?:\r\n)?")
"""A header block of `Name: value` lines in printable ASCII, names without spaces."""

_PLAIN_HEADER = re.compile(r"([!-9;-~]+): *((?:[ -~]*[!-~])?) *\r\n")
"""One line of a plain block: its name, and its value without the spaces around it."""


InlineCallback = Callable[[Msg], None]
"""Handles one message of an inline subscription, at once and without awaiting."""


class OreNatsClient(NatsClient):
    """nats-py's client, with less Python work per received message.

    Three costs of nats-py's that a conduit pays on every message of a turn:

    - Parsing: nats-py's parser deletes every frame from the front of its buffer and
      awaits a coroutine per message; `OreParser` reads a whole read in one pass and
      delivers inline subscriptions' messages without a coroutine.
    - Headers: nats-py parses each line with a generator per name (a republished batch
      carries eight headers: ~10 µs). A block made only of plain `Name: value` lines
      (printable ASCII, what NATS servers and ore write) is split here into exactly
      what nats-py returns; anything else goes to nats-py's own parser.
    - Delivery: nats-py queues every message for a task of its subscription, which
      then awaits the callback: a queue, a wake-up and a coroutine per message.
      `subscribe_inline` callbacks are plain functions called by the read loop as the
      message is parsed; they must not block, and what they raise goes to the
      connection's `error_cb` like a callback's error.

    Used by `ConduitClient.connect` and the core (`CoreService`: the Puller's
    deliveries and the Pipeline's publish acks); `subscribe_inline` falls back to an
    ordinary subscription on any other connection, which works the same, only slower.
    """

    def __init__(self) -> None:
        super().__init__()
        # Imported with the first client: `import ore_core.conduit` stays small.
        from ore_core._nats.parser import OreParser

        self._inline: dict[int, InlineCallback] = {}
        self._ps = OreParser(self)

    async def subscribe_inline(self, subject: str, callback: InlineCallback) -> Subscription:
        """Subscribe `subject`, calling `callback` from the read loop for each message."""
        subscription = await self.subscribe(subject)
        self._inline[subscription._id] = callback
        return subscription

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        callback = self._inline.get(sid)
        subscription = self._subs.get(sid)
        if callback is None or subscription is None:
            # nats-py's annotation says bytes; its parser passes None for a MSG itself.
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        parsed = await self._process_headers(headers) if headers else None
        failed = self._call_inline(callback, subscription, sid, subject, reply, data, parsed)
        if failed is not None:
            await self._error_cb(failed)

    def _call_inline(
        self,
        callback: InlineCallback,
        subscription: Subscription,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: dict[str, str] | None,
    ) -> Exception | None:
        """Count the message as nats-py does, build it and call `callback` with it; what
        the callback raised (for the caller to `await self._error_cb(...)`), if anything.

        The one delivery of an inline subscription's message, from `_process_msg` and
        from `OreParser.parse` (which calls it without a coroutine).
        """
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        subscription._received += 1
        try:
            callback(self._build_message(sid, subject, reply, data, headers))
        except Exception as exc:
            return exc
        return None

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._inline.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        if _PLAIN_HEADERS.fullmatch(raw) is None:
            parsed: dict[str, str] = NatsClient._parse_header_lines(raw)
            return parsed
        return dict(_PLAIN_HEADER.findall(raw.decode()))


async def subscribe_inline(nc: NatsClient, subject: str, callback: InlineCallback) -> Subscription:
    """`OreNatsClient.subscribe_inline` on any connection (a callback task elsewhere)."""
    if isinstance(nc, OreNatsClient):
        return await nc.subscribe_inline(subject, callback)

    async def handle(msg: Msg) -> None:
        callback(msg)

    return await nc.subscribe(subject, cb=handle)


async def connect_nats(servers: list[str], **options: Any) -> NatsClient:
    """Connect an `OreNatsClient` (`nats.connect` with the same options), or nats-py's
    own client when its private names are missing (`private_path_usable`).

    Refused credentials and a server that is not NATS raise `NatsRefused` at once
    (`ore_core._nats.first_connect`) instead of being retried until a timeout.
    """
    # Imported here: only connecting needs them, and the SDK's import stays small.
    from ore_core._nats.first_connect import CREDENTIAL_OPTIONS, FirstConnect, NatsRefused
    from ore_core._nats.internals import private_path_usable

    nc = OreNatsClient() if private_path_usable() else NatsClient()
    anonymous = not any(options.get(key) for key in CREDENTIAL_OPTIONS)
    first = FirstConnect(servers, options.pop("error_cb", None), anonymous=anonymous)
    try:
        await nc.connect(servers, error_cb=first.on_error, **options)
    except NatsRefused:
        await nc.close()
        raise
    first.connected()
    return nc


async def subscriptions_registered(nc: NatsClient, within: int = 5) -> None:
    """Return once the server has processed every subscription made on `nc` so far."""
    from ore_core._nats.internals import private_path_usable

    if private_path_usable():  # on any nats-py client: the hook is nats-py's
        await nc._flush_pending(force_flush=True)
    else:  # without the private hook: one round trip lets its flusher run
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
        self._publishers: defaultdict[str, set[asyncio.Future[Any]]] = defaultdict(set)
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
                waiter.set_exception(PermissionDenied("publish to", subject))
        return True

    def watch_publish(self, subject: str, waiter: asyncio.Future[Any]) -> None:
        """Fail `waiter` with PermissionDenied if the server refuses a publish to `subject`.

        `forget_publish` ends the watch; a waiter already done is left alone.
        """
        self._publishers[subject.lower()].add(waiter)

    def forget_publish(self, subject: str, waiter: asyncio.Future[Any]) -> None:
        """End a `watch_publish`."""
        key = subject.lower()
        waiters = self._publishers.get(key)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._publishers[key]

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
        """Await `call` (which publishes to `subject`); PermissionDenied if it is refused.

        `call` runs in a task of its own, raced against the refusal. Not in the
        caller's task: nats-py's `request` awaits `asyncio.wait_for`, which on Python
        3.11 loses a cancellation that comes as the reply does, and a conduit being
        stopped then hangs in its next wait (seen with durable feeds' cursor saves).
        """
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.watch_publish(subject, refused)
        task = asyncio.ensure_future(call)
        either: set[asyncio.Future[Any]] = {task, refused}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.forget_publish(subject, refused)
            if not task.done():
                task.cancel()
        if refused.done():
            if task.done() and not task.cancelled():
                task.exception()  # the refusal is the error worth reporting
            refused.exception()  # retrieved, so that asyncio does not log it as lost
            raise PermissionDenied("publish to", subject)
        return task.result()


Version = tuple[int, int, int]

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> Version | None:
    """`"2.10.25"` (or `v2.10.25-beta`) -> `(2, 10, 25)`; None when it is no version."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def format_version(version: Version) -> str:
    """`(2, 10, 0)` -> `"2.10.0"`."""
    return ".".join(str(part) for part in version)


@dataclass(frozen=True, slots=True)
class Feature:
    """A server capability ore relies on, the release that brought it, and what for."""

    name: str
    since: Version
    used_for: str


JETSTREAM = Feature("JetStream with headers", (2, 2, 0), "every stream and consumer")
REPUBLISH = Feature("stream RePublish", (2, 9, 0), "live output with Nats-Last-Sequence")
DIRECT_GET = Feature("direct get (allow_direct)", (2, 9, 0), "catch-up reads of ORE_EVENTS")
SUBJECT_TRANSFORM = Feature(
    "stream subject transforms", (2, 10, 0), "partitioning ORE_IN by thread"
)
PER_KEY_TTL = Feature("per-message TTL", (2, 11, 0), "KV keys that expire alone")
PRIORITY_GROUPS = Feature("consumer priority groups", (2, 11, 0), "pinned or overflow consumers")

MIN_SERVER_VERSION: Version = (2, 10, 0)
"""The oldest nats-server the core supports. It is what the default layout's features
need (`Layout.required_version`; a test keeps the two equal): ingress partitioning by a
stream subject transform needs 2.10. Entries that use a newer feature (per-key TTL,
priority groups: 2.11) raise the requirement for the configuration that has them."""

TESTED_SERVER_VERSIONS = ("2.10.25", "2.11.11", "2.15.1")
"""Servers the test suite runs the core against (oldest supported, 2.11, the bundled one)."""

CORE_FEATURES: tuple[Feature, ...] = (JETSTREAM,)
"""What `ore serve` needs besides the features of its layout's entries."""

CONDUIT_FEATURES: tuple[Feature, ...] = (JETSTREAM, REPUBLISH)
"""What a conduit needs: publishing with acks into ORE_IN and republished output."""


LIMIT_ERROR_CODES = frozenset({10002, 10023, 10028, 10047, 10077})
"""JetStream `err_code`s of a publish refused by a limit: the account's resource limits,
insufficient resources,
memory or storage resources exceeded, and a stream's own limits (`maximum bytes
exceeded`, `maximum messages per subject exceeded`, ... with discard new). Space may
free up: such a publish is held and sent again, never given up."""


class ServerUnsupported(BusError):
    """The NATS server is too old for, or lacks, what ore needs (one line: what to do)."""


def server_version(nc: NatsClient) -> Version | None:
    """The connected server's version from its INFO, None if it sent none we can read."""
    return parse_version(_server_info(nc).get("version", ""))


def _server_info(nc: NatsClient) -> dict[str, str]:
    """The version and JetStream flag of the server's INFO, as text.

    nats-py keeps the INFO private; its public `connected_server_version` has only the
    version, so on the plain path the JetStream flag is taken as set (the core asks
    JetStream itself, `check_jetstream`; a conduit finds out at its first publish).
    """
    if isinstance(nc, OreNatsClient):
        info = nc._server_info
        return {"version": str(info.get("version", "")), "jetstream": str(info.get("jetstream"))}
    version = nc.connected_server_version
    try:
        text = f"{version.major}.{version.minor}.{version.patch}"
    except ValueError:
        text = ""
    return {"version": text, "jetstream": "True"}


def _where(nc: NatsClient) -> str:
    url = nc.connected_url
    return f"{url.hostname}:{url.port}" if url is not None else "the NATS server"


_NOT_ENABLED = (10039, 10076)  # JetStream not enabled for the account / at all
_TIMEOUT = 5.0


def check_server(
    nc: NatsClient, required: Version, features: Sequence[Feature], *, who: str
) -> Version:
    """Refuse a server older than `required` or without JetStream; returns its version.

    `who` names the command (`ore serve`, `conduit slack`); `features` are those the
    caller uses, and the newest ones the server lacks are named in the refusal.
    """
    info = _server_info(nc)
    version = parse_version(info["version"])
    text = info["version"] or "unknown"
    if version is None or version < required:
        missing = [f for f in features if version is None or version < f.since]
        because = "; ".join(f"{f.name}, for {f.used_for}" for f in missing)
        raise ServerUnsupported(
            f"NATS server at {_where(nc)} is {text}; {who} needs nats-server >= "
            f"{format_version(required)}"
            + (f" ({because})" if because else "")
            + ": upgrade the server, or run without --nats to use the embedded server"
        )
    if info["jetstream"] != "True":
        raise ServerUnsupported(
            f"NATS server at {_where(nc)} ({text}) runs without JetStream; {who} needs it: "
            "start nats-server with -js (or a `jetstream {}` block), or run without --nats "
            "to use the embedded server"
        )
    return version


async def check_jetstream(nc: NatsClient, *, who: str) -> AccountInfo:
    """The account's JetStream info; one line when this account has no JetStream."""
    try:
        info: AccountInfo = await nc.jetstream(timeout=_TIMEOUT).account_info()
    except (NatsTimeoutError, TimeoutError):
        raise BusError(
            f"JetStream did not answer the account info request at {_where(nc)}: the NATS "
            f"user of {who} probably lacks permission for $JS.API.INFO; grant `$JS.API.>` "
            "to the core's user (docs/operating-nats.md)"
        ) from None
    except (NoRespondersError, APIError) as exc:
        code = getattr(exc, "code", None)
        if isinstance(exc, NoRespondersError) or code == 503 or exc.err_code in _NOT_ENABLED:
            raise ServerUnsupported(
                f"the NATS account of this connection to {_where(nc)} has no JetStream; "
                f"{who} needs it: enable it for the account (`jetstream: enabled` in the "
                "account config), or run without --nats to use the embedded server"
            ) from None
        raise BusError(
            f"JetStream account info failed at {_where(nc)}: {exc.description}"
        ) from None
    return info
