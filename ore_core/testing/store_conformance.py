"""The Store conformance suite: what every thread store must do, as inheritable tests.

A store plugin proves itself by subclassing `StoreConformance` in its own tests and
saying how to open the store::

    from ore_core.testing.store_conformance import StoreConformance

    class TestRedisStore(StoreConformance):
        async def open_store(self, path):
            return RedisStore(url=..., prefix=path.name)

pytest then runs every test below against it. `open_store(path)` is called with a fresh
directory per test; a persistent store must see the same threads when opened again on
the same `path` (that is how `reopen` checks durability). A store that cannot outlive
its object (memory) overrides `reopen` to return the store it was given.

Saves are compare-and-set: `open_second(store, path)` opens a second store on the same
data (what a second worker sees; by default `open_store(path)` again, memory returns
the same object), and the suite checks that a save from a copy loaded before another
writer's save raises `StaleThread`, writes nothing, and succeeds after a reload.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ore_core.artifacts import Reasoning, Text, TextDelta
from ore_core.errors import (
    ArtifactError,
    InvalidThreadId,
    StaleThread,
    StoreError,
    ThreadExists,
    ThreadNotFound,
)
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.turn import Role, TraversalControl, turn_to_dict

__all__ = ["StoreConformance", "thread_shape"]

INVALID_IDS = ["../x", "a/b", "", "x" * 200, "a b", "..", "a\\b", "C:"]


def thread_shape(thread: Thread) -> tuple[Any, str, dict[str, str]]:
    """Everything a store must keep, comparable with `==`: turns of all branches, tip, metadata."""
    turns = sorted((turn_to_dict(turn) for turn in thread.all_turns()), key=lambda t: t["id"])
    return turns, thread.current_tip, thread.meta().all()


def _texts(thread: Thread) -> list[str]:
    """The text of the active path, in order."""
    return [a.content for turn in thread.turns() for a in turn.artifacts if isinstance(a, Text)]


async def _saved_with(store: Store, text: str) -> Thread:
    """A new thread of `store` holding one user turn `text`, saved."""
    thread = await store.create()
    thread.append(Role.USER, Text(text))
    await store.save(thread)
    return thread


async def _two_copies(store: Store) -> tuple[Thread, Thread]:
    """Two loaded copies of one new thread of `store`: saving one makes the other stale."""
    created = await store.create()
    return await store.get(created.id), await store.get(created.id)


def _grow_tree(thread: Thread) -> None:
    """Two branches, a stop turn, an event id, reasoning and metadata: all a store must keep."""
    question = thread.append(Role.USER, Text("hello"), event_id="event-1")
    thread.append(Role.ASSISTANT, Reasoning("thinking"), Text("first answer"))
    thread.fork(question.id)
    summary = thread.append(Role.SYSTEM, Text("summary"))
    thread.set_control(summary.id, TraversalControl.STOP)
    thread.append(Role.ASSISTANT, Text("second answer"))
    thread.meta().set("slack.channel", "C123")
    thread.meta().set("ore.model.name", "gpt-test")


class StoreConformance:
    """Inherit and implement `open_store`; every `test_*` here then runs on your store."""

    pytestmark = [pytest.mark.asyncio]

    async def open_store(self, path: Path) -> Store:
        """Open (or create) the store kept at `path`, a directory that does not exist yet."""
        raise NotImplementedError("subclasses of StoreConformance implement open_store")

    async def reopen(self, store: Store, path: Path) -> Store:
        """Close `store` and open the same location again: what a process restart sees."""
        await store.close()
        return await self.open_store(path)

    exclusive_writer = False
    """True for a store whose writer locks a thread for its process (the journal store):
    a second store's save of that thread is then refused with a StoreError instead of
    a StaleThread, and succeeds once the first store is closed."""

    async def open_second(self, store: Store, path: Path) -> Store:
        """Another store on the same data as `store` (a second worker's), still open."""
        return await self.open_store(path)

    async def close_second(self, store: Store, second: Store) -> None:
        """Close what `open_second` opened (nothing when it returned `store` itself)."""
        if second is not store:
            await second.close()

    @pytest.fixture
    def store_path(self, tmp_path: Path) -> Path:
        """Where the store under test keeps its data."""
        return tmp_path / "store"

    @pytest_asyncio.fixture
    async def store(self, store_path: Path) -> AsyncIterator[Store]:
        """The store under test, closed afterwards."""
        store = await self.open_store(store_path)
        try:
            yield store
        finally:
            await store.close()

    # -- create / get / delete -----------------------------------------------------------

    async def test_create_makes_an_empty_thread_with_a_32_hex_id(self, store: Store) -> None:
        thread = await store.create()
        assert len(thread.id) == 32
        assert int(thread.id, 16) >= 0
        assert (len(thread), thread.current_tip, thread.meta().all()) == (0, "", {})

    async def test_created_thread_is_persisted_at_once(self, store: Store) -> None:
        thread = await store.create()
        assert thread_shape(await store.get(thread.id)) == ([], "", {})

    async def test_create_with_an_id_uses_that_id(self, store: Store) -> None:
        thread = await store.create("slack-C123_1712-0001")
        assert (await store.get("slack-C123_1712-0001")).id == thread.id

    async def test_create_with_an_existing_id_raises_and_keeps_the_thread(
        self, store: Store
    ) -> None:
        thread = await store.create("taken")
        thread.append(Role.USER, Text("keep me"))
        await store.save(thread)
        with pytest.raises(ThreadExists, match="taken"):
            await store.create("taken")
        assert _texts(await store.get("taken")) == ["keep me"]

    async def test_create_stores_the_given_metadata(self, store: Store) -> None:
        thread = await store.create(metadata={"slack.channel": "C1", "title": "t"})
        assert (await store.get(thread.id)).meta().all() == {"slack.channel": "C1", "title": "t"}

    async def test_get_of_a_missing_thread_raises_not_found_naming_it(self, store: Store) -> None:
        with pytest.raises(ThreadNotFound, match="no-such-thread"):
            await store.get("no-such-thread")

    async def test_saved_turns_are_returned_by_get(self, store: Store) -> None:
        thread = await store.create()
        thread.append(Role.USER, Text("hi"))
        thread.append(Role.ASSISTANT, Text("hello"))
        await store.save(thread)
        assert _texts(await store.get(thread.id)) == ["hi", "hello"]

    async def test_delete_removes_the_thread_and_reports_it_existed(self, store: Store) -> None:
        thread = await store.create()
        assert await store.delete(thread.id) is True
        with pytest.raises(ThreadNotFound):
            await store.get(thread.id)

    async def test_delete_of_a_missing_thread_returns_false(self, store: Store) -> None:
        assert await store.delete("never-stored") is False

    async def test_close_is_idempotent(self, store: Store) -> None:
        await store.close()
        await store.close()

    async def test_use_after_close_raises_store_error(self, store: Store) -> None:
        thread = await store.create()
        await store.close()
        with pytest.raises(StoreError):
            await store.get(thread.id)

    # -- list ----------------------------------------------------------------------------

    async def test_list_returns_every_thread_ordered_by_id(self, store: Store) -> None:
        for thread_id in ["b", "c", "a"]:
            await store.create(thread_id)
        assert [thread.id for thread in await store.list()] == ["a", "b", "c"]

    async def test_list_ids_pages_in_ascending_order(self, store: Store) -> None:
        for n in range(7):
            await store.create(f"thread-{n}")
        pages: builtins.list[builtins.list[str]] = []
        after = ""
        while page := await store.list_ids(after=after, limit=3):
            pages.append(page)
            after = page[-1]
        assert pages == [
            ["thread-0", "thread-1", "thread-2"],
            ["thread-3", "thread-4", "thread-5"],
            ["thread-6"],
        ]

    async def test_list_ids_without_limit_returns_all_after_the_cursor(self, store: Store) -> None:
        for thread_id in ["a", "b", "c"]:
            await store.create(thread_id)
        assert await store.list_ids() == ["a", "b", "c"]
        assert await store.list_ids(after="a") == ["b", "c"]
        assert await store.list_ids(limit=0) == []

    # -- get_by / get_or_create_by ----------------------------------------------------------

    async def test_get_by_finds_the_thread_with_the_key_and_value(self, store: Store) -> None:
        await store.create(metadata={"slack.channel": "C1"})
        wanted = await store.create(metadata={"slack.channel": "C2"})
        assert (await store.get_by("slack.channel", "C2")).id == wanted.id

    async def test_get_by_without_a_match_raises_not_found(self, store: Store) -> None:
        await store.create(metadata={"slack.channel": "C1"})
        with pytest.raises(ThreadNotFound):
            await store.get_by("slack.channel", "C9")

    async def test_get_by_empty_value_never_matches_a_thread_lacking_the_key(
        self, store: Store
    ) -> None:
        await store.create(metadata={"other": "x"})
        await store.create()
        with pytest.raises(ThreadNotFound):
            await store.get_by("slack.channel", "")

    async def test_get_by_empty_value_matches_a_key_stored_empty(self, store: Store) -> None:
        wanted = await store.create(metadata={"slack.channel": ""})
        assert (await store.get_by("slack.channel", "")).id == wanted.id

    async def test_get_by_after_delete_raises_not_found(self, store: Store) -> None:
        thread = await store.create(metadata={"slack.channel": "C1"})
        await store.delete(thread.id)
        with pytest.raises(ThreadNotFound):
            await store.get_by("slack.channel", "C1")

    async def test_get_by_sees_metadata_set_before_save(self, store: Store) -> None:
        thread = await store.create()
        thread.meta().set("telegram.chat", "42")
        await store.save(thread)
        assert (await store.get_by("telegram.chat", "42")).id == thread.id

    async def test_get_or_create_by_creates_once_then_finds(self, store: Store) -> None:
        first, created = await store.get_or_create_by("slack.thread", "1712.0001")
        again, created_again = await store.get_or_create_by("slack.thread", "1712.0001")
        assert (created, created_again) == (True, False)
        assert again.id == first.id
        assert again.meta().get("slack.thread") == "1712.0001"

    async def test_get_or_create_by_adds_the_extra_metadata_on_create(self, store: Store) -> None:
        thread, _ = await store.get_or_create_by("slack.thread", "t1", {"slack.channel": "C1"})
        stored = await store.get(thread.id)
        assert stored.meta().all() == {"slack.thread": "t1", "slack.channel": "C1"}

    async def test_concurrent_get_or_create_by_calls_share_one_thread(self, store: Store) -> None:
        results = await asyncio.gather(
            *(store.get_or_create_by("slack.thread", "same") for _ in range(20))
        )
        assert len({thread.id for thread, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert len(await store.list_ids()) == 1

    # -- ids -----------------------------------------------------------------------------------

    @pytest.mark.parametrize("bad_id", INVALID_IDS)
    @pytest.mark.parametrize("operation", ["get", "create", "delete", "save"])
    async def test_invalid_thread_ids_are_rejected(
        self, store: Store, operation: str, bad_id: str
    ) -> None:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "get": lambda: store.get(bad_id),
            "create": lambda: store.create(bad_id),
            "delete": lambda: store.delete(bad_id),
            "save": lambda: store.save(Thread(bad_id)),
        }
        with pytest.raises(InvalidThreadId):
            await calls[operation]()
        assert await store.list_ids() == []

    # -- round trips ----------------------------------------------------------------------------

    async def test_every_branch_tip_control_event_and_metadata_survive_reopening(
        self, store: Store, store_path: Path
    ) -> None:
        thread = await store.create()
        _grow_tree(thread)
        await store.save(thread)
        expected = thread_shape(thread)
        again = await self.reopen(store, store_path)
        try:
            loaded = await again.get(thread.id)
            assert thread_shape(loaded) == expected
            assert _texts(loaded) == ["summary", "second answer"]
            assert loaded.has_event("event-1")
        finally:
            await again.close()

    async def test_saves_after_each_turn_accumulate(self, store: Store, store_path: Path) -> None:
        thread = await store.create()
        for n in range(5):
            thread.append(Role.USER, Text(f"message {n}"))
            await store.save(thread)
        again = await self.reopen(store, store_path)
        try:
            assert _texts(await again.get(thread.id)) == [f"message {n}" for n in range(5)]
        finally:
            await again.close()

    async def test_unicode_content_and_metadata_round_trip(
        self, store: Store, store_path: Path
    ) -> None:
        text = 'héllo 🌍 中文 עברית \u200b tab\tnewline\n quote" backslash\\'
        thread = await store.create(metadata={"título": "ñandú 🐦"})
        thread.append(Role.USER, Text(text))
        await store.save(thread)
        again = await self.reopen(store, store_path)
        try:
            loaded = await again.get(thread.id)
            assert _texts(loaded) == [text]
            assert loaded.meta().get("título") == "ñandú 🐦"
            assert (await again.get_by("título", "ñandú 🐦")).id == thread.id
        finally:
            await again.close()

    async def test_metadata_deletion_is_saved(self, store: Store) -> None:
        thread = await store.create(metadata={"keep": "1", "drop": "2"})
        thread.meta().delete("drop")
        await store.save(thread)
        assert (await store.get(thread.id)).meta().all() == {"keep": "1"}

    async def test_saving_a_delta_raises_artifact_error_and_keeps_the_stored_thread(
        self, store: Store
    ) -> None:
        thread = await _saved_with(store, "kept")
        thread.append(Role.ASSISTANT, TextDelta("streaming fragment"))
        with pytest.raises(ArtifactError, match="text_delta"):
            await store.save(thread)
        assert _texts(await store.get(thread.id)) == ["kept"]

    async def test_saving_a_thread_built_outside_the_store_stores_it(self, store: Store) -> None:
        outside = Thread("imported", metadata={"source": "go"})
        _grow_tree(outside)
        await store.save(outside)
        assert thread_shape(await store.get("imported")) == thread_shape(outside)

    async def test_saving_a_thread_again_after_delete_restores_all_of_it(
        self, store: Store
    ) -> None:
        thread = await _saved_with(store, "one")
        await store.delete(thread.id)
        thread.append(Role.USER, Text("two"))
        await store.save(thread)
        assert _texts(await store.get(thread.id)) == ["one", "two"]

    # -- copies and concurrency -------------------------------------------------------------------

    async def test_get_returns_independent_copies(self, store: Store) -> None:
        first, second = await _two_copies(store)
        first.append(Role.USER, Text("only in first"))
        first.meta().set("k", "v")
        assert (len(second), second.meta().all()) == (0, {})

    async def test_changes_reach_the_store_only_on_save(self, store: Store) -> None:
        thread = await store.create()
        thread.append(Role.USER, Text("unsaved"))
        thread.meta().set("k", "v")
        assert thread_shape(await store.get(thread.id)) == ([], "", {})
        await store.save(thread)
        assert _texts(await store.get(thread.id)) == ["unsaved"]

    async def test_saving_a_stale_copy_raises_stale_thread_and_writes_nothing(
        self, store: Store
    ) -> None:
        first, second = await _two_copies(store)
        first.append(Role.USER, Text("from first"))
        await store.save(first)
        second.append(Role.USER, Text("from second"))
        second.meta().set("winner", "second")
        with pytest.raises(StaleThread, match=first.id):
            await store.save(second)
        loaded = await store.get(first.id)
        assert _texts(loaded) == ["from first"]
        assert len(loaded.all_turns()) == 1  # no branch either
        assert loaded.meta().get("winner") is None

    async def test_a_copy_keeps_saving_after_its_own_saves(self, store: Store) -> None:
        thread = await store.create()
        for n in range(3):
            thread.append(Role.USER, Text(f"message {n}"))
            await store.save(thread)
            thread.meta().set("n", str(n))
            await store.save(thread)
        assert _texts(await store.get(thread.id)) == [f"message {n}" for n in range(3)]

    async def test_a_reloaded_copy_saves_after_a_stale_one_was_refused(self, store: Store) -> None:
        stale, fresh = await _two_copies(store)
        fresh.append(Role.USER, Text("first"))
        await store.save(fresh)
        stale.append(Role.USER, Text("lost"))
        with pytest.raises(StaleThread):
            await store.save(stale)
        reloaded = await store.get(fresh.id)
        reloaded.append(Role.ASSISTANT, Text("second"))
        await store.save(reloaded)
        assert _texts(await store.get(fresh.id)) == ["first", "second"]

    async def test_a_second_store_on_the_same_data_cannot_save_a_stale_copy(
        self, store: Store, store_path: Path
    ) -> None:
        thread = await _saved_with(store, "hello")
        if self.exclusive_writer:
            store = await self.reopen(store, store_path)  # releases the thread's lock
        other = await self.open_second(store, store_path)
        try:
            theirs = await other.get(thread.id)
            mine = await store.get(thread.id)
            theirs.append(Role.ASSISTANT, Text("answer from the other worker"))
            await other.save(theirs)
            mine.append(Role.ASSISTANT, Text("answer from this worker"))
            if self.exclusive_writer:
                with pytest.raises(StoreError, match=thread.id):
                    await store.save(mine)  # refused while the other store holds the lock
                await self.close_second(store, other)
                other = store
            with pytest.raises(StaleThread, match=thread.id):
                await store.save(mine)
            reloaded = await store.get(thread.id)
            assert _texts(reloaded) == ["hello", "answer from the other worker"]
            reloaded.append(Role.USER, Text("next"))
            await store.save(reloaded)
            if not self.exclusive_writer:  # ...and now the other worker's copy is stale
                theirs.append(Role.USER, Text("late"))
                with pytest.raises(StaleThread):
                    await other.save(theirs)
            assert _texts(await other.get(thread.id)) == [
                "hello",
                "answer from the other worker",
                "next",
            ]
        finally:
            await self.close_second(store, other)
            if self.exclusive_writer:
                await store.close()

    async def test_concurrent_saves_of_copies_of_one_version_let_exactly_one_win(
        self, store: Store
    ) -> None:
        created = await store.create()
        copies = [await store.get(created.id) for _ in range(8)]
        for n, copy in enumerate(copies):
            copy.append(Role.USER, Text(f"copy {n}"))
        results = await asyncio.gather(
            *(store.save(copy) for copy in copies), return_exceptions=True
        )
        assert sum(result is None for result in results) == 1
        assert all(isinstance(r, StaleThread) for r in results if r is not None)
        assert len((await store.get(created.id)).all_turns()) == 1

    async def test_fifty_concurrent_create_save_get_cycles(self, store: Store) -> None:
        async def cycle(n: int) -> str:
            thread = await store.create(metadata={"n": str(n)})
            thread.append(Role.USER, Text(f"message {n}"))
            await store.save(thread)
            loaded = await store.get(thread.id)
            assert _texts(loaded) == [f"message {n}"]
            assert loaded.meta().get("n") == str(n)
            return thread.id

        ids = await asyncio.gather(*(cycle(n) for n in range(50)))
        assert len(set(ids)) == 50
        assert await store.list_ids() == sorted(ids)
