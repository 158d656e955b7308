"""Ledger benchmark: journal append, hydrate and the active path, against a raw baseline.

Run: python bench/ledger.py [--turns N] [--repeat R]   (not a test)

1. Append N turns (~200 bytes of text each) through a Thread bound to a
   FileRepository with fsync=batch, then flush (its one fsync is counted).
2. Hydrate them back with a fresh FileRepository (2 N entries).
3. Resolve the active path of the N-deep thread built from that journal.

The baseline does only the unavoidable work on the same entries in the same run:
`orjson.dumps` of the prebuilt entry dicts written through one buffered file (plus
one fsync), and reading the lines back with one `orjson.loads` each. A breakdown
shows which layer spends what, and stdlib json, orjson and pydantic-core encode and
decode the same entries (what the journal's JSON choice rests on). Every figure is
the best of R runs: the machine is shared and the first run also pays heap growth.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pydantic_core

from ore_core import Role, Text, Thread
from ore_core.ledger.clock import SystemClock
from ore_core.ledger.entries import Entry, EntryWriter, collector_paused
from ore_core.ledger.file_repository import FileRepository
from ore_core.ledger.journal import JournalWriter
from ore_core.turn import turn_from_dict

THREAD = "bench"
POLICY_TURNS = 2_000  # `always` waits for the disk on every append: keep its run short
ROLES = (Role.USER, Role.ASSISTANT)
FILLER = "The quick brown fox jumps over the lazy dog while the ledger keeps every turn. " * 3


def texts(count: int) -> list[Text]:
    """Distinct ~200-byte texts, so nothing is shared between turns."""
    return [Text(f"{n:08d} {FILLER}"[:200]) for n in range(count)]


def seconds(func: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def append_all(thread: Thread, contents: list[Text]) -> None:
    for n, content in enumerate(contents):
        thread.append(ROLES[n % 2], content)


class Best:
    """The lowest time seen per measurement."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def keep(self, name: str, value: float) -> None:
        self.times[name] = min(value, self.times.get(name, value))

    def __getitem__(self, name: str) -> float:
        return self.times[name]


def append_to_file(directory: Path, contents: list[Text], fsync: str = "batch") -> float:
    """Seconds to append every text through a bound Thread, the final flush included."""
    with FileRepository(directory, fsync=fsync) as repository:
        thread = Thread.from_journal(repository, THREAD)

        def append_and_flush() -> None:
            append_all(thread, contents)
            repository.flush()

        return seconds(append_and_flush)


def run_once(scratch: Path, contents: list[Text], entries: list[Entry], best: Best) -> None:
    """One round of every measurement, in a fresh directory."""
    directory = scratch / "journals"
    best.keep("append", append_to_file(directory, contents))
    with FileRepository(directory) as repository:
        best.keep("hydrate", seconds(lambda: repository.hydrate(THREAD)))
        rebuilt = Thread.from_journal(repository, THREAD, bind=False)
    best.keep("path", seconds(rebuilt.resolve_active_path))
    del rebuilt

    raw = scratch / "baseline.jsonl"

    def write_baseline() -> None:
        with raw.open("wb") as file:
            for entry in entries:
                file.write(orjson.dumps(entry) + b"\n")
            file.flush()
            os.fsync(file.fileno())

    def read_baseline() -> None:
        with raw.open("rb") as file:
            for line in file:
                orjson.loads(line)

    best.keep("baseline write", seconds(write_baseline))
    best.keep("baseline read", seconds(read_baseline))

    # Breakdown of the append: the thread alone, then with entries built but dropped.
    def bound_to(journal: JournalWriter | None) -> Callable[[], None]:
        return lambda: append_all(Thread(THREAD, journal=journal), contents)

    best.keep("thread only", seconds(bound_to(None)))
    best.keep("entries built", seconds(bound_to(EntryWriter(lambda _: None, SystemClock()))))
    # ... and of the hydrate: decoding the turns alone (payloads parsed, collector paused
    # as in a hydrate).
    payloads = [e["payload"]["turn"] for e in entries if e["tx_type"] == "add_turn"]

    def decode_turns() -> None:
        with collector_paused():
            [turn_from_dict(p) for p in payloads]

    best.keep("turn decode", seconds(decode_turns))


def policies(contents: list[Text], repeat: int) -> list[tuple[str, float]]:
    """(fsync policy, best appends/s) on the first POLICY_TURNS texts."""
    rows = []
    for policy in ("always", "batch", "never"):
        runs = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="ore-bench-") as scratch:
                runs.append(append_to_file(Path(scratch), contents[:POLICY_TURNS], policy))
        rows.append((policy, len(contents[:POLICY_TURNS]) / min(runs)))
    return rows


