"""The operators' link methods of the control API: `P.admin.links.add|list|remove|lookup`.

Only under `P.admin.`: a conduit's credentials reach `P.api.NS.*` alone, and no
method there writes links (links are an operator's decision). The handlers validate
the request (pydantic, strict, unknown fields refused), change `ORE_LINKS` through
`LinkStore`, and mirror the thread's settings into its metadata (`ore.gateway`,
`ore.gateway.answer`, `ore.gateway.label`, `ore.gateway.reaction_lines`), which
conduits read with `threads.get`
and the stream reads for `answer = "none"`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ore_core.bridge.deliveries import DeliveryMap
from ore_core.bridge.links import LinkNotFound, LinkSettings, LinkStore
from ore_core.bridge.records import MAX_LABEL_LENGTH, LinkSet
from ore_core.endpoint import GATEWAY_ANSWER_KEY, Answer, Direction, Endpoint
from ore_core.ids import validate_thread_id

__all__ = [
    "ANSWER_KEY",
    "GATEWAY_KEY",
    "LABEL_KEY",
    "REACTION_LINES_KEY",
    "LINK_METHODS",
    "LinkAdd",
    "LinkAdmin",
    "LinkList",
    "LinkRef",
]

GATEWAY_KEY = "ore.gateway"
"""Thread metadata: the gateway the thread belongs to (set by the core)."""
ANSWER_KEY = GATEWAY_ANSWER_KEY
"""Thread metadata: who answers (`origin`, `all`, `none`), as the thread's links say."""
LABEL_KEY = "ore.gateway.label"
"""Thread metadata: the label format of relayed messages."""
REACTION_LINES_KEY = "ore.gateway.reaction_lines"
"""Thread metadata: `true` when a platform without reactions shows them as short lines."""
LINK_METHODS = ("links.add", "links.list", "links.lookup", "links.remove")
"""Methods under `P.admin.` (never under `P.api.NS.`)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EndpointBody(_Body):
    """An endpoint in a request: validated as `Endpoint` is."""

    namespace: str
    key: str
    value: str

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.namespace, self.key, self.value)

    @model_validator(mode="after")
    def _valid(self) -> EndpointBody:
        try:
            self.endpoint  # noqa: B018 (the check, with its message)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return self


class LinkAdd(_Body):
    thread: str
    endpoint: EndpointBody
    direction: Direction = "inout"
    gateway: str | None = Field(default=None, pattern=r"^[a-z0-9_-]{1,64}$")
    answer: Answer | None = None
    label: str | None = Field(default=None, min_length=1, max_length=MAX_LABEL_LENGTH)
    reaction_lines: bool | None = None
    exist_ok: bool = False

    @field_validator("thread")
    @classmethod
    def _thread(cls, value: str) -> str:
        return validate_thread_id(value)


class LinkRef(_Body):
    endpoint: EndpointBody


class LinkList(_Body):
    thread: str | None = None
    namespace: str | None = None


def describe(thread_id: str, links: LinkSet) -> dict[str, Any]:
    """A thread's links as replies spell them."""
    return {"thread": thread_id, **links.model_dump(mode="json")}


class LinkAdmin:
    """The handlers; `resolve(T)` is the full id of the thread `T` names (an id or a
    unique prefix of one, as `ore threads` takes them; ThreadNotFound if none),
    `home_of(T)` names a thread's namespace (ThreadNotFound if none),
    `set_metadata(T, key, value)` and `delete_metadata(T, key)` change its metadata
    the way the control API's meta methods do, `metadata(T)` reads it."""

    def __init__(
        self,
        store: LinkStore,
        *,
        resolve: Callable[[str], Awaitable[str]],
        home_of: Callable[[str], Awaitable[str]],
        metadata: Callable[[str], Awaitable[dict[str, str]]],
        set_metadata: Callable[[str, str, str], Awaitable[object]],
        delete_metadata: Callable[[str, str], Awaitable[object]],
    ) -> None:
        self._store = store
        self._resolve = resolve
        self._home_of = home_of
        self._metadata = metadata
        self._set = set_metadata
        self._delete = delete_metadata

    async def add(self, body: LinkAdd) -> dict[str, Any]:
        thread_id = await self._resolve(body.thread)
        home = await self._home_of(thread_id)
        settings = LinkSettings(
            gateway=body.gateway,
            answer=body.answer,
            label=body.label,
            reaction_lines=body.reaction_lines,
        )
        links = await self._store.add(
            thread_id,
            home,
            body.endpoint.endpoint,
            body.direction,
            settings,
            exist_ok=body.exist_ok,
        )
        await self._mirror(thread_id, links)
        return describe(thread_id, links)

    async def remove(self, body: LinkRef) -> dict[str, Any]:
        thread_id = await self._store.remove(body.endpoint.endpoint)
        found = await self._store.link_set(thread_id)
        await self._mirror(thread_id, None if found is None else found[0])
        return {"thread": thread_id, "removed": True}

    async def lookup(self, body: LinkRef) -> dict[str, Any]:
        endpoint = body.endpoint.endpoint
        thread_id = await self._store.thread_of(endpoint)
        if thread_id is None:
            raise LinkNotFound(f"endpoint {endpoint} is not linked to any thread")
        return {"thread": thread_id}

    async def list(self, body: LinkList) -> dict[str, Any]:
        if body.thread is not None:
            thread_id = await self._resolve(body.thread)
            found = await self._store.link_set(thread_id)
            threads = {} if found is None else {thread_id: found[0]}
        else:
            threads = await self._store.threads()
        listed = [
            describe(thread_id, links)
            for thread_id, links in sorted(threads.items())
            if body.namespace is None
            or links.home == body.namespace
            or links.of_namespace(body.namespace) is not None
        ]
        deliveries = DeliveryMap(self._store.kv)
        for links in listed:
            for endpoint in links["endpoints"]:
                last = await deliveries.last(endpoint["namespace"], links["thread"])
                endpoint["last_delivery"] = last
        return {"links": listed}

    async def _mirror(self, thread_id: str, links: LinkSet | None) -> None:
        """Make the thread's metadata say what its links say (only what differs)."""
        have = await self._metadata(thread_id)
        want: dict[str, str | None] = dict.fromkeys(
            (GATEWAY_KEY, ANSWER_KEY, LABEL_KEY, REACTION_LINES_KEY)
        )
        if links is not None:
            want = {
                GATEWAY_KEY: links.gateway,
                ANSWER_KEY: links.answer,
                LABEL_KEY: links.label,
                REACTION_LINES_KEY: "true" if links.reaction_lines else None,
            }
        for key, value in want.items():
            if value is None and key in have:
                await self._delete(thread_id, key)
            elif value is not None and have.get(key) != value:
                await self._set(thread_id, key, value)
