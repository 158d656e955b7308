"""`ore migrate`: bring the server's streams to this ore's layout without losing a message.

A stream whose fixed fields differ from the layout (subjects, partition count,
retention, storage, republish) cannot be changed in place: it must be made again. The
one rule is that no message that still matters is ever only in one place:

1. copy what must be kept into a backup stream `<NAME>_MIGRATION` (`work` streams such
   as ORE_IN keep the messages after their consumers' ack floors, i.e. every message
   not yet handled; `history` streams keep every message), and check the count;
2. only then delete the old stream (its consumers go with it);
3. create the new stream (without RePublish meanwhile, so copied history is not sent
   to live subscribers again) and publish the kept messages into it under the subjects
   the entry's `resubmit` gives (ingress re-enters through `P.in.T`, so the new
   partition count applies), each one acknowledged by the server; check the count;
4. restore the full configuration, create the consumers, delete the backup.

An interrupted run leaves the backup behind and the next run resumes from it (copied
messages carry `Ore-Migrate-Seq`, so none is copied twice). Messages after an ack
floor that were handled out of order come back once more: the core recognises them by
event id. Run it with every `ore serve` stopped; it refuses while a consumer has pull
requests waiting or messages in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from ore_core.bus.server.layout import Layout, StreamEntry
from ore_core.bus.server.streams import Difference, diff_layout, ensure_layout, jetstream_call
from ore_core.errors import BusError

__all__ = ["MigrationPlan", "StreamMove", "migrate", "plan_migration"]

MIGRATE_SEQ = "Ore-Migrate-Seq"
MIGRATE_SUBJECT = "Ore-Migrate-Subject"
_DROPPED_HEADERS = (
    "Nats-Msg-Id",  # v1 ids were not per thread: replayed in one window they could collide
    "Nats-Expected-Last-Subject-Sequence",
    "Nats-Expected-Last-Sequence",
    "Nats-Expected-Stream",
    "Nats-Expected-Last-Msg-Id",
)


class MigrationError(BusError):
    """A migration step failed or found something unsafe; nothing further was changed."""


@dataclass(slots=True)
class StreamMove:
    """One stream to make again, and the messages of it to carry over (by sequence)."""

    entry: StreamEntry
    reasons: list[Difference]
    messages: int = 0
    keep: list[int] = field(default_factory=list)
    floors: dict[str, int] = field(default_factory=dict)
    resume: bool = False
    stale_backup: bool = False

    def line(self) -> str:
        """What will happen to this stream, in one line."""
        why = "; ".join(reason.describe() for reason in self.reasons) or "an earlier run"
        if self.resume:
            return f"{self.entry.name}: resume the interrupted migration ({why})"
        what = (
            f"keep the {len(self.keep)} unhandled of {self.messages} message(s)"
            if self.entry.role == "work"
            else f"keep all {self.messages} message(s)"
        )
        return f"{self.entry.name}: recreate ({why}); {what}"


@dataclass(slots=True)
class MigrationPlan:
    """What `migrate` would do: streams to make again and in-place changes."""

    moves: list[StreamMove]
    updates: list[Difference]

    def lines(self) -> list[str]:
        """One line per change, or one saying there is nothing to do."""
        lines = [move.line() for move in self.moves]
        lines += [f"{d.describe()} -> {_in_place(d)}" for d in self.updates]
        return lines or ["the server already matches this ore's layout: nothing to migrate"]


def _in_place(difference: Difference) -> str:
    return "create" if difference.field == "missing" else "update in place"


def _backup_name(stream: str) -> str:
    return f"{stream}_MIGRATION"


def _backup_subject(stream: str) -> str:
    return f"_ore_migration.{stream}"


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: `*` is one token, a final `>` one or more."""
    want, have = pattern.split("."), subject.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(want) == len(have)


async def _exists(js: JetStreamContext, name: str) -> bool:
    try:
        await jetstream_call(f"stream info {name}", js.stream_info(name))
    except NotFoundError:
        return False
    return True


async def _ack_floors(js: JetStreamContext, stream: str) -> list[tuple[list[str], int, str]]:
    """(filters, ack floor, name) of each consumer of `stream`; refuses busy consumers."""
    floors = []
    for info in await jetstream_call(f"consumer list of {stream}", js.consumers_info(stream)):
        config = info.config
        filters = list(config.filter_subjects or []) or (
            [config.filter_subject] if config.filter_subject else [">"]
        )
        if info.num_ack_pending or info.num_waiting:
            raise MigrationError(
                f"consumer {info.name} of {stream} is in use ({info.num_ack_pending} message(s) "
                f"in flight, {info.num_waiting} pull request(s) waiting): stop every ore serve "
                "and run ore migrate again (waiting pull requests expire within 30 s)"
            )
        floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
        floors.append((filters, int(floor or 0), str(info.name)))
    return floors


async def _plan_move(js: JetStreamContext, move: StreamMove) -> None:
    name = move.entry.name
    info = await jetstream_call(f"stream info {name}", js.stream_info(name))
    state = info.state
    move.messages = int(state.messages)
    if not move.messages:
        return
    floors = await _ack_floors(js, name) if move.entry.role == "work" else []
    move.floors = {consumer: floor for _, floor, consumer in floors}
    for seq in range(int(state.first_seq), int(state.last_seq) + 1):
        if floors:
            try:
                msg = await js.get_msg(name, seq)
            except NotFoundError:
                continue  # deleted or expired
            subject = str(msg.subject)
            if any(
                seq <= floor and any(subject_matches(f, subject) for f in filters)
                for filters, floor, _ in floors
            ):
                continue
        move.keep.append(seq)


