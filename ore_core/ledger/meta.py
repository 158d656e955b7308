"""Meta: the live str -> str metadata handle of a conversation State."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Meta", "MetaListener"]

MetaListener = Callable[[str, str | None], None]
"""Told `(key, value)` before a change is applied; `value=None` means the key is deleted."""


class Meta:
    """A live view of a State's metadata: writes are seen by every handle of that State.

    A State builds its handles over one dict it owns, so `thread.meta().set(...)` is
    visible through any other `thread.meta()`. `all()` returns a copy. The optional
    listener runs before each change is applied (a bound Thread journals there), so
    a listener that raises leaves the metadata unchanged.

    Not safe for concurrent use: like its State, one asyncio task owns it.
    """

    __slots__ = ("_data", "_listener")

    def __init__(
        self, data: dict[str, str] | None = None, *, listener: MetaListener | None = None
    ) -> None:
        self._data: dict[str, str] = {} if data is None else data
        self._listener = listener

    def get(self, key: str) -> str | None:
        """The value stored under `key`, or None when it is absent."""
        return self._data.get(key)

    def set(self, key: str, value: str) -> None:
        """Store `value` under `key`, replacing any prior value."""
        if self._listener is not None:
            self._listener(key, value)
        self._data[key] = value

    def delete(self, key: str) -> bool:
        """Remove `key`; True when it was present (a missing key changes nothing)."""
        if key not in self._data:
            return False
        if self._listener is not None:
            self._listener(key, None)
        del self._data[key]
        return True

    def all(self) -> dict[str, str]:
        """A copy of every key and value: changing it does not touch the State."""
        return dict(self._data)
