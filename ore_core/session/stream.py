"""Stream: one active conversation, handling its events strictly one at a time.

`submit` queues and returns; one worker task per stream (started on first use, owned
by the Manager's `TaskScope`, so a crash of it is logged and stops the Manager)
handles events in FIFO order. For a user message it runs the interceptors, records
the user turn, runs the turn processor, saves once and always ends with
`lifecycle: done` (after `error` for a failed turn, `cancelled` for a cancelled one).

One save per turn, after the processor and before `done` and the acknowledgement:
a worker that dies mid-turn never acknowledged the message, so it is redelivered and
answered from the last saved state (nothing of the turn was saved, nothing of it was
stored as events either: a sink that stores a turn's events, the bus egress, holds
them until `done`). A turn whose save fails is given up (below) and its sinks are
told (`on_abandoned`), so they drop what they held of it. While the store is known
to be failing, the user turn is saved first, so a redelivery during an outage finds
the store still down before it runs the processor (no model call per retry).

Saves can fail in two ways that are nobody's answer: the store refused a stale copy
(`StaleThread`: another worker wrote the thread) or the store is unavailable (disk
full, read-only, locked). Then the stream gives up its copy of the thread at once
(closes without saving, so the next message reloads it), reports the event and
everything queued after it as "retry later" (a bus leaves them unacknowledged and
redelivers them, in order), and, for an unavailable store, tells the sender once
that the answer is delayed. A message seen before (same event id) is recognised in
the thread: answered -> only `done`; recorded but unanswered -> answered now.

Concurrency: every method must be called from the event loop that runs the stream.
Output events fan out to subscribers through bounded buffers, so a slow subscriber
never stalls the worker (see `fanout`). A live subscriber may see the user turn's
`turn_complete` of a turn that is then given up (its subscription ends there).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from time import perf_counter

import structlog

from ore_core import tracing
from ore_core.artifacts import Artifact
from ore_core.errors import (
    Interrupted,
    OreError,
    SessionClosed,
    StaleThread,
    TurnCancelled,
    TurnFailed,
)
from ore_core.events import (
    DeleteEvent,
    EditEvent,
    ErrorEvent,
    EventContext,
    IngressEvent,
    InterruptEvent,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    PropertiesEvent,
    PropertyOperation,
    ReactEvent,
    RegenerateEvent,
    SessionSwitchEvent,
    Severity,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.session.bridging import (
    as_message,
    replaces_answer,
    turn_extra,
    unanswered,
)
from ore_core.session.compaction import BOUNDARY_INFO_KEY
from ore_core.session.fanout import Subscription
from ore_core.session.interception import intercept
from ore_core.session.pending import HandledCallback, Pending, RetryCallback, collect, reject
from ore_core.session.policy import DoubleTexting
from ore_core.session.protocols import Interceptor, Store, TurnProcessor
from ore_core.session.reactions import mark_turn
from ore_core.session.redelivery import Redeliveries
from ore_core.session.spec import KEY_MODEL_NAME, ModelSpec
from ore_core.session.store_health import DELAYED_NOTICE, StoreHealth, is_store_failure
from ore_core.session.turn_context import Transform, TurnContext
from ore_core.tasks import TaskCrashed, TaskScope
from ore_core.turn import Role, TraversalControl, Turn

__all__ = ["APP_CONTEXT", "BOUNDARY_INFO_KEY", "NewThread", "Stream"]


log = structlog.get_logger("ore.session")

APP_CONTEXT = EventContext(provenance="app")
"""The context of what the application says on a thread (its metadata changes, notices)."""
_NO_SPEC = ModelSpec()


NewThread = Callable[[], Awaitable[str]]
"""Starts a new thread beside this one and returns its id (what `/new` needs)."""


class Stream:
    """The live session of one thread. Create through `Manager`, not directly.

    One class, longer than the budget, on purpose (tests/project/test_code_shape.py lists it):
    the thread operations that interceptors and processors call (append a turn, set
    metadata, mark a compaction boundary, save) check the stream's open state and
    publish through its fan-out, so cut apart they were a base class with hooks back
    into this one."""

    def __init__(
        self,
        thread: Thread,
        *,
        store: Store,
        processor: TurnProcessor,
        interceptors: Sequence[Interceptor] = (),
        transforms: Sequence[Transform] = (),
        policy: DoubleTexting = DoubleTexting.QUEUE,
        subscriber_buffer: int = 1024,
        on_publish: Callable[[str, OutputEvent], None] | None = None,
        on_closed: Callable[[Stream], None] | None = None,
        on_abandoned: Callable[[str], None] | None = None,
        new_thread: NewThread | None = None,
        store_health: StoreHealth | None = None,
        delta_pacing: tuple[float, int] = (0.0, 4096),
        tasks: TaskScope,
    ) -> None:
        self._thread = thread
        self._store = store
        self._processor = processor
        self._interceptors = tuple(interceptors)
        self._transforms = tuple(transforms)
        self._policy = DoubleTexting(policy)
        self._subscriber_buffer = subscriber_buffer
        self._on_publish = on_publish
        self._on_closed = on_closed
        self._on_abandoned = on_abandoned
        self.new_thread = new_thread
        self._tasks = tasks
        self._subscriptions: list[Subscription] = []
        self._queue: deque[Pending] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._turn: asyncio.Task[None] | None = None  # the worker, while it runs a turn
        self._cancel_requested = False
        self._handling_message = False
        self._in_turn = False
        self._closed = False
        self._discarded = False  # the copy of the thread is given up: never save it
        self._health = store_health if store_health is not None else StoreHealth()
        self.delta_pacing = delta_pacing
        """(interval in seconds, max bytes) of live text deltas; interval 0: every delta."""
        self.last_active = asyncio.get_running_loop().time() if _has_loop() else 0.0
        self._abandoned = False  # another worker owns the thread: publish nothing
        self._redeliveries = Redeliveries()
        self._direct = on_publish  # see `publish`; `_rewire` keeps it current

    # -- identity and state -------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    @property
    def busy(self) -> bool:
        """True while a user message is being handled."""
        return self._handling_message

    @property
    def in_turn(self) -> bool:
        """True from the start of handling an event until its `lifecycle: done` is published.

        Sinks that group a turn's events (the bus egress) use it to tell an event of a
        turn still running from one published outside any turn.
        """
        return self._in_turn

    @property
    def policy(self) -> DoubleTexting:
        """The double-texting policy of this stream."""
        return self._policy

    @property
    def processor(self) -> TurnProcessor:
        """The turn processor that answers (what `/model` asks which models it has)."""
        return self._processor

    # -- the thread: read, append, metadata, save ---------------------------------

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

    # -- events in ------------------------------------------------------------

    @property
    def subscribed(self) -> bool:
        """True while someone holds a live subscription to this stream."""
        return bool(self._subscriptions)

    @property
    def idle(self) -> bool:
        """True when nothing is queued or running (the stream may be closed to save memory)."""
        return self._turn is None and not self._queue

    def submit(
        self,
        event: IngressEvent,
        *,
        on_handled: HandledCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> None:
        """Queue `event` and return at once. An interrupt clears the queue and cancels the turn.

        Exactly one of `on_handled` (acknowledge) and `on_retry` (redeliver) is called
        for an event that is not dropped by close() or an interrupt.
        """
        self._enqueue(Pending(event, None, on_handled, on_retry))

    async def process(self, event: IngressEvent) -> None:
        """Queue `event` and wait until it is fully handled.

        Raises TurnFailed, TurnCancelled, Interrupted (dropped by an interrupt),
        MessageRejected or SessionClosed; StaleThread or the store's StoreError when
        the thread could not be saved (the stream is closed then: attach again and
        resend). Cancelling the caller only stops the waiting; the event is still
        handled.
        """
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(Pending(event, waiter))
        await asyncio.shield(waiter)

    def _enqueue(self, item: Pending) -> None:
        self._check_open()
        self.last_active = asyncio.get_running_loop().time()
        event = item.event
        if isinstance(event, InterruptEvent):
            self._drop_queued(Interrupted(f"session {self.id}: dropped by an interrupt"))
            self._push(item)
            self.cancel()
            return
        if replaces_answer(self._thread, event):
            self._cancel_turn()  # its answer is replaced: stop writing it
        elif isinstance(event, UserMessageEvent) and self._handling_message:
            if self._policy is DoubleTexting.REJECT:
                reject(item, self.publish, self.id)
                return
            if self._policy is DoubleTexting.INTERRUPT:
                self.cancel()
        self._push(item)

    def _push(self, item: Pending) -> None:
        self._queue.append(item)
        if self._worker is None:
            self._worker = self._tasks.spawn(self._work(), name=f"ore-stream-{self.id}")
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _drop_queued(self, error: OreError) -> None:
        while self._queue:
            self._queue.popleft().resolve(error)

    def cancel(self) -> None:
        """Cancel the turn in flight, if any (idle: no-op)."""
        self._check_open()
        self._cancel_turn()

    def _cancel_turn(self) -> None:
        turn = self._turn
        if turn is not None and not self._cancel_requested:
            self._cancel_requested = True
            turn.cancel()

    # -- the worker -----------------------------------------------------------

    async def _work(self) -> None:
        """The stream's one worker task: handles queued events one at a time, in itself.

        A turn runs in this task (no task per event: a task, its wake-ups and the
        wait for it cost about a tenth of a turn on the bus). `cancel()` cancels this
        task while `_turn` is set and flags it, so the turn ends with `cancelled` and
        the worker goes on; a cancellation from outside (shutdown) ends the worker.
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        while True:
            while not self._queue and not self._closed:
                self._wakeup = loop.create_future()
                await self._wakeup
                self._wakeup = None
            if self._closed:
                self._drop_queued(SessionClosed(f"session {self.id} is closed"))
                return
            item = self._queue.popleft()
            if self._policy is DoubleTexting.COLLECT:
                item = collect(item, self._queue)
            self._turn = task
            try:
                work = self._handle(item)
                await (work if tracing.tracer is None else tracing.turn(work, item.event, self.id))
            except asyncio.CancelledError:
                if not self._cancel_requested:
                    raise  # not a turn cancel: the worker itself is being stopped
                task.uncancel()  # a turn cancel that landed after the processor ended
            except Exception:  # a bug in a callback must not stop the stream
                log.exception("event handling failed", thread_id=self.id)
            finally:
                if self._cancel_requested and task.cancelling():
                    task.uncancel()  # our cancel, swallowed by the processor
                self._turn = None
                self._cancel_requested = False
            if task.cancelling():
                raise asyncio.CancelledError  # cancelled from outside during the turn

    async def _handle(self, item: Pending) -> None:
        event = item.event
        context = event.context
        error: BaseException | None = None
        cancelled = False
        self._handling_message = isinstance(event, UserMessageEvent | EditEvent | RegenerateEvent)
        self._in_turn = True
        try:
            await self._dispatch(item)
        except asyncio.CancelledError:
            cancelled = True
            if self._cancel_requested:  # our own cancel (interrupt, close): not the task's
                self._cancel_requested = False
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
        except Exception as exc:
            error = exc
        finally:
            self._handling_message = False
            # The turn's work is over: a cancel from now on must not cut its save short
            # (which would leave it unsaved and without `done`), so there is none.
            self._turn = None
        retry = None if error is None else _retry_reason(error)
        if retry is None and not self._discarded:
            try:
                await self._save_thread()
            except Exception as exc:
                retry = _retry_reason(exc)
                if retry is None:
                    log.error("save failed", thread_id=self.id, error=str(exc))
                    if error is None and not cancelled:
                        error = TurnFailed(f"save thread {self.id}: {exc}")
                        error.__cause__ = exc
        if retry is not None and not (cancelled and self._closed):
            self._give_up(item, retry)
            return
        self.last_active = asyncio.get_running_loop().time()
        redelivered = cancelled and self._closed and item.on_handled is not None
        if redelivered:
            # Cut short by close() (a shutdown past its grace, a handover) on a bus: the
            # message stays unacknowledged and is handled again, by this worker after a
            # restart or by the next owner. It is not over, so no `cancelled` and no
            # `done`: a conduit sees one `done` per message, the one of its answer.
            self._in_turn = False
            item.resolve(TurnCancelled(f"session {self.id}: turn cancelled"))
            return
        if cancelled:
            self.publish(LifecycleEvent.of("cancelled", context))
        elif error is not None:
            self.publish(ErrorEvent(message=f"the turn failed: {error}", context=context))
        self.publish(LifecycleEvent.of("done", context))
        self._in_turn = False
        if not (cancelled and self._closed):
            # A turn cut short by close() stays unacknowledged so a bus redelivers it.
            item.handled()
        if cancelled:
            item.resolve(TurnCancelled(f"session {self.id}: turn cancelled"))
        elif error is not None:
            failure = (
                error if isinstance(error, TurnFailed) else TurnFailed(f"the turn failed: {error}")
            )
            if failure is not error:
                failure.__cause__ = error
            item.resolve(failure)
        else:
            item.resolve(None)

    def _give_up(self, item: Pending, error: OreError) -> None:
        """Drop this copy of the thread: the event and everything queued after it are
        handed back for redelivery (in order), and the stream closes without saving."""
        stale = isinstance(error, StaleThread)
        if stale:
            log.warning("thread changed by another writer; reloading", thread_id=self.id)
        elif self._health.failed(self.id, error):
            self.publish(
                NoticeEvent(
                    content=DELAYED_NOTICE, severity=Severity.WARN, context=item.event.context
                )
            )
        if self._on_abandoned is not None:  # after the turn's last event: sinks drop it
            self._on_abandoned(self.id)
        self._discarded = True
        self._closed = True
        items = [item, *self._queue]
        self._queue.clear()
        self._forget()  # now: the next message reloads the thread
        for pending in items:
            pending.retry(error)
            pending.resolve(error)
        self._wake()
        self._end_subscriptions()

    async def _dispatch(self, item: Pending) -> None:
        event: IngressEvent | None = item.event
        if isinstance(event, EditEvent | RegenerateEvent):  # answered as a user message
            message, told = as_message(self._thread, event)
            if told is not None:
                self.publish(told)  # an edit recorded in place, or an error
            if message is None:
                return
            if isinstance(event, RegenerateEvent):
                await self._run_processor(message, answer_of=event.id)
                return
            event = message
        if isinstance(event, UserMessageEvent) and self._thread.has_event(event.id):
            await self._redelivered(event)
            return
        for interceptor in self._interceptors:
            if event is None:
                return
            event = await intercept(interceptor, event, self)
        if isinstance(event, UserMessageEvent):  # the common case first
            await self._record_user_turn(event)
            await self._run_processor(event)
            return
        if event is None or isinstance(event, InterruptEvent):
            return  # dropped by an interceptor; an interrupt cancelled the turn on submit
        if isinstance(event, SessionSwitchEvent):
            self.publish(event)
            return
        if isinstance(event, DeleteEvent | ReactEvent):  # a mark on a turn: no model turn
            told = mark_turn(self._thread, event)
            if told is not None:
                self.publish(told)
            return
        raise TurnFailed(f"unsupported event kind: {event.kind}")

    async def _record_user_turn(self, event: UserMessageEvent) -> None:
        """Append the user turn and announce it; it is saved with the answer.

        While the store is failing it is saved first instead: a store still down gives
        the message up here, before the processor spends a model call on it.
        """
        user_turn = self._thread.append(
            Role.USER, *event.artifacts(), event_id=event.id, extra=turn_extra(event)
        )
        if not self._health.usable:
            await self._save_thread()
        self.publish(TurnCompleteEvent.of(user_turn, event.context))

    async def _redelivered(self, event: UserMessageEvent) -> None:
        """A message seen before (a redelivery): never record it twice, answer it once.

        Answered (a non-user turn follows its user turn) -> nothing but `done`.
        Recorded but unanswered (the worker died or lost the save mid-turn) -> answer
        it now; it is the tip when messages arrive in order, and if newer turns
        follow it the message is recorded again at the tip and answered there, late
        rather than never.
        """
        # A relay without answers, or a message saved unanswered: recorded is handled.
        replay = self._redeliveries.replay(
            self._thread, event, handled=unanswered(self._thread, event)
        )
        if replay is not None:
            for announced in replay:
                self.publish(announced)
            return
        tip = self._redeliveries.recorded_tip(self._thread, event)
        if tip is None:
            await self._record_user_turn(event)
        else:  # announced again: the worker that stored it may have died before that
            self.publish(TurnCompleteEvent.of(tip, event.context))
        await self._run_processor(event)

    def announce_again(self, event_ids: Iterable[str]) -> None:
        """When the messages `event_ids` come again (answered: redelivered), announce
        their recorded turns again, with the context they come with, before their `done`.

        For a bus whose worker died between saving an answer and publishing its events:
        the next owner calls this on attaching the thread, so the message's one batch
        holds every durable event it would have held.
        """
        self._redeliveries.announce_again(event_ids)

    async def _run_processor(self, event: UserMessageEvent, *, answer_of: str = "") -> None:
        tip = self._thread.get_turn(self._thread.current_tip)
        if tip is None or tip.role != Role.USER:
            return
        if unanswered(self._thread, event):
            return  # saved unanswered, or a pure human relay (`answer = "none"`): no model call
        ctx = TurnContext(
            self.publish,
            self._thread,
            event,
            self.spec(),
            self._transforms,
            delta_pacing=self.delta_pacing,
            answer_of=answer_of,
        )
        work = self._processor(ctx)
        await (work if tracing.tracer is None else tracing.child("ore.processor", work))

    # -- events out -----------------------------------------------------------

    def publish(self, event: OutputEvent) -> None:
        """Fan `event` out to subscribers and sinks without blocking (the hot path)."""
        direct = self._direct
        if direct is not None:  # nobody subscribed, not abandoned: to the sinks alone
            direct(self._thread.id, event)
            return
        if self._abandoned:
            return  # a stale copy: whatever it says, the owner says it
        if self._subscriptions:
            kind = event.kind
            for subscription in self._subscriptions:
                if not subscription.kinds or kind in subscription.kinds:
                    subscription.push(event)
        if self._on_publish is not None:
            self._on_publish(self._thread.id, event)

    def _rewire(self) -> None:
        """`publish` goes straight to the sinks (`on_publish`) while no subscription
        or abandonment needs its checks; called whenever either changes."""
        self._direct = None if self._subscriptions or self._abandoned else self._on_publish

    async def emit(self, event: OutputEvent) -> None:
        """Send an output event to subscribers and sinks; allowed while a turn runs."""
        self._check_open()
        self.publish(event)

    def subscribe(self, *kinds: str, maxsize: int | None = None) -> Subscription:
        """Live events of the given kinds (none = all), in emission order, from now on."""
        subscription = Subscription(
            kinds, self._unsubscribe, maxsize=maxsize or self._subscriber_buffer
        )
        if self._closed:
            subscription.end()
        else:
            self._subscriptions.append(subscription)
            self._rewire()
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
            self._rewire()

    # -- lifetime -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed(f"session {self.id} is closed")
        if self._tasks.crash is not None:  # the Manager stopped: no worker would run it
            raise TaskCrashed(self._tasks.crash)

    @property
    def abandoned(self) -> bool:
        """True once the stream was dropped as stale (`abandon`, or a save refused)."""
        return self._abandoned

    async def abandon(self) -> None:
        """Close without saving or publishing anything more: another worker owns the thread.

        The turn in flight is cancelled; its message is not acknowledged (the bus hands
        it to the owner, which has the thread as stored).
        """
        self._abandoned = True
        self._rewire()
        self._discarded = True
        await self.close()

    async def close(self) -> None:
        """Cancel the turn in flight, fail queued events, end subscriptions. Idempotent.

        The thread stays in the store.
        """
        if not self._closed:
            self._closed = True
            self._cancel_turn()
            self._wake()
        worker = self._worker
        if worker is not None and worker is not asyncio.current_task():
            await asyncio.wait([worker])
        self._drop_queued(SessionClosed(f"session {self.id} is closed"))
        self._end_subscriptions()
        self._forget()

    def _wake(self) -> None:
        """Wake the worker waiting for an event (to see the stream closed)."""
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _end_subscriptions(self) -> None:
        for subscription in self._subscriptions:
            subscription.end()
        self._subscriptions.clear()
        self._rewire()

    def _forget(self) -> None:
        """Tell the owner (the Manager) once that this stream is gone."""
        if self._on_closed is not None:
            on_closed, self._on_closed = self._on_closed, None
            on_closed(self)


def _retry_reason(error: BaseException | None) -> OreError | None:
    """`error` when it means "handle this event again later", else None."""
    if isinstance(error, StaleThread) or (error is not None and is_store_failure(error)):
        assert isinstance(error, OreError)
        return error
    return None


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
