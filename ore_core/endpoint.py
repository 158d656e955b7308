"""Endpoints: a conduit namespace plus that conduit's own key for a conversation.

Written `NS:KEY=VALUE` in full, or `NS:VALUE` when the conduit's `conversation_key`
names the key (resolved by the caller, who knows the installed conduits). The key is
one of the namespace's lookup keys (`NS.` prefix, as `threads.lookup` requires) or
`id`, which names the thread id itself (the terminal has no platform key).

Vocabulary (it imports only the vocabulary), like subjects: the settings model of
gateways (`ore_core.config`) validates endpoints with it, and the bridge
(`ore_core.bridge`) builds on it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ore_core.errors import OreError
from ore_core.ids import is_valid_thread_id
from ore_core.subjects import is_valid_namespace

__all__ = [
    "ANSWERS",
    "DIRECTIONS",
    "GATEWAY_ANSWER_KEY",
    "ID_KEY",
    "MAX_KEY_LENGTH",
    "MAX_VALUE_LENGTH",
    "Answer",
    "Direction",
    "Endpoint",
    "EndpointError",
    "KeyForm",
    "parse_endpoint",
]

Direction = Literal["in", "out", "inout"]
"""`in`: the endpoint's messages reach the thread; `out`: it is shown the thread;
`inout`: both."""
DIRECTIONS: tuple[Direction, ...] = ("in", "out", "inout")
Answer = Literal["origin", "all", "none"]
"""Who answers in a linked thread: the agent for the origin's message (`origin`, shown
where the message came from), the same shown everywhere (`all`), or nobody (`none`: a
pure human relay, no model call)."""
ANSWERS: tuple[Answer, ...] = ("origin", "all", "none")

GATEWAY_ANSWER_KEY = "ore.gateway.answer"
"""Thread metadata: who answers in a linked thread (`origin`, `all`, `none`), written by
the core from the thread's links; the stream makes no model call under `none`."""

ID_KEY = "id"
"""The key whose value is the thread id itself (an endpoint without platform keys)."""
MAX_KEY_LENGTH = 128
MAX_VALUE_LENGTH = 512


class EndpointError(OreError, ValueError):
    """An endpoint that cannot be used; the message says what is wrong and what to write."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One conduit's conversation: `namespace`, the lookup `key` and its `value`."""

    namespace: str
    key: str
    value: str

    def __post_init__(self) -> None:
        _check(self.namespace, self.key, self.value)

    @property
    def hash(self) -> str:
        """First 32 hex of sha256 of `key=value`: the record's KV key token."""
        return hashlib.sha256(f"{self.key}={self.value}".encode()).hexdigest()[:32]

    def __str__(self) -> str:
        return f"{self.namespace}:{self.key}={self.value}"

    def as_dict(self) -> dict[str, str]:
        """The endpoint as records and replies spell it."""
        return {"namespace": self.namespace, "key": self.key, "value": self.value}


def _check(namespace: str, key: str, value: str) -> None:
    if not is_valid_namespace(namespace):
        raise EndpointError(
            f"invalid conduit namespace {namespace[:40]!r}: use 1-32 characters from a-z, "
            "0-9, '_' and '-' (a conduit's namespace is its name unless configured)"
        )
    if not key or len(key) > MAX_KEY_LENGTH:
        raise EndpointError(
            f"endpoint {namespace}: the key must have 1-{MAX_KEY_LENGTH} characters, got {len(key)}"
        )
    if key != ID_KEY and (not key.startswith(namespace + ".") or key == namespace + "."):
        raise EndpointError(
            f"endpoint {namespace}: key {key[:60]!r} is outside the namespace: keys of "
            f"{namespace} start with '{namespace}.' (e.g. '{namespace}.thread'), or are "
            f"'{ID_KEY}' for the thread id itself"
        )
    if not value or len(value) > MAX_VALUE_LENGTH:
        raise EndpointError(
            f"endpoint {namespace}:{key}: the value must have 1-{MAX_VALUE_LENGTH} "
            f"characters, got {len(value)}"
        )
    if key == ID_KEY and not is_valid_thread_id(value):
        raise EndpointError(
            f"endpoint {namespace}:{ID_KEY}={value[:60]!r}: an '{ID_KEY}' endpoint names a "
            "thread id (1-128 characters from A-Z, a-z, 0-9, '_' and '-')"
        )


