"""Delivery reports and the platform id map: `P.api.NS.deliveries.report|lookup|get`.

A conduit reports what it did with a relayed copy of a turn. `delivered` with
`platform_ids` records the map both ways in `ORE_LINKS`: `map.<NS>.<T>.<turn>` -> the
platform ids, `pid.<NS>.<h(id)>` -> `{thread, turn}` (h: the first 32 hex of sha256 of
the id), so edits, deletes and replies on any platform resolve to turns after any
restart. Every report but `sending` is also kept as the endpoint's last delivery status
on the thread (`last.<NS>.<T>`, shown by `ore link list`). `retrying` and `failed`
(and `delivered` right after `retrying` of the same turn, so the origin can clear its
mark) become a durable `delivery` event on the thread
(the origin endpoint shows it, as mautrix's checkpoints). `sending` claims a copy before
it is published, for a platform whose messages cannot be read back (a plain NATS
subject): the map entry is created only if there is none, and the reply says what was
there, so a conduit restarted after a kill knows a copy that may be out already (it
publishes it again marked as a resend, under the same id) from one never started. A
namespace reaches only its own map entries and threads it may reach (its own, or linked).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ore_core import jsonutil
from ore_core.errors import OreError
from ore_core.events import FailureReason, ReportStatus
from ore_core.ids import validate_thread_id

__all__ = [
    "DELIVERY_METHODS",
    "DeliveryGet",
    "DeliveryLookup",
    "DeliveryMap",
    "DeliveryReport",
    "MappingNotFound",
]

DELIVERY_METHODS = ("deliveries.report", "deliveries.lookup", "deliveries.get")
"""Methods under `P.api.NS.`."""
MAX_PLATFORM_IDS = 64  # a copy split into many messages: each one's id
MAX_PLATFORM_ID_LENGTH = 256
MAX_DETAIL_LENGTH = 1000

_Turn = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
_Thread = Annotated[str, AfterValidator(validate_thread_id)]
_Origin = Annotated[str, Field(pattern=r"^([a-z0-9_-]{1,32})?$")]  # a namespace, or ""
_PlatformId = Annotated[str, Field(min_length=1, max_length=MAX_PLATFORM_ID_LENGTH)]


class MappingNotFound(OreError, LookupError):
    """No platform ids recorded for that turn, or no turn for that platform id."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DeliveryReport(_Body):
    thread: _Thread
    sequence: int = Field(ge=0)
    turn: _Turn
    status: ReportStatus
    platform_ids: list[_PlatformId] = Field(default_factory=list, max_length=MAX_PLATFORM_IDS)
    detail: str = Field(default="", max_length=MAX_DETAIL_LENGTH)
    reason: FailureReason | Literal[""] = ""  # why it is retrying or failed
    origin: _Origin = ""  # the namespace the turn came from (its `delivery` event shows there)


class DeliveryLookup(_Body):
    platform_id: _PlatformId


class DeliveryGet(_Body):
    thread: _Thread
    turn: _Turn


def _pid_key(namespace: str, platform_id: str) -> str:
    return f"pid.{namespace}.{hashlib.sha256(platform_id.encode()).hexdigest()[:32]}"


def _map_key(namespace: str, thread_id: str, turn_id: str) -> str:
    return f"map.{namespace}.{thread_id}.{turn_id}"


def _last_key(namespace: str, thread_id: str) -> str:
    return f"last.{namespace}.{thread_id}"


class DeliveryMap:
    """The platform id map of every namespace, in `kv` (the `ORE_LINKS` bucket)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    async def record(
        self, namespace: str, thread_id: str, turn_id: str, platform_ids: list[str]
    ) -> None:
        """Map `turn_id` of `thread_id` to `platform_ids` on `namespace`, both ways.

        The reverse entries are written first: a crash in between leaves ids that
        resolve to their turn, and a report sent again completes the map.
        """
        target = jsonutil.dumps({"thread": thread_id, "turn": turn_id})
        for platform_id in platform_ids:
            await self.kv.put(_pid_key(namespace, platform_id), target)
        entry = {"platform_ids": platform_ids, "status": "delivered"}
        await self.kv.put(_map_key(namespace, thread_id, turn_id), jsonutil.dumps(entry))

    async def claim(
        self, namespace: str, thread_id: str, turn_id: str, platform_ids: list[str]
    ) -> tuple[bool, dict[str, Any]]:
        """Claim the copy of `turn_id` as being sent (create-only): (claimed, the entry).

        Not claimed: an entry was there (a copy sent or being sent before a restart),
        and it is answered as it is.
        """
        key = _map_key(namespace, thread_id, turn_id)
        entry: dict[str, Any] = {"platform_ids": platform_ids, "status": "sending"}
        try:
            await self.kv.create(key, jsonutil.dumps(entry))
        except KeyWrongLastSequenceError:
            return False, await self.entry(namespace, thread_id, turn_id)
        return True, entry

    async def turn_of(self, namespace: str, platform_id: str) -> dict[str, str]:
        """`{thread, turn}` of a platform message id of `namespace`."""
        try:
            entry = await self.kv.get(_pid_key(namespace, platform_id))
        except KeyNotFoundError:
            entry = None
        if entry is None or not entry.value:
            raise MappingNotFound(f"no turn recorded for platform id {platform_id[:80]!r}")
        found: dict[str, str] = jsonutil.loads(entry.value)
        return found

    async def note_last(self, namespace: str, report: DeliveryReport) -> dict[str, Any] | None:
        """Keep `report` as the last delivery status of `namespace` on its thread (what
        `ore link list` shows per endpoint); the one it replaces (None: the first)."""
        previous = await self.last(namespace, report.thread)
        last = {"status": report.status, "turn": report.turn, "sequence": report.sequence}
        if report.detail:
            last["detail"] = report.detail
        if report.reason:
            last["reason"] = report.reason
        await self.kv.put(_last_key(namespace, report.thread), jsonutil.dumps(last))
        return previous

    async def last(self, namespace: str, thread_id: str) -> dict[str, Any] | None:
        """The last delivery status `namespace` reported on `thread_id` (None: none yet)."""
        try:
            found = await self.kv.get(_last_key(namespace, thread_id))
        except KeyNotFoundError:
            return None
        if found is None or not found.value:
            return None
        last: dict[str, Any] = jsonutil.loads(found.value)
        return last

    async def entry(self, namespace: str, thread_id: str, turn_id: str) -> dict[str, Any]:
        """`{platform_ids, status}` that `namespace` reported for `turn_id` of `thread_id`
        (`status`: `delivered`, or `sending` for a copy claimed and not yet reported)."""
        try:
            found = await self.kv.get(_map_key(namespace, thread_id, turn_id))
        except KeyNotFoundError:
            found = None
        if found is None or not found.value:
            raise MappingNotFound(
                f"no platform ids recorded for turn {turn_id} of thread {thread_id} in {namespace}"
            )
        entry: dict[str, Any] = jsonutil.loads(found.value)
        return {"platform_ids": entry["platform_ids"], "status": entry.get("status", "delivered")}
