"""Typing a thread id like a git commit: any unique prefix names the thread.

Thread ids are 32 hex characters; nobody types that. Every place a person types a
thread id (`ore threads show|fork|delete|export`, `ore chat --thread`) resolves it
here: an exact id wins, else the one id that starts with it. Listings print
`SHORT_ID` characters, which are almost always unique.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ore_core.errors import ApiError, ThreadNotFound

if TYPE_CHECKING:
    from ore_core.conduit import ConduitClient

__all__ = ["SHORT_ID", "AmbiguousThreadId", "resolve_on_core", "resolve_thread_id", "short_id"]

_BAD_REQUEST = 400
_NOT_FOUND = 404

SHORT_ID = 8
"""Characters of a thread id shown in listings."""

ListIds = Callable[[str, int], Awaitable[Sequence[str]]]
"""`list_ids(after, limit)`: ids in ascending order after `after`, at most `limit`."""


class AmbiguousThreadId(ThreadNotFound):
    """Several threads start with the typed prefix; the message lists some of them."""


def short_id(thread_id: str) -> str:
    """The first `SHORT_ID` characters, as listings show them."""
    return thread_id[:SHORT_ID]


async def resolve_thread_id(
    typed: str, exists: Callable[[str], Awaitable[bool]], list_ids: ListIds, where: str
) -> str:
    """The full id `typed` names: itself if it exists, else the only id it prefixes.

    Raises ThreadNotFound (nothing matches) or AmbiguousThreadId (several do), each
    with a message that says what to type instead. `where` names the store in them.
    """
    if await exists(typed):
        return typed
    # Ids are listed in ascending order, and every id longer than `typed` that starts
    # with it sorts right after it: two are enough to tell unique from ambiguous.
    candidates = [found for found in await list_ids(typed, 3) if found.startswith(typed)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ThreadNotFound(f"thread {typed} not found in {where}: `ore threads list` shows them")
    shown = ", ".join(candidates[:2]) + (", ..." if len(candidates) > 2 else "")
    raise AmbiguousThreadId(f"thread id {typed} is ambiguous in {where} ({shown}): type more of it")


async def resolve_on_core(client: ConduitClient, typed: str) -> str:
    """The full id of the thread `typed` names, asked of the core's control API (what a
    conduit or `ore chat` has; `ore threads` reads its store instead)."""

    async def exists(thread_id: str) -> bool:
        try:
            await client.get_thread(thread_id)
        except ApiError as exc:
            if exc.status in (_BAD_REQUEST, _NOT_FOUND):
                return False
            raise
        return True

    async def list_ids(after: str, limit: int) -> list[str]:
        return (await client.list_threads(after=after, limit=limit)).threads

    return await resolve_thread_id(typed, exists, list_ids, "the store of the core")
