"""A turn's JSON is encoded once: its `turn_complete` event and the store share the bytes.

The work is counted with a profile hook on the code objects of `turn_to_dict` and
`format_timestamp`, so a call by any route (a module that imported the function by
name, a pydantic serializer, the store's worker thread) is counted.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ore_core import Manager, OutputEvent, TurnCompleteEvent, jsonutil
from ore_core.events import encode_event
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores import MemoryStore, SQLiteStore
from ore_core.turn import format_timestamp, turn_json, turn_to_dict
from tests.session.support import message

TURNS_PER_MESSAGE = 2  # the user's turn and the echo's answer


@contextmanager
def counting_calls(*functions: Any) -> Iterator[dict[str, int]]:
    """Count the calls of `functions` on every thread while the block runs."""
    codes = {function.__code__: function.__name__ for function in functions}
    counts = dict.fromkeys(codes.values(), 0)
    lock = threading.Lock()

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code in codes:
            with lock:
                counts[codes[frame.f_code]] += 1

    sys.setprofile(hook)
    threading.setprofile(hook)  # the store's worker thread starts inside the block
    try:
        yield counts
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)


class EncodingSink:
    """A batch sink that encodes every event, as the bus egress does."""

    def __init__(self) -> None:
        self.encoded: list[bytes] = []
        self.turns: dict[str, bytes] = {}  # turn id -> the JSON its turn_complete carried

    async def __call__(self, items: list[tuple[str, OutputEvent | None]]) -> None:
        for _thread_id, event in items:
            if event is None:
                continue
            raw = encode_event(event)
            self.encoded.append(raw)
            if isinstance(event, TurnCompleteEvent):
                self.turns[event.turn.id] = jsonutil.dumps(jsonutil.loads(raw)["turn"])


async def _run_turns(store: Any, messages: int) -> EncodingSink:
    sink = EncodingSink()
    try:
        async with Manager(store, EchoProcessor()) as manager:
            manager.register_batch_sink((), sink, name="encoder", lossless=True)
            stream = await manager.create()
            for n in range(messages):
                await stream.process(message(f"hello {n}", id=f"e{n}"))
    finally:
        await store.close()
    return sink


async def test_a_manager_turn_with_sqlite_encodes_each_turn_once(tmp_path: Path) -> None:
    messages = 3
    with counting_calls(turn_to_dict, format_timestamp) as counts:
        sink = await _run_turns(SQLiteStore(tmp_path / "ore.db"), messages)
    turns = messages * TURNS_PER_MESSAGE
    assert len(sink.turns) == turns
    assert counts == {"turn_to_dict": turns, "format_timestamp": turns}
    # What the store wrote is byte for byte what the events carried.
    with closing(sqlite3.connect(tmp_path / "ore.db")) as conn:
        stored = dict(conn.execute("SELECT turn_id, json FROM turns").fetchall())
    assert {turn_id: raw.encode() for turn_id, raw in stored.items()} == sink.turns


async def test_a_manager_turn_with_the_memory_store_encodes_each_turn_once() -> None:
    messages = 3
    with counting_calls(turn_to_dict) as counts:
        sink = await _run_turns(MemoryStore(), messages)
    assert len(sink.turns) == messages * TURNS_PER_MESSAGE
    assert counts == {"turn_to_dict": messages * TURNS_PER_MESSAGE}


def test_turn_json_is_turn_to_dict_encoded_and_kept_on_the_turn() -> None:
    from datetime import UTC, datetime

    from ore_core import Role, Text, Turn

    turn = Turn("t1", Role.USER, (Text("hi"),), timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    first = turn_json(turn)
    assert first == jsonutil.dumps(turn_to_dict(turn))
    assert turn_json(turn) is first
    # The cache is no part of the value: equality, hash and repr ignore it.
    fresh = Turn("t1", Role.USER, (Text("hi"),), timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    assert fresh == turn
    assert hash(fresh) == hash(turn)
    assert repr(fresh) == repr(turn)


def test_the_json_kept_on_a_turn_holds_its_own_size_not_the_encoder_s_buffer() -> None:
    """A loaded thread keeps every turn's JSON (issue 29: a long relay grew ~4 KiB a turn)."""
    import tracemalloc
    from datetime import UTC, datetime

    from ore_core import Role, Text, Turn

    when = datetime(2024, 1, 1, tzinfo=UTC)
    turns = [Turn(f"t{n}", Role.USER, (Text("hi"),), timestamp=when) for n in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [turn_json(turn) for turn in turns]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < sum(len(data) for data in kept) + 200 * 128  # bytes header + list slot