def codecs(entries: list[Entry], repeat: int) -> list[tuple[str, float, float]]:
    """(codec, best encode µs/entry, best decode µs/entry) over the same entries."""
    table: list[tuple[str, Callable[[Any], bytes], Callable[[bytes], Any]]] = [
        (
            "stdlib json",
            lambda e: json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode(),
            json.loads,
        ),
        ("orjson", orjson.dumps, orjson.loads),
        ("pydantic-core", pydantic_core.to_json, pydantic_core.from_json),
    ]
    lines = [orjson.dumps(entry) for entry in entries]
    per_entry = 1e6 / len(entries)
    rows = []
    for name, encode, decode in table:

        def encode_all(encode: Callable[[Any], bytes] = encode) -> None:
            for entry in entries:
                encode(entry)

        def decode_all(decode: Callable[[bytes], Any] = decode) -> None:
            for line in lines:
                decode(line)

        encode_s = min(seconds(encode_all) for _ in range(repeat))
        decode_s = min(seconds(decode_all) for _ in range(repeat))
        rows.append((name, encode_s * per_entry, decode_s * per_entry))
    return rows


def entry_dicts(contents: list[Text]) -> list[Entry]:
    """The entries a bound thread writes for these texts (built untimed, for baselines)."""
    captured: list[Entry] = []
    append_all(Thread(THREAD, journal=EntryWriter(captured.extend, SystemClock())), contents)
    return captured


def report(turns: int, entries: int, size: int, repeat: int, best: Best) -> None:
    print(f"ore ledger benchmark: {turns:,} turns, {entries:,} entries, {size / 1e6:.1f} MB")
    print(f"python {sys.version.split()[0]}, orjson {orjson.__version__}, best of {repeat}")
    print()
    append_ratio = best["append"] / best["baseline write"]
    hydrate_ratio = best["hydrate"] / best["baseline read"]
    print(f"{'measure':<34}{'ore':>12}{'baseline':>12}{'ratio':>8}")
    for name, ours, base, ratio in [
        ("append (turns/s)", turns / best["append"], turns / best["baseline write"], append_ratio),
        (
            "append (entries/s)",
            entries / best["append"],
            entries / best["baseline write"],
            append_ratio,
        ),
        ("append (ms)", best["append"] * 1e3, best["baseline write"] * 1e3, append_ratio),
        (
            "hydrate (entries/s)",
            entries / best["hydrate"],
            entries / best["baseline read"],
            hydrate_ratio,
        ),
        ("hydrate (ms)", best["hydrate"] * 1e3, best["baseline read"] * 1e3, hydrate_ratio),
    ]:
        print(f"{name:<34}{ours:>12,.0f}{base:>12,.0f}{ratio:>7.2f}x")
    print(f"{f'active path, {turns:,} deep (ms)':<34}{best['path'] * 1e3:>12,.1f}")
    print()
    us = 1e6 / turns
    thread_us = best["thread only"] * us
    entries_us = best["entries built"] * us
    print("append, per turn (us)")
    print(f"  Thread.append, unbound            {thread_us:8.2f}")
    print(f"  + copy, turn JSON, entries        {entries_us - thread_us:8.2f}")
    print(f"  + encode, write(), lock, fsync    {best['append'] * us - entries_us:8.2f}")
    print(f"  = bound to a FileRepository       {best['append'] * us:8.2f}")
    print(f"  baseline (dumps + buffered write) {best['baseline write'] * us:8.2f}")
    print("hydrate, per turn = 2 entries (us)")
    print(f"  read + orjson.loads (baseline)    {best['baseline read'] * us:8.2f}")
    print(f"  turn_from_dict                    {best['turn decode'] * us:8.2f}")
    rest = (best["hydrate"] - best["baseline read"] - best["turn decode"]) * us
    print(f"  replay, checks, line limit        {rest:8.2f}")
    print(f"  = FileRepository.hydrate          {best['hydrate'] * us:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100_000, help="turns to append")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is reported")
    options = parser.parse_args()
    contents = texts(options.turns)
    entries = entry_dicts(contents)
    gc.freeze()  # the fixtures live throughout: keep the collector from rescanning them
    best = Best()
    for _ in range(options.repeat):
        with tempfile.TemporaryDirectory(prefix="ore-bench-") as scratch:
            run_once(Path(scratch), contents, entries, best)
            journal = Path(scratch, "journals", f"{THREAD}.jsonl")
            size = journal.stat().st_size
            count = journal.read_bytes().count(b"\n")
    report(options.turns, count, size, options.repeat, best)
    print()
    print(f"fsync policy, {min(options.turns, POLICY_TURNS):,} turns{'turns/s':>15}")
    for policy, rate in policies(contents, options.repeat):
        print(f"  {policy:<32}{rate:>12,.0f}")
    print()
    print(f"{'JSON codec, per entry':<34}{'encode (us)':>12}{'decode (us)':>12}")
    for name, encode_us, decode_us in codecs(entries, options.repeat):
        print(f"{name:<34}{encode_us:>12.2f}{decode_us:>12.2f}")


if __name__ == "__main__":
    main()
