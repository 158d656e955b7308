"""The private parts of nats-py that ore's transport relies on, checked before use.

`OreNatsClient` (its parser, inline callbacks and header parsing) and the sends of
`ore_core._nats.wire` read and write nats-py's private attributes: they are faster
than its coroutine chain, but a nats-py release may rename or drop any of them.
pyproject.toml pins the releases they are tested with; `private_path_usable` checks at
connect that every name listed here still exists. When one is missing, it logs one
warning and ore runs on the plain nats-py client and its public API (slower, the same
messages); `ORE_NATS_PLAIN=1` chooses that path on purpose (the tests run the bus and
the SDK through it).
"""

from __future__ import annotations

import functools
import os

import nats.aio.client
import nats.protocol.parser
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["PLAIN_ENV", "PRIVATE_NAMES", "missing_internals", "private_path_usable"]

log = structlog.get_logger("ore.nats")

PLAIN_ENV = "ORE_NATS_PLAIN"
"""Set to `1` to run on the plain nats-py client even when its internals are there."""

PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "Client": (
        "_build_message",
        "_flush_pending",
        "_parse_header_lines",
        "_process_headers",
        "_process_msg",
        "_remove_sub",
    ),
    "Client()": (
        "_error_cb",
        "_flush_queue",
        "_flusher_task",
        "_max_payload",
        "_max_pending_size",
        "_pending",
        "_pending_data_size",
        "_ps",
        "_server_info",
        "_status",
        "_subs",
        "_transport",
    ),
    "Parser()": ("buf", "state", "needed", "header_needed"),
    "nats.protocol.parser": ("AWAITING_CONTROL_LINE", "CRLF_SIZE"),
    "Msg": ("_ackd",),
    "Subscription": ("_id", "_received"),
}
"""Every private name of nats-py the private path uses, by where it lives (`X()`: on a
fresh instance of X)."""


def missing_internals(names: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """The names of `PRIVATE_NAMES` (or `names`, keyed alike) this nats-py lacks."""
    holders: dict[str, object] = {
        "Client": NatsClient,
        "Client()": NatsClient(),
        "Parser()": nats.protocol.parser.Parser(),
        "nats.protocol.parser": nats.protocol.parser,
        "Msg": Msg,
        "Subscription": Subscription,
    }
    missing = []
    for where, attributes in (PRIVATE_NAMES if names is None else names).items():
        holder = holders.get(where)
        missing += [f"{where}.{name}" for name in attributes if not _has(holder, name)]
    return missing


def _has(holder: object, name: str) -> bool:
    """`hasattr`; for a class, also a name its `__init__` sets on every instance."""
    if hasattr(holder, name):
        return True
    code = getattr(getattr(holder, "__init__", None), "__code__", None)
    return isinstance(holder, type) and code is not None and name in code.co_names


@functools.cache
def _checked() -> bool:
    missing = missing_internals()
    if missing:
        log.warning(
            "nats-py lacks private names ore's fast transport uses; running on the plain "
            "nats-py client (slower, same messages): install the nats-py version "
            "pyproject.toml pins",
            missing=", ".join(missing),
            nats_version=getattr(nats.aio.client, "__version__", "unknown"),
        )
    return not missing


def private_path_usable() -> bool:
    """True when the fast transport may run: not refused by `ORE_NATS_PLAIN`, and every
    private name it uses is there (checked once per process; a warning if not)."""
    if os.environ.get(PLAIN_ENV, "") not in ("", "0"):
        return False
    return _checked()