@dataclass(frozen=True, slots=True)
class KeyForm:
    """How a conduit spells its `conversation_key`'s value: `spelling` names the parts
    in capitals, joined by what separates them (`ENTERPRISE:TEAM:CHANNEL:THREAD_TS`),
    `example` is one real value. A value matches when it has the same separators with
    a non-empty part between each (the check of a gateway's or a link's endpoint)."""

    spelling: str
    example: str

    def __post_init__(self) -> None:
        if not self.matches(self.example):
            raise ValueError(f"example {self.example!r} is not of the form {self.spelling!r}")

    def matches(self, value: str) -> bool:
        separators = "".join(sorted(set(re.sub(r"[A-Z0-9_]", "", self.spelling))))
        part = f"[^{re.escape(separators)}]+" if separators else ".+"
        pattern = re.sub(r"[A-Z][A-Z0-9_]*", lambda _: part, re.escape(self.spelling))
        return re.fullmatch(pattern, value) is not None

    def check(self, endpoint: Endpoint, conversation_key: str) -> None:
        """EndpointError, naming the expected form, unless `endpoint` is a conversation
        of its conduit as the conduit looks it up (its key, a value of this form)."""
        namespace = endpoint.namespace
        expected = (
            f"write {namespace}:{self.spelling} (e.g. {namespace}:{self.example}), the "
            f"{namespace} conduit's {conversation_key}"
        )
        if endpoint.key != conversation_key:
            raise EndpointError(
                f"endpoint {endpoint}: the {namespace} conduit looks conversations up by "
                f"{conversation_key}, never by {endpoint.key}: {expected}"
            )
        if not self.matches(endpoint.value):
            raise EndpointError(
                f"endpoint {endpoint.namespace}:{endpoint.value[:80]} is not a {namespace} "
                f"conversation: {expected}"
            )


def parse_endpoint(
    text: str,
    conversation_key: Callable[[str], str | None],
    key_form: Callable[[str], KeyForm | None] = lambda namespace: None,
) -> Endpoint:
    """`NS:KEY=VALUE` or `NS:VALUE` as an Endpoint.

    `conversation_key(NS)` names the key of the short form (the installed conduit's
    `conversation_key`); None means no installed conduit of that name declares one,
    which only the full form can do without. A `=` in the short form's value is fine
    when the conduit's key is known and the text before `=` is not a key of the
    namespace. `key_form(NS)` is the installed conduit's declared `KeyForm`: an
    endpoint of a conduit that declares one must be a conversation of that form.
    """
    endpoint = _parse(text, conversation_key)
    form = key_form(endpoint.namespace)
    named = conversation_key(endpoint.namespace)
    if form is not None and named is not None:
        form.check(endpoint, named)
    return endpoint


def _parse(text: str, conversation_key: Callable[[str], str | None]) -> Endpoint:
    namespace, colon, rest = text.partition(":")
    if not colon or not namespace or not rest:
        raise EndpointError(
            f"endpoint {text[:80]!r}: write CONDUIT:VALUE or CONDUIT:KEY=VALUE "
            "(e.g. nats:room or nats:nats.channel=room)"
        )
    key, equals, value = rest.partition("=")
    if equals and (key == ID_KEY or key.startswith(namespace + ".")):
        return Endpoint(namespace, key, value)
    if not is_valid_namespace(namespace):
        _check(namespace, ID_KEY, "x")  # raises the namespace's error
    named = conversation_key(namespace)
    if named is None:
        raise EndpointError(
            f"endpoint {text[:80]!r}: no installed conduit named {namespace!r} declares a "
            "conversation_key, so the key is unknown: install the conduit, or name the key "
            f"in full ({namespace}:{namespace}.KEY=VALUE, or {namespace}:{ID_KEY}=THREAD)"
        )
    return Endpoint(namespace, named, rest)