async def plan_migration(js: JetStreamContext, layout: Layout) -> MigrationPlan:
    """What `migrate` would change; changes nothing."""
    differences = await diff_layout(js, layout)
    moving: dict[str, list[Difference]] = {}
    for difference in differences:
        if difference.fixed:
            stream = difference.name.partition("/")[0]
            moving.setdefault(stream, []).append(difference)
    moves = []
    for entry in layout.streams:
        backup = await _exists(js, _backup_name(entry.name))
        if entry.name in moving:  # the old stream is still there: a backup is unfinished
            move = StreamMove(entry, moving.pop(entry.name), stale_backup=backup)
            await _plan_move(js, move)
            moves.append(move)
        elif backup:  # the old stream is gone or already replaced: copy the backup back
            moves.append(StreamMove(entry, [], resume=True))
    moved = {move.entry.name for move in moves}
    updates = [d for d in differences if not d.fixed and d.name.partition("/")[0] not in moved]
    return MigrationPlan(moves, updates)


async def migrate(
    js: JetStreamContext, layout: Layout, *, say: Callable[[str], None] = lambda _: None
) -> MigrationPlan:
    """Carry out `plan_migration` (see the module docstring); returns the plan it did."""
    plan = await plan_migration(js, layout)
    for move in plan.moves:
        say(move.line())
        await _move(js, move, say)
    await ensure_layout(js, layout, change_guarded=True)
    return plan


async def _move(js: JetStreamContext, move: StreamMove, say: Callable[[str], None]) -> None:
    name = move.entry.name
    backup = _backup_name(name)
    if move.stale_backup:
        await jetstream_call(f"delete stream {backup}", js.delete_stream(backup))
    if not move.resume:
        await _fill_backup(js, move)
        say(f"{name}: {len(move.keep)} message(s) copied to {backup} and counted")
        await jetstream_call(f"delete stream {name}", js.delete_stream(name))
    config = move.entry.config
    quiet = replace(config, republish=None) if config.republish is not None else config
    if not await _exists(js, name):
        await jetstream_call(f"create stream {name}", js.add_stream(quiet))
    elif not move.resume:
        raise MigrationError(f"stream {name} reappeared during the migration; run it again")
    copied = await _copy_back(js, move.entry, backup)
    say(f"{name}: {copied} message(s) published into the new stream and acknowledged")
    if quiet is not config:
        await jetstream_call(f"update stream {name}", js.update_stream(config))
    await jetstream_call(f"delete stream {backup}", js.delete_stream(backup))


async def _fill_backup(js: JetStreamContext, move: StreamMove) -> None:
    name, backup = move.entry.name, _backup_name(move.entry.name)
    old = (await jetstream_call(f"stream info {name}", js.stream_info(name))).config
    await jetstream_call(
        f"create stream {backup}",
        js.add_stream(
            StreamConfig(
                name=backup,
                description=f"ore migrate: messages of {name} kept while it is made again",
                subjects=[_backup_subject(name)],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                num_replicas=old.num_replicas,
                max_msg_size=-1,
            )
        ),
    )
    resubmit = move.entry.resubmit or (lambda subject: subject)
    for seq in move.keep:
        try:
            msg = await js.get_msg(name, seq)
        except NotFoundError:
            continue
        headers = {k: v for k, v in (msg.headers or {}).items() if k not in _DROPPED_HEADERS}
        headers[MIGRATE_SEQ] = str(seq)
        headers[MIGRATE_SUBJECT] = resubmit(str(msg.subject))
        await js.publish(_backup_subject(name), msg.data or b"", headers=headers)
    stored = (await js.stream_info(backup)).state.messages
    if stored != len(move.keep):
        await js.delete_stream(backup)
        raise MigrationError(
            f"{backup} holds {stored} message(s), expected {len(move.keep)}: nothing was "
            f"deleted; {name} is unchanged. Run ore migrate again"
        )


async def _copy_back(js: JetStreamContext, entry: StreamEntry, backup: str) -> int:
    name = entry.name
    done = await _already_copied(js, name)
    state = (await js.stream_info(backup)).state
    copied = 0
    for seq in range(int(state.first_seq), int(state.last_seq) + 1):
        try:
            msg = await js.get_msg(backup, seq)
        except NotFoundError:
            continue
        headers = dict(msg.headers or {})
        if headers.get(MIGRATE_SEQ) in done:
            copied += 1
            continue
        subject = headers.pop(MIGRATE_SUBJECT)
        ack = await js.publish(subject, msg.data or b"", headers=headers, stream=name)
        if ack.stream != name:
            raise MigrationError(f"{subject} was stored in {ack.stream}, not {name}")
        copied += 1
    expected = int(state.messages)
    if copied != expected:
        raise MigrationError(
            f"{copied} of {expected} message(s) of {backup} reached {name}; the backup is "
            "kept: run ore migrate again to resume"
        )
    return copied


async def _already_copied(js: JetStreamContext, name: str) -> set[str]:
    """`Ore-Migrate-Seq` values already in `name` (a resumed run skips them)."""
    state = (await js.stream_info(name)).state
    seen: set[str] = set()
    for seq in range(int(state.first_seq), int(state.last_seq) + 1) if state.messages else ():
        try:
            msg = await js.get_msg(name, seq)
        except NotFoundError:
            continue
        marker = (msg.headers or {}).get(MIGRATE_SEQ)
        if marker is not None:
            seen.add(marker)
        await asyncio.sleep(0)
    return seen
