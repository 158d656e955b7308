"""Copies of a thread's stored batches for its linked namespaces (ore_core/bridge): the
same bytes the server's republish sends to `P.out.NS.T`, sent to `P.out.NSx.T` too."""

from __future__ import annotations

from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, OutboundBufferLimitError
from nats.js.api import RawStreamMsg

from ore_core._nats.codec import republished_block, stored_copy_block
from ore_core._nats.wire import publish_now
from ore_core.bridge.cache import LinkCache
from ore_core.subjects import Subjects

__all__ = ["StoredCopies"]


class StoredCopies:
    """Sends copies of stored batches, best effort: a feed that misses one finds the gap
    in the sequences and reads it (`events.read`)."""

    __slots__ = ("_links", "_nc", "_subjects", "lost")

    def __init__(self, nc: NatsClient, subjects: Subjects, links: LinkCache) -> None:
        self._nc = nc
        self._subjects = subjects
        self._links = links
        self.lost = 0
        """Copies not sent (disconnected): their feeds catch up."""

    def stored(self, subject: str, data: bytes, head: bytes, sequence: int, previous: int) -> None:
        """A batch of a thread is stored (`Pipeline.watch_stored`): send the same bytes,
        with the sequences the server's republish would carry, to every linked namespace."""
        thread_id = subject[subject.rfind(".") + 1 :]
        copies = self._links.copies(thread_id)
        if copies:
            self._copy(thread_id, copies, data, republished_block(head, sequence, previous))

    def last(self, thread_id: str, last: RawStreamMsg | None) -> None:
        """`prime`: send the thread's last stored batch to its linked namespaces again, in
        case the copies of the worker that stored it were lost (feeds drop a sequence
        they had). Its previous sequence is not read: one less than its own makes a feed
        that may have missed something ask (`events.read`), never skip."""
        copies = () if last is None else self._links.copies(thread_id)
        if not copies or last is None or not last.seq:
            return
        block = stored_copy_block(dict(last.headers or {}), last.seq, last.seq - 1)
        self._copy(thread_id, copies, last.data or b"", block)

    def _copy(self, thread_id: str, copies: tuple[str, ...], data: bytes, block: bytes) -> None:
        for namespace in copies:
            try:
                publish_now(self._nc, self._subjects.output(namespace, thread_id), data, "", block)
            except (OutboundBufferLimitError, ConnectionClosedError):
                self.lost += 1  # the endpoint's feed finds the gap and reads it
