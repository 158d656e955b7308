"""Bounded work for streamed deltas: accumulate in O(n), publish a few per second.

A model (or the echo processor fed a 900 KB message) may produce hundreds of
thousands of tiny deltas. Merging each into the artifact so far copies the whole
text every time (O(n^2)), publishing each one costs a bus message, and a producer
that never awaits starves every other thread on the event loop. `DeltaAccumulator`
keeps text parts in a list and joins them once; `DeltaPacer` publishes the live
text/reasoning deltas at most once per `interval` per key, each message at most
`max_bytes` (UTF-8) long, starting at once (the first delta is never held back) and
ticking on a timer so text stalls no longer than `interval` when the model pauses.
What is still buffered when the artifact completes is dropped from the live feed:
the complete artifact, published right after, carries all of it (deltas are a
preview; the bus already treats them as best effort).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ore_core.artifacts import Accumulable, Artifact, Reasoning, ReasoningDelta, Text, TextDelta

__all__ = ["DeltaAccumulator", "DeltaPacer"]

_JOINABLE = (TextDelta, ReasoningDelta)
# What `merge_into(None)` of these exact kinds makes (a subclass may override it).
_COMPLETE: dict[type[Artifact], type[Text] | type[Reasoning]] = {
    TextDelta: Text,
    ReasoningDelta: Reasoning,
}
_NEVER = float("-inf")  # the time of the last tick before the first


class _Parts:
    """Text of one key's deltas, joined only when the artifact is needed."""

    __slots__ = ("kind", "parts")

    # A plain class: made once per key and step, and a dataclass's generated `__init__`
    # with a default factory costs twice this one.
    def __init__(self, kind: type[TextDelta] | type[ReasoningDelta], parts: list[str]) -> None:
        self.kind = kind
        self.parts = parts


class DeltaAccumulator:
    """Merges deltas per accumulator key, in first-seen order, without quadratic copies."""

    __slots__ = ("_merged",)

    def __init__(self) -> None:
        self._merged: dict[str, _Parts | Artifact] = {}

    def add(self, delta: Accumulable) -> None:
        """Merge `delta` into its key's artifact."""
        key = delta.accumulator_key()
        current = self._merged.get(key)
        if isinstance(delta, _JOINABLE):
            if current is None:
                self._merged[key] = _Parts(type(delta), [delta.content])
                return
            if isinstance(current, _Parts) and current.kind is type(delta):
                current.parts.append(delta.content)
                return
            current = self._complete(current)
        self._merged[key] = delta.merge_into(None if current is None else self._complete(current))

    def take(self) -> list[Artifact]:
        """The complete artifacts so far, in first-seen order; the accumulator is emptied."""
        artifacts = [self._complete(value) for value in self._merged.values()]
        self._merged.clear()
        return artifacts

    def __bool__(self) -> bool:
        return bool(self._merged)

    @staticmethod
    def _complete(value: _Parts | Artifact) -> Artifact:
        if isinstance(value, _Parts):
            text = "".join(value.parts)  # one part: that very string, no copy
            complete = _COMPLETE.get(value.kind)
            return complete(text) if complete is not None else value.kind(text).merge_into(None)
        return value


class DeltaPacer:
    """Publishes live deltas of text and reasoning at most once per `interval` per key.

    `interval` 0 publishes every delta as it comes (no pacing). Other deltas (tool
    call fragments, plugin kinds) are published as they come: they are small and few.
    """

    def __init__(
        self, publish: Callable[[Artifact], None], *, interval: float, max_bytes: int
    ) -> None:
        self._publish = publish
        self._interval = interval
        self._max_bytes = max(max_bytes, 64)
        self._buffered: dict[str, _Parts] = {}
        self._last = _NEVER
        self._timer: asyncio.TimerHandle | None = None

    def add(self, delta: Accumulable) -> None:
        """Publish `delta` now, or buffer it until the next tick."""
        if self._interval <= 0 or not isinstance(delta, _JOINABLE):
            self._publish(delta)
            return
        key = delta.accumulator_key()
        loop = asyncio.get_running_loop()
        now = loop.time()
        if (
            not self._buffered
            and now - self._last >= self._interval
            and type(delta) in _COMPLETE
            and len(delta.content) * 4 <= self._max_bytes
        ):
            # The first delta since the start (or `finish`), due now and small: what a
            # tick would publish is this very delta (a short answer pays no buffering).
            self._buffered[key] = _Parts(type(delta), [])
            self._last = now
            if delta.content:
                self._publish(delta)
            return
        buffered = self._buffered.get(key)
        if buffered is None or buffered.kind is not type(delta):
            self._emit_key(key)
            buffered = self._buffered[key] = _Parts(type(delta), [])
        buffered.parts.append(delta.content)
        if now - self._last >= self._interval:
            self._tick()
        elif self._timer is None:
            self._timer = loop.call_at(self._last + self._interval, self._tick)

    def finish(self) -> None:
        """The artifacts are complete: publish one last chunk per key, drop the rest."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for key, buffered in list(self._buffered.items()):
            if buffered.parts:
                self._emit_key(key)
        self._buffered.clear()

    def _tick(self) -> None:
        self._timer = None
        self._last = asyncio.get_running_loop().time()
        backlog = False
        for key in list(self._buffered):
            backlog |= self._emit_key(key)
        if backlog:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._tick)

    def _emit_key(self, key: str) -> bool:
        """Publish up to `max_bytes` of the key's buffered text; True if more is left."""
        buffered = self._buffered.get(key)
        if buffered is None or not buffered.parts:
            return False
        text = "".join(buffered.parts)
        if len(text) * 4 <= self._max_bytes:  # fits whatever it is (UTF-8: <= 4 bytes each)
            chunk, rest = text, ""
        else:
            chunk = text.encode()[: self._max_bytes].decode(errors="ignore")
            rest = text[len(chunk) :]
        buffered.parts = [rest] if rest else []
        if chunk:
            self._publish(buffered.kind(chunk))
        return bool(rest)
