"""Which NATS servers ore supports, and the check every connection makes first.

An old server does not refuse what it does not know: nats-server 2.9 stores a stream
config with a `subject_transform` it silently drops, and the failure only shows up
later as a cryptic consumer error. So right after connecting, the version in the
server's INFO is compared with what the caller's features need, and the core asks
JetStream for the account's info (conduits may have no `$JS.API` permission at all, so
for them the server's INFO flag must do). Every refusal is one line: the server's
version, the minimum, and what to do.

The features are declared here, next to the versions that brought them; the core's
stream layout (`ore_core.bus.layout`) says which of them each stream uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AccountInfo
from nats.js.errors import APIError

from ore_core.errors import BusError

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
    "ServerUnsupported",
    "Version",
    "check_jetstream",
    "check_server",
    "format_version",
    "parse_version",
    "server_version",
]

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
    return parse_version(str(nc._server_info.get("version", "")))


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
    version = server_version(nc)
    text = str(nc._server_info.get("version", "unknown"))
    if version is None or version < required:
        missing = [f for f in features if version is None or version < f.since]
        because = "; ".join(f"{f.name}, for {f.used_for}" for f in missing)
        raise ServerUnsupported(
            f"NATS server at {_where(nc)} is {text}; {who} needs nats-server >= "
            f"{format_version(required)}"
            + (f" ({because})" if because else "")
            + ": upgrade the server, or run without --nats to use the embedded server"
        )
    if not nc._server_info.get("jetstream", False):
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
