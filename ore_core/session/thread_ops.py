"""What a `Stream` does with its thread outside the turn: read it and its metadata,
append a turn, mark a compaction boundary, save. Stream inherits these; they take no
part in running events (the worker, dispatch and publishing stay in `stream`)."""

from __future__ import annotations

from time import perf_counter

from ore_core import tracing
from ore_core.artifacts import Artifact
from ore_core.events import (
    EventContext,
    OutputEvent,
    PropertiesEvent,
    PropertyOperation,
    TurnCompleteEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.session.spec import KEY_MODEL_NAME, ModelSpec
from ore_core.session.store_health import StoreHealth
from ore_core.turn import Role, TraversalControl, Turn

__all__ = ["BOUNDARY_INFO_KEY", "ThreadOps"]

BOUNDARY_INFO_KEY = "ore.compaction.boundary.info"
APP_CONTEXT = EventContext(provenance="app")
_NO_SPEC = ModelSpec()


class ThreadOps:
    """The thread operations of `Stream` (its base: see there for the rest)."""

    __slots__ = ()
    _thread: Thread
    _store: Store
    _health: StoreHealth

    def publish(self, event: OutputEvent) -> None:
        raise NotImplementedError  # Stream's: the fan-out

    def _check_open(self) -> None:
        raise NotImplementedError  # Stream's: raises once it is closed

    @property
    def id(self) -> str:
        """The thread id (streams and threads share ids)."""
        return self._thread.id

    def state(self) -> Thread:
        """The live thread (owned by the stream's worker: read, do not mutate concurrently)."""
        return self._thread

    def turns(self) -> list[Turn]:
        """The active path, oldest first (a copy)."""
        return self._thread.turns()

    async def append_turn(
        self, role: Role | str, *artifacts: Artifact, context: EventContext | None = None
    ) -> Turn:
        """Append a finished turn to the active path and announce it (not saved: call save())."""
        self._check_open()
        turn = self._thread.append(role, *artifacts)
        self.publish(TurnCompleteEvent.of(turn, context or EventContext()))
        return turn

    def get_metadata(self, key: str) -> str | None:
        """The metadata value for `key`, or None."""
        return self._thread.meta().get(key)

    def all_metadata(self) -> dict[str, str]:
        """A copy of the thread metadata."""
        return self._thread.meta().all()

    async def set_metadata(self, key: str, value: str) -> None:
        """Set a metadata key, announce it as a `properties` event and save."""
        self._check_open()
        self._thread.meta().set(key, value)
        await self._announce_and_save(PropertyOperation(op="set", key=key, value=value))

    async def delete_metadata(self, key: str) -> None:
        """Delete a metadata key (missing is fine), announce it and save."""
        self._check_open()
        self._thread.meta().delete(key)
        await self._announce_and_save(PropertyOperation(op="delete", key=key))

    async def _announce_and_save(self, operation: PropertyOperation) -> None:
        self.publish(PropertiesEvent(operations=[operation], context=APP_CONTEXT))
        await self._save_thread()

    def spec(self) -> ModelSpec:
        """Model and sampling settings from the `ore.model.*` metadata keys."""
        meta = self._thread.meta()
        if not meta.get(KEY_MODEL_NAME):  # every turn asks: no copy of the metadata then
            return _NO_SPEC
        return ModelSpec.from_metadata(meta.all())

    async def mark_boundary(
        self, summary_turn_id: str, info: str = "", *, save: bool = True
    ) -> None:
        """Make `summary_turn_id` the start of the active path (compaction) and save.

        `save=False` leaves the save to the turn in progress (an interceptor's change is
        saved with the message's answer, so a failing store cannot lose the message).
        """
        self._check_open()
        self._thread.set_control(summary_turn_id, TraversalControl.STOP)
        if info:
            self._thread.meta().set(BOUNDARY_INFO_KEY, info)
        if save:
            await self._save_thread()

    async def save(self) -> None:
        """Persist the thread now."""
        await self._save_thread()

    async def _save_thread(self) -> None:
        """Save the thread; a success after store failures tells `StoreHealth`."""
        work = self._store.save(self._thread)
        started = perf_counter()
        await (work if tracing.tracer is None else tracing.child("ore.store.save", work))
        self._health.saved(self._thread.id, perf_counter() - started)
