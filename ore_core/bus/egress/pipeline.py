"""Pipelined JetStream publishing: many publishes in flight, every ack checked, retries.

nats-py's `publish_async` has the right idea but two traps for a long-running worker:
its futures never time out (an ack lost in a reconnect holds a window slot forever)
and a publish refused by a full reconnect buffer leaks its slot. `Pipeline` keeps
the same shape (publish now, the ack arrives on a shared inbox later) and adds what a
worker needs: a bounded window of unacknowledged publishes, an ack timeout, and
retries with the same `Nats-Msg-Id`, so a message the server did store before the
connection dropped is not stored twice (within the stream's duplicate window, which
must be longer than `ack_timeout * attempts`). A transient failure is never a reason
to give a message up: it is retried until the server takes it (see `_failed`).

`publish` never waits: beyond the window, messages queue here in order and go out as
acks come back. It is called from a `Manager` sink, which must keep up or lose its
buffer, and what can queue is bounded by the messages in flight upstream.
Order per subject is kept: a message waits (here, unsent) until the one before it on
the same subject is stored, so a retry never lets a later message of that subject
(a thread's next answer) overtake it; subjects do not wait for each other.
Concurrency: one event loop, the one of the connection.

A fenced message (`publish_fenced`, a thread's batch on `P.ev.T`) carries
`Nats-Expected-Last-Subject-Sequence`: the sequence of the last message this worker
knows on its subject (`know`; then each of its own acks, which per-subject order makes
known before the next message of the subject is sent). The server stores it only if
nobody else appended meanwhile; a retry keeps its `Nats-Msg-Id` and its expected
sequence. nats-server checks that sequence before the msg-id, so a retry of a message
an earlier attempt stored (its ack lost) is refused too: the subject's last message is
read then, and if it is this one, it is stored (`_check_stored`). Any other refusal
for a wrong last sequence means another worker writes the subject: the message and
every later one of its subject are dropped, never retried, and the `watch_fenced`
listeners hear of it (the egress hands the thread's messages back to the ingress).

A JetStream limit (a stream's `max_bytes` or `max_msgs_per_subject` with discard new,
the account's storage) is not a reason to give a message up: it is held and sent
again every `hold_retry` seconds until the server takes it, `full` names the limit
meanwhile, and the `LimitListener`s hear when it is reached and cleared (the core
tells the users, fails /readyz and holds its ingress acks).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import deque
from collections.abc import Callable

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, MaxPayloadError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from ore_core._nats.codec import fenced_block, open_block, read_publish_ack
from ore_core._nats.connection import LIMIT_ERROR_CODES, subscribe_inline
from ore_core._nats.wire import header_block, publish_now, wait_flushed
from ore_core.bus.egress.limit_listeners import LimitListeners, LimitReached
from ore_core.errors import BusError
from ore_core.subjects import HEADER_MSG_ID
from ore_core.tasks import Idle, TaskCrashed, TaskScope

__all__ = ["LimitReached", "Pipeline"]

Fenced = Callable[[str, int], None]
"""`on_fenced(subject, tag)`: a fenced message to `subject` (published with `tag`) was
refused because another writer appended; it and the later ones of `subject` are dropped."""

Stored = Callable[[str, bytes, bytes, int, int], None]
"""`on_stored(subject, data, head, sequence, previous)`: a fenced message to `subject` is
stored at `sequence`, after `previous` on its subject; `head` is its header block without
the expectation and the closing blank line (the bridge copies it: `Egress`)."""

log = structlog.get_logger("ore.bus")

_UNAVAILABLE = 503  # no stream answered (yet): worth retrying
_RECONNECT_POLL = 0.05
_WRONG_LAST_SEQUENCE = 10071  # err_code: the subject's last sequence is not the expected one
# A replicated stream's answers while an earlier attempt is still being proposed: the
# same `Nats-Msg-Id` is in process; a message of the subject is (its expected sequence
# cannot be checked yet). Either may yet be stored or die with its leader: sent again
# after a pause, it is answered as stored (a duplicate, `_check_stored`) or stored by
# the retry. Dropped, its ingress message was acknowledged and the answer lost. A fenced
# message answered 10164 with no unanswered attempt met another writer's: refused.
_ID_IN_PROCESS = 10158
_SUBJECT_IN_PROCESS = 10164
_SEQUENCES = 65536  # subjects whose last sequence is remembered; cleared when exceeded
_monotonic = time.monotonic  # what asyncio's loop.time() returns, without its frame


class _Record:
    """One message to store. The rest of its state starts as the class's defaults, so a
    new record sets four attributes, not thirteen (one is made per stored batch)."""

    index: int = 0
    deadline: float = 0.0
    attempts: int = 0
    held: bool = False
    head: bytes = b""  # a fenced message's header block but its expected sequence (open)
    stream: str = ""  # a fenced message's stream (to read the subject's last message)
    unsure: bool = False  # an attempt went unanswered: it may be stored
    expected: int = -1  # a fenced message's expected last subject sequence, once known
    tag: int = 0  # the publisher's, given back to the `watch_fenced` listeners

    def __init__(self, subject: str, data: bytes, headers: dict[str, str], block: bytes) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self.block = block  # `headers` as sent (`header_block`), built once for every attempt

    def expect(self, sequence: int) -> None:
        """Fence the message at `sequence`: its header block ends with that expectation."""
        self.expected = sequence
        self.block = fenced_block(self.head, sequence)


class Pipeline:
    """Publishes to JetStream streams with up to `window` acks outstanding."""

    def __init__(
        self,
        nc: NatsClient,
        *,
        window: int = 4096,
        ack_timeout: float = 5.0,
        attempts: int = 5,
        hold_retry: float = 1.0,
    ) -> None:
        self._nc = nc
        self._window = window
        self._ack_timeout = ack_timeout
        self._attempts = attempts
        self._ids = itertools.count()
        self._id_prefix = secrets.token_hex(6) + "-"
        self._inbox = ""
        self._pending: dict[str, _Record] = {}
        self._retries: deque[_Record] = deque()
        self._backlog: deque[_Record] = deque()
        # Per subject with a message not yet stored: the later ones, unsent, in order.
        self._lanes: dict[str, deque[_Record]] = {}
        self._waiting = 0  # messages in lanes
        self._ready: deque[_Record] = deque()  # lane heads whose predecessor was stored
        self._wakeup = asyncio.Event()
        self._idle = Idle()
        self.tasks = TaskScope("pipeline")
        """The expire and send loops (a core service adopts it into its own scope)."""
        self._failing = False
        self._next_index = 0
        self._outstanding: dict[int, None] = {}  # indexes not yet stored, oldest first
        self._progress = asyncio.Event()
        self._hold_retry = hold_retry
        self._held: deque[_Record] = deque()
        self._delayed: deque[_Record] = deque()  # retried after `hold_retry`
        self._held_count = 0  # held records not yet stored (waiting or sent again)
        self._limits = LimitListeners(self.tasks)
        self.full: str | None = None
        """What JetStream limit holds messages back right now (None: none)."""
        self.lost = 0
        self.retried = 0
        """Publishes sent again after a transient failure (read by the metrics)."""
        self._sequences: dict[str, int] = {}  # last sequence known per fenced subject
        self._on_fenced: list[Fenced] = []
        self._on_stored: list[Stored] = []
        self.fenced = 0
        """Fenced messages dropped because another writer appended to their subject."""

    @property
    def pending(self) -> int:
        """Messages not yet acknowledged by the server (sent, to retry or queued)."""
        queued = len(self._retries) + len(self._backlog) + len(self._held) + len(self._delayed)
        return len(self._pending) + queued + len(self._ready) + self._waiting

    def mark(self) -> int:
        """A position: `wait_stored(mark)` returns once everything published before it is
        stored (or given up and logged)."""
        return self._next_index

    def stored_before(self, mark: int) -> bool:
        """True once every message published before `mark` is settled."""
        return next(iter(self._outstanding), self._next_index) >= mark

    async def wait_stored(self, mark: int) -> None:
        """Wait until `stored_before(mark)`; a JetStream limit makes that wait for space."""
        while not self.stored_before(mark):
            self._progress.clear()
            await self._progress.wait()

    async def wait_subject(self, subject: str) -> None:
        """Wait until no message to `subject` is waiting to be stored (each stored or
        given up): what is read from the subject afterwards includes them."""
        while subject in self._lanes:
            self._progress.clear()
            await self._progress.wait()

    def watch_stored(self, listener: Stored) -> None:
        """Call `listener` (in the read loop: it must not wait) for each fenced message
        stored, with its sequence and the previous one of its subject."""
        self._on_stored.append(listener)

    def _settle_record(self, record: _Record, stored: int = -1) -> None:
        """`record` is stored (at sequence `stored` if fenced) or given up."""
        self._outstanding.pop(record.index, None)
        self._progress.set()
        lane = self._lanes.get(record.subject)
        if lane is None:
            return
        if lane:
            self._waiting -= 1
            following = lane.popleft()  # the next of its subject may go now
            if following.head:  # fenced: on what `record` left last on the subject
                following.expect(stored if stored >= 0 else record.expected)
            self._ready.append(following)
            self._wakeup.set()
        else:
            del self._lanes[record.subject]

    def know(self, subject: str, sequence: int) -> None:
        """The last message on `subject` is at `sequence` (0: none), as read by the caller.

        Ignored while a message of the subject is not stored yet (its ack tells more),
        and when this pipeline stored one above `sequence`: the read started before that
        append was acknowledged (a stream attached by the control API announces a change
        while the ingress primes it), so the ack is the newer truth. Another writer's
        append would have shown in the read as a sequence above it.
        """
        if subject in self._lanes:
            return
        sequences = self._sequences
        known = sequences.get(subject)
        if known is not None and known > sequence:
            return
        if len(sequences) >= _SEQUENCES and known is None:
            sequences.clear()
        sequences[subject] = sequence

    def knows(self, subject: str) -> bool:
        """Whether a fenced message to `subject` can be sent without reading its last
        sequence first (`know`): it is known, or a message before it is not stored yet."""
        return subject in self._sequences or subject in self._lanes

    def forget(self, subject: str) -> None:
        """Another worker may write `subject` now: read its last sequence before the next
        fenced message (the caller's `know`)."""
        self._sequences.pop(subject, None)

    def watch_fenced(self, listener: Fenced) -> None:
        """Call `listener(subject, tag)` when a fenced message is refused (see `Fenced`)."""
        self._on_fenced.append(listener)

    def watch_limits(
        self, *, reached: LimitReached | None = None, cleared: Callable[[], None] | None = None
    ) -> None:
        """Call `reached(subject, reason)` for each held message, `cleared()` once all went."""
        self._limits.watch(reached, cleared)

    async def start(self) -> None:
        """Subscribe to the ack inbox and start the timeout and sender tasks.

        Acks are handled by an inline callback of the connection's read loop (no task or
        queue per ack on an `OreNatsClient`; see `subscribe_inline`).
        """
        self._inbox = self._nc.new_inbox() + "."
        await subscribe_inline(self._nc, self._inbox + "*", self._on_ack)
        self.tasks.spawn(self._expire_loop(), name="ore-pipeline-expire")
        self.tasks.spawn(self._send_loop(), name="ore-pipeline-send")
        self.tasks.spawn(self._hold_loop(), name="ore-pipeline-hold")

    async def stop(self) -> None:
        """Wait up to one ack timeout for outstanding acks, then stop (the rest is logged).

        Raises TaskCrashed if a loop crashed (unless an owner's scope reports it).
        """
        try:
            async with asyncio.timeout(self._ack_timeout):
                await self.flush()
        except TimeoutError:
            pass
        try:
            await self.tasks.aclose()
        finally:
            if self.pending:
                log.error("stored events not acknowledged at shutdown", count=self.pending)

    async def flush(self) -> None:
        """Return once every publish so far is acknowledged or given up (add a timeout)."""
        if self.pending:
            await self._idle.wait()

    async def publish(
        self, subject: str, data: bytes, headers: dict[str, str], *, msg_id: str = ""
    ) -> None:
        """Send one message now, or queue it behind a full window; never waits for acks.

        Raises TaskCrashed once a loop of the pipeline crashed.

        `msg_id` is the de-duplication id (a fresh one when empty). `headers` is kept
        for retries: do not reuse the dict.
        """
        if self.tasks.crash is not None:  # nothing would retry or send what queues
            raise TaskCrashed(self.tasks.crash)
        headers[HEADER_MSG_ID] = msg_id or self._id_prefix + str(next(self._ids))
        if self._enqueue(_Record(subject, data, headers, header_block(headers))):
            await wait_flushed(self._nc)

    async def publish_fenced(
        self, stream: str, subject: str, data: bytes, header: bytes, tag: int
    ) -> None:
        """`publish` to `subject` of `stream`, stored only if the subject's last message is
        the one this worker knows (`knows(subject)` must be true: `know` it first).
        `header` is a `header_block` of the other headers (the caller builds it once per
        kind); `tag` is given back to the `watch_fenced` listeners if it is refused.

        Never waits for acks; raises TaskCrashed once a loop of the pipeline crashed.
        """
        if self.tasks.crash is not None:
            raise TaskCrashed(self.tasks.crash)
        msg_id = self._id_prefix + str(next(self._ids))
        head = open_block(header, msg_id)
        headers = {HEADER_MSG_ID: msg_id}
        record = _Record(subject, data, headers, b"")
        record.head = head
        record.stream = stream
        record.tag = tag
        if subject not in self._lanes:
            try:
                record.expect(self._sequences[subject])
            except KeyError:
                raise ValueError(f"the last sequence of {subject} is not known: `know` it first")
        if self._enqueue(record):
            await wait_flushed(self._nc)

    def _enqueue(self, record: _Record) -> bool:
        """Send `record` now, or queue it behind its subject's last or a full window; True
        when the caller should `wait_flushed`."""
        subject = record.subject
        record.index = self._next_index
        self._outstanding[self._next_index] = None
        self._next_index += 1
        lane = self._lanes.get(subject)
        if lane is not None:  # the one before it on this subject is not stored yet
            lane.append(record)
            self._waiting += 1
            return False
        self._lanes[subject] = deque()
        if self._backlog or len(self._pending) >= self._window:
            self._backlog.append(record)
            return False
        return self._send(record)

    def _send(self, record: _Record) -> bool:
        """Publish `record` (no waiting); True when the caller should `wait_flushed`."""
        token = str(next(self._ids))
        record.attempts += 1
        record.deadline = _monotonic() + self._ack_timeout  # the loop's clock, one call less
        self._pending[token] = record
        try:
            return publish_now(
                self._nc, record.subject, record.data, self._inbox + token, record.block
            )
        except OutboundBufferLimitError:
            pass  # disconnected with a full buffer: the ack times out and it is retried
        except (MaxPayloadError, ConnectionClosedError) as exc:
            self._settled(token)
            self._drop(record, str(exc) or type(exc).__name__)
        return False

    def _on_ack(self, msg: Msg) -> None:
        record = self._settled(msg.subject[len(self._inbox) :])
        if record is None:
            return  # timed out earlier and already retried
        data = msg.data
        if not data:
            status = msg.headers.get("Status") if msg.headers else None
            self._failed(record, f"no stream answered (status {status})", pause=True)
            return
        try:
            ack = read_publish_ack(msg)
        except NoStreamResponseError:
            self._failed(record, "no stream answered (status 503)", pause=True)
        except APIError as error:
            reason = f"{error.description or 'error'} (code {error.err_code})"
            if error.err_code in LIMIT_ERROR_CODES:
                self._hold(record, reason)
            elif error.code == _UNAVAILABLE:
                self._failed(record, reason, pause=True)
            elif error.err_code == _WRONG_LAST_SEQUENCE and record.head:
                self._wrong_sequence(record, error.description or "")
            elif error.err_code == _ID_IN_PROCESS or (
                error.err_code == _SUBJECT_IN_PROCESS and record.head and record.unsure
            ):
                record.unsure = True  # an earlier attempt may yet be stored: never dropped
                self._failed(record, reason, pause=True)
            elif error.err_code == _SUBJECT_IN_PROCESS and record.head:
                self._refused(record, error.description or "")
            else:
                self._drop(record, reason)
        except BusError as error:  # not JetStream's answer: as if none came, try again
            self._failed(record, str(error))
        else:
            self._stored(record, ack.sequence if record.head else -1)

    def _stored(self, record: _Record, sequence: int) -> None:
        """The server stored `record` (at `sequence`, read for a fenced one)."""
        if self._failing and not self._retries:
            self._failing = False
            log.info("stored events acknowledged again")
        if record.held:
            self._stored_after_hold()
        if record.head:
            subject, sequences = record.subject, self._sequences
            if subject not in sequences and len(sequences) >= _SEQUENCES:
                sequences.clear()
            sequences[subject] = sequence
            for listener in self._on_stored:
                try:
                    listener(subject, record.data, record.head, sequence, record.expected)
                except Exception:  # the read loop must go on
                    log.exception("stored listener failed", subject=subject)
        self._settle_record(record, sequence)
        self._check_idle()

    def _wrong_sequence(self, record: _Record, description: str) -> None:
        """The server refused a fenced message: the subject's last sequence is another.

        Last sequence 0 while this worker expected more: nobody appended, the subject's
        messages expired (`max_age`) or were purged: sent again, expecting 0. A message
        sent again after an unanswered attempt (`unsure`) may have been stored by it:
        the server checks the expected sequence before the msg-id (nats-server 2.15
        answers such a retry with this error, not as a duplicate), so the subject's
        last message is read: if it is this one, it is stored (`_check_stored`).
        Otherwise another writer appended (`_refused`).
        """
        if record.expected > 0 and description.rpartition(":")[2].strip() == "0":
            record.expect(0)
            record.attempts = 0
            self._retries.append(record)
            self._wakeup.set()
        elif record.unsure:
            try:
                self.tasks.spawn(
                    self._check_stored(record, description),
                    name="ore-pipeline-fence-check",
                    critical=False,
                )
            except (RuntimeError, TaskCrashed):  # stopping: the record stays unstored
                pass
        else:
            self._refused(record, description)

    async def _check_stored(self, record: _Record, description: str) -> None:
        """Whether the subject's last message is `record`, stored by an earlier attempt."""
        try:
            stored = await _last_of(self._nc, record, self._ack_timeout)
        except (NatsError, TimeoutError) as exc:  # not known yet: send it again, then look
            self._failed(record, f"last message not read after {description} ({exc!r})")
            return
        if stored:
            self._stored(record, stored)
        else:
            self._refused(record, description)

    def _refused(self, record: _Record, description: str) -> None:
        """Another writer appended to the subject: drop the message and the later ones of
        its subject (never retried: they would be refused again), tell the listeners."""
        subject = record.subject
        self._sequences.pop(subject, None)
        dropped = [record]
        lane = self._lanes.pop(subject, None)
        if lane:
            self._waiting -= len(lane)
            dropped.extend(lane)
        self.fenced += len(dropped)
        log.debug("fenced message refused", subject=subject, reason=description)
        for listener in self._on_fenced:
            try:
                listener(subject, record.tag)
            except Exception:  # the read loop must go on
                log.exception("fence listener failed", subject=subject)
        for each in dropped:  # after the listeners: nothing waiting on them is acked now
            if each.held:
                self._stored_after_hold()
            self._outstanding.pop(each.index, None)
        self._progress.set()
        self._check_idle()

    def _settled(self, token: str) -> _Record | None:
        """Forget a sent message and wake the sender: the window has room again."""
        record = self._pending.pop(token, None)
        if record is None:
            return None
        if self._retries or self._ready or self._backlog:
            self._wakeup.set()
        return record

    def _check_idle(self) -> None:
        if not self.pending:
            self._idle.set()

    def _failed(self, record: _Record, reason: str, *, pause: bool = False) -> None:
        """A transient failure (no ack in time, no stream answered): retry, never give up.

        Giving up would acknowledge the ingress message whose answer this is, and the
        answer would be lost (a cluster election can outlast any fixed number of
        attempts). `pause` (no stream answered: certainly not stored) retries after
        `hold_retry`; a missing ack (maybe stored, the ack lost) retries at once with
        the same `Nats-Msg-Id` for `attempts` tries, then after `hold_retry` each: past
        the stream's duplicate window such a retry can store a batch twice, which
        readers see as a repeated event id.
        """
        self.retried += 1
        if pause:
            record.attempts -= 1  # not stored: no attempt used
        else:
            record.unsure = True  # maybe stored, the ack lost
        if not pause and record.attempts >= self._attempts:
            pause = True
            if record.attempts == self._attempts:
                log.error(
                    "stored event still not acknowledged; retrying until the server takes "
                    "it (its ingress message stays unacknowledged meanwhile)",
                    subject=record.subject,
                    reason=reason,
                )
        if not self._failing:
            self._failing = True
            log.warning("stored event not acknowledged; retrying", reason=reason)
        if pause:
            # JetStream is briefly away (a leader election, a config reload): retry after a
            # pause instead of spending every attempt within milliseconds.
            self._delayed.append(record)
            return
        self._retries.append(record)
        self._wakeup.set()

    def _hold(self, record: _Record, reason: str) -> None:
        """Keep a message a JetStream limit refused; it is sent again after `hold_retry`."""
        if not record.held:
            record.held = True
            self._held_count += 1
        self._held.append(record)
        if self.full is None:
            self.full = reason
            log.warning(
                "JetStream limit reached: holding stored events until space frees; "
                "/readyz fails and ingress is not acknowledged meanwhile",
                reason=reason,
                subject=record.subject,
            )
        self._limits.held(record.subject, reason)

    def _stored_after_hold(self) -> None:
        self._held_count -= 1
        if self._held_count == 0 and self.full is not None:
            log.info("JetStream accepts stored events again", was=self.full)
            self.full = None
            self._limits.clear()

    async def _hold_loop(self) -> None:
        while True:
            await asyncio.sleep(self._hold_retry)
            if self._held or self._delayed:
                while self._held:
                    record = self._held.popleft()
                    record.attempts = 0  # a limit is no failure: keep all retries for those
                    self._retries.append(record)
                self._retries.extend(self._delayed)
                self._delayed.clear()
                self._wakeup.set()

    def _drop(self, record: _Record, reason: str) -> None:
        if record.held:
            self._stored_after_hold()  # given up for another reason: no longer held
        self._settle_record(record)
        self.lost += 1
        log.error(
            "message could not be stored",
            subject=record.subject,
            msg_id=record.headers.get(HEADER_MSG_ID),
            reason=reason,
        )
        self._check_idle()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self._ack_timeout / 4))
            now = _monotonic()
            expired = []
            for token, record in self._pending.items():
                if record.deadline > now:
                    break  # insertion order is deadline order
                expired.append(token)
            for token in expired:
                late = self._settled(token)
                if late is not None:
                    self._failed(late, f"no ack within {self._ack_timeout:g} s")

    async def _send_loop(self) -> None:
        """Send retries, then queued messages, while the window has room."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while (self._retries or self._ready or self._backlog) and len(
                self._pending
            ) < self._window:
                if self._retries and not self._nc.is_connected:
                    await asyncio.sleep(_RECONNECT_POLL)  # nats-py reconnects by itself
                    continue
                queue = self._retries or self._ready or self._backlog
                if self._send(queue.popleft()):
                    await wait_flushed(self._nc)


async def _last_of(nc: NatsClient, record: _Record, within: float) -> int:
    """The sequence of `record` if it is the last message of its subject, else 0."""
    try:
        last = await nc.jetstream(timeout=within).get_last_msg(record.stream, record.subject)
    except NotFoundError:
        return 0
    msg_id = record.headers[HEADER_MSG_ID]
    if last.seq and (last.headers or {}).get(HEADER_MSG_ID) == msg_id:
        return last.seq
    return 0
