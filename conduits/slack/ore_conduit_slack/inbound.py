"""Inbound: Slack events -> ore user messages, edits, deletes and interrupts.

`Inbound.take(body)` is the Bolt listener, run before Bolt acknowledges the event: it
decides, keeps an event that needs work in the inbox (one SQLite commit, so Slack is
acknowledged only for what survives a crash) and queues the work. The work runs in
lanes, one per Slack thread (messages of a thread reach the core in order; a slow
thread never holds up another). Work that cannot reach the core (it is away, NATS is
down) waits and tries again for as long as it takes; the event leaves the inbox once
its work is done. At start, `replay()` queues what an earlier run left in the inbox.

- Answered: `app_mention`, direct messages, and replies in a thread the bot is part of
  (`reply_in_owned_threads`). The bot's mention is stripped.
- Ignored: the bot's own messages and edits, other bots (unless `allow_bots`), and
  subtypes that are not a person writing (joins, topic changes, ...).
- Effectively once: the event id is derived from (team, channel, ts), so Slack's retries
  and an `app_mention` plus `message` pair are one message. A local TTL set drops
  repeats early; the core's de-duplication by event id is the durable guard (a message
  sent again after a crash is answered once). A retry is never dropped by its header
  alone: if the first delivery was never acknowledged, the retry is the message.
- The `ore_regenerate` message shortcut on a question or an answer in a thread the bot
  is part of is one core regenerate of that question (module `shortcut`): a sibling
  answer in the same Slack thread, no second user message. It is kept in the inbox
  like an event, so a crash after Slack's acknowledgement loses it not.
- An edit is one core edit (`on_edit`): the core answers an edit of the latest message
  again and records an older one's in place on a linked thread (docs/bridging.md);
  a delete is a core delete (its copies elsewhere go too), after an interrupt when
  the message's answer is being written. Each message carries the sender's display
  name (`users.info`, cached): the label other endpoints show.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError, Throttled
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.ids import (
    THREAD_KEY,
    SlackThread,
    edit_event_id,
    event_id,
    traceparent_of,
)
from ore_conduit_slack.inbox import Inbox
from ore_conduit_slack.names import UserNames
from ore_conduit_slack.shortcut import REGENERATE, answer_turn, marked_turn, relayed_turn
from ore_core import (
    ApiError,
    BusError,
    EventContext,
    OreError,
    PermissionDenied,
    UserMessageEvent,
)
from ore_core.conduit import ConduitClient, until_answered

__all__ = ["Identity", "Inbound", "Lanes", "TtlSet"]

log = structlog.get_logger("ore.conduit.slack")

_WRITTEN = frozenset({None, "", "file_share", "thread_broadcast", "bot_message"})
_FOREIGN_TTL = 300.0  # seconds a thread found not to be the bot's is not asked about again
_LINK = re.compile(r"<(https?://[^|>]+)\|[^>]*>")

Job = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Work:
    """What a Slack event asks for: `job`, in the lane of its Slack thread."""

    lane: str
    job: Job
    seen: str  # its key in `Inbound.seen` (forgotten if the event is not kept)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is, from `auth.test` at start."""

    user_id: str
    bot_id: str
    team_id: str


class TtlSet:
    """Keys remembered for `ttl` seconds of the clock `now`."""

    def __init__(self, ttl: float, now: Callable[[], float]) -> None:
        self.ttl = ttl
        self._now = now
        self._expiry: dict[str, float] = {}

    def add(self, key: str) -> bool:
        """Remember `key`; False if it was already remembered (and not expired)."""
        now = self._now()
        if len(self._expiry) > 10_000:
            self._expiry = {k: t for k, t in self._expiry.items() if t > now}
        if self._expiry.get(key, 0.0) > now:
            return False
        self._expiry[key] = now + self.ttl
        return True

    def discard(self, key: str) -> None:
        """Forget `key` (its handling failed: a retry must be handled)."""
        self._expiry.pop(key, None)


def _mapping(value: object) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else an empty one (a payload's optional parts)."""
    return value if isinstance(value, Mapping) else {}


def _passing(error: BaseException) -> bool:
    """Does `error` pass with time, so work may wait and try again? The core or NATS away
    (not a refusal), the core failing (5xx), Slack not answering or throttling."""
    if isinstance(error, BusError):
        return not isinstance(error, PermissionDenied)
    if isinstance(error, ApiError):
        return error.status >= 500
    return isinstance(error, Throttled | Ambiguous)


class Lanes:
    """Jobs run one after another per key, concurrently across keys, in `tasks`."""

    def __init__(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks
        self._queues: dict[str, asyncio.Queue[Job]] = {}

    def submit(self, key: str, job: Job) -> None:
        """Queue `job` behind the jobs of `key`."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue()
            self._tasks.create_task(self._run(key, queue), name=f"slack-lane-{key}")
        queue.put_nowait(job)

    async def _run(self, key: str, queue: asyncio.Queue[Job]) -> None:
        while not queue.empty():
            job = queue.get_nowait()
            try:
                await job()
            except OreError as exc:
                log.error("slack event not handled", lane=key, error=str(exc))
            except Exception:  # a bug handling one event must not stop the others
                log.exception("slack event not handled", lane=key)
        del self._queues[key]


class Inbound:
    """Turns Slack events into ore events; see the module docstring.

    `answering(event_id)` tells whether the answer to a message is being written (True),
    done (False) or not started (None); the outbound side knows. Deletes use it.
    """

    def __init__(
        self,
        *,
        name: str,
        client: ConduitClient,
        api: SlackApi,
        config: SlackConfig,
        identity: Identity,
        lanes: Lanes,
        answering: Callable[[str], bool | None],
        inbox: Inbox,
        ready: asyncio.Event,
    ) -> None:
        self.name = name
        self.client = client
        self.api = api
        self.config = config
        self.identity = identity
        self.lanes = lanes
        self.answering = answering
        self.inbox = inbox
        self.ready = ready  # set once the durable feed exists: no reply can be missed
        self._sent: dict[str, str] = {}  # event id sent this run -> thread id (recent ones)
        self._edits: dict[str, str] = {}  # event id -> the id of its latest edit
        self.names = UserNames(api)
        self.seen = TtlSet(config.dedupe_ttl, api.now)
        self._owned: set[str] = set()  # thread keys known to be the bot's
        self._foreign = TtlSet(_FOREIGN_TTL, api.now)  # thread keys recently found not to be

    async def take(self, body: Mapping[str, Any]) -> None:
        """Take one `event_callback` body before it is acknowledged (see the module
        docstring); InboxError (then Slack sends the event again) if it cannot be kept."""
        work = self._decide(body)
        if work is None:
            return
        try:
            entry = await self.inbox.put(body)
        except BaseException:
            self.seen.discard(work.seen)
            raise
        self._submit(work, entry)

    async def replay(self) -> int:
        """Queue what an earlier run acknowledged and did not finish; how many."""
        pending = await self.inbox.pending()
        for entry, body in pending:
            work = self._decide(body)
            if work is None:
                await self.inbox.done(entry)
            else:
                self._submit(work, entry)
        if pending:
            log.info("slack events taken over from an earlier run", events=len(pending))
        return len(pending)

    def _decide(self, body: Mapping[str, Any]) -> Work | None:
        if body.get("type") == "message_action" and body.get("callback_id") == REGENERATE:
            return self._regenerate(body)
        event = body.get("event")
        if not isinstance(event, Mapping):
            return None
        team = str(body.get("team_id") or event.get("team") or self.identity.team_id)
        enterprise = str(body.get("enterprise_id") or "")
        subtype = event.get("subtype")
        if subtype == "message_changed":
            return self._edited(event, enterprise, team)
        if subtype == "message_deleted":
            self._deleted(event, enterprise, team)  # best effort: nothing to keep
        elif subtype in _WRITTEN and event.get("type") in ("message", "app_mention"):
            return self._message(event, enterprise, team)
        return None

    def _submit(self, work: Work, entry: int) -> None:
        async def run() -> None:
            await self.ready.wait()
            try:  # the core, NATS or Slack away: the event waits
                await until_answered(work.job, "a slack event waits", passing=_passing)
            except Exception:
                await self.inbox.done(entry)  # refused for good (the lane tells)
                raise
            await self.inbox.done(entry)

        self.lanes.submit(work.lane, run)

    def _from_bot(self, message: Mapping[str, Any]) -> bool:
        """The bot itself, or another bot that is not allow-listed."""
        if message.get("user") == self.identity.user_id:
            return True
        bot = message.get("bot_id")
        if bot == self.identity.bot_id:
            return True
        return bool(bot) and bot not in self.config.allow_bots

    def _addressed(self, event: Mapping[str, Any]) -> bool | None:
        """True: answer; False: ignore; None: answer if the thread is the bot's."""
        text = str(event.get("text") or "")
        if event.get("type") == "app_mention" or f"<@{self.identity.user_id}>" in text:
            return True
        if event.get("channel_type") == "im":
            return True
        if event.get("thread_ts") and self.config.reply_in_owned_threads:
            return None
        return False

    def _message(self, event: Mapping[str, Any], enterprise: str, team: str) -> Work | None:
        if self._from_bot(event):
            return None
        addressed = self._addressed(event)
        if addressed is False:
            return None
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        thread = SlackThread(enterprise, team, channel, str(event.get("thread_ts") or ts))
        message_id = event_id(enterprise, team, channel, ts)
        if not channel or not ts or not self.seen.add(message_id):
            return None
        text = self.clean(str(event.get("text") or ""))
        if not text:
            self.seen.discard(message_id)
            return None
        user = str(event.get("user") or event.get("bot_id") or "")

        async def forward() -> None:
            if addressed is None and not await self._owns(thread):
                return
            thread_id = await self._thread_id(thread)
            context = await self._context(message_id, team, user)
            await self.client.send(
                thread_id, UserMessageEvent(id=message_id, content=text, context=context)
            )
            self._remember(message_id, thread_id)

        return Work(thread.key, forward, message_id)

    def clean(self, text: str) -> str:
        """The text without the bot's mention, links shown as their URL."""
        text = text.replace(f"<@{self.identity.user_id}>", "")
        return _LINK.sub(r"\1", text).strip()

    async def _context(self, message_id: str, team: str, user: str) -> EventContext:
        """Who wrote: the user id and display name (the label other endpoints show)."""
        return EventContext(
            provenance=self.name,
            user=user,
            user_name=await self.names.name(team, user),
            traceparent=traceparent_of(message_id),
        )

    async def _thread_id(self, thread: SlackThread) -> str:
        """The ore thread of a Slack thread (BusError while the core is away: the work
        is tried again)."""
        thread_id, _ = await self.client.lookup_or_create(THREAD_KEY, thread.key, thread.metadata())
        self._owned.add(thread.key)
        return thread_id

    async def _owns(self, thread: SlackThread) -> bool:
        """Is the bot part of the Slack thread? (It wrote in it, or was mentioned in it.)"""
        if thread.key in self._owned:
            return True
        if not self._foreign.add(thread.key):
            return False  # asked recently (a mention since would have made it the bot's)
        try:
            replies = await self.api.call(
                "conversations.replies",
                thread.team,
                channel=thread.channel,
                ts=thread.thread_ts,
                limit=200,
            )
        except (SlackError, Ambiguous) as exc:
            self._foreign.discard(thread.key)
            if _passing(exc):
                raise  # Slack unreachable or throttling: the message waits, asked again
            log.warning("cannot read a thread", channel=thread.channel, error=str(exc))
            return False
        mention = f"<@{self.identity.user_id}>"
        for message in replies.get("messages") or []:
            if message.get("user") == self.identity.user_id or (
                message.get("bot_id") == self.identity.bot_id
                or mention in str(message.get("text") or "")
            ):
                self._owned.add(thread.key)
                return True
        return False  # remembered in _foreign for a while

    # -- the regenerate shortcut ----------------------------------------------------

    def _regenerate(self, body: Mapping[str, Any]) -> Work | None:
        message, channel = body.get("message"), body.get("channel")
        if not isinstance(message, Mapping) or not isinstance(channel, Mapping):
            return None
        team_of, enterprise_of = _mapping(body.get("team")), _mapping(body.get("enterprise"))
        team = str(team_of.get("id") or self.identity.team_id)
        enterprise = str(enterprise_of.get("id") or team_of.get("enterprise_id") or "")
        channel_id, ts = str(channel.get("id") or ""), str(message.get("ts") or "")
        thread = SlackThread(enterprise, team, channel_id, str(message.get("thread_ts") or ts))
        asked_on = event_id(enterprise, team, channel_id, ts)
        action_id = f"{asked_on}:regenerate:{body.get('action_ts') or body.get('trigger_id')}"
        if not channel_id or not ts or not self.seen.add(action_id):
            return None
        user = str(_mapping(body.get("user")).get("id") or "")

        async def regenerate() -> None:
            if not await self._owns(thread):
                log.info("regenerate shortcut outside the bot's threads", channel=channel_id)
                return
            thread_id = await self._thread_id(thread)
            turn = await self._turn_of(thread, thread_id, message, asked_on)
            if turn is None:
                log.info("regenerate shortcut on a message ore has no turn for", ts=ts)
                return
            context = await self._context(action_id, team, user)
            await self.client.regenerate(thread_id, turn, id=action_id, context=context)

        return Work(thread.key, regenerate, action_id)

    async def _turn_of(
        self, thread: SlackThread, thread_id: str, message: Mapping[str, Any], asked_on: str
    ) -> str | None:
        """The turn a message stands for (module `shortcut`): a person's message its own,
        the bot's answer its answer turn, a relayed copy the turn it copies."""
        own = message.get("user") == self.identity.user_id or (
            bool(message.get("bot_id")) and message.get("bot_id") == self.identity.bot_id
        )
        if not own:
            return asked_on
        kind, ref = marked_turn(message)
        if not kind:
            kind, ref = marked_turn(await self._read_back(thread, str(message.get("ts"))))
        if kind == "answer":
            return await answer_turn(self.client, thread_id, ref)
        if kind == "relay":
            return await relayed_turn(self.client, thread_id, ref)
        return None

    async def _read_back(self, thread: SlackThread, ts: str) -> Mapping[str, Any]:
        """The bot's message `ts` as the thread lists it, with its metadata ({}: gone)."""
        replies = await self.api.call(
            "conversations.replies",
            thread.team,
            channel=thread.channel,
            ts=thread.thread_ts,
            include_all_metadata=True,
            limit=1000,
        )
        listed = replies.get("messages") or []
        return next((m for m in listed if m.get("ts") == ts), {})

    # -- edits and deletes ---------------------------------------------------------

    def _edited(self, event: Mapping[str, Any], enterprise: str, team: str) -> Work | None:
        message = event.get("message")
        previous = event.get("previous_message")
        if not isinstance(message, Mapping) or self._from_bot(message):
            return None  # the bot's own stream and edits come back as message_changed
        if self.config.on_edit == "ignore":
            return None
        text = self.clean(str(message.get("text") or ""))
        if isinstance(previous, Mapping) and self.clean(str(previous.get("text") or "")) == text:
            return None  # an unfurl or a reaction, not a new text
        edited = message.get("edited")
        if not text or not isinstance(edited, Mapping):
            return None
        channel, ts = str(event.get("channel", "")), str(message.get("ts", ""))
        thread = SlackThread(enterprise, team, channel, str(message.get("thread_ts") or ts))
        original = event_id(enterprise, team, channel, ts)
        edit_id = edit_event_id(original, str(edited.get("ts", "")))
        if not self.seen.add(edit_id):
            return None
        user = str(message.get("user") or "")

        async def edit() -> None:
            """One core edit: the core decides whether it is answered again (the
            latest message) or recorded in place, and tells the other endpoints."""
            if not await self._owns(thread):
                return
            thread_id = await self._thread_id(thread)
            if not await self._recorded(thread_id, original):
                log.info("edit of a message ore never took", thread_id=thread_id)
                return
            context = await self._context(edit_id, team, user)
            await self.client.edit(thread_id, original, text, id=edit_id, context=context)
            self._remember(edit_id, thread_id)
            self._edits[original] = edit_id

        return Work(thread.key, edit, edit_id)

    def _remember(self, message_id: str, thread_id: str) -> None:
        if len(self._sent) >= 10_000:
            del self._sent[next(iter(self._sent))]
        self._sent[message_id] = thread_id

    async def _recorded(self, thread_id: str, message_id: str) -> bool:
        """Whether the thread holds the message (edited or not): what ore never took is
        neither edited nor deleted there."""
        edits = f"{message_id}:edit:"
        return any(
            turn.event_id == message_id or turn.event_id.startswith(edits)
            for turn in await self.client.turns(thread_id)
        )

    def _deleted(self, event: Mapping[str, Any], enterprise: str, team: str) -> None:
        """A user deleted a message: its running answer (if any) is stopped, and the
        core deletes it (a tombstone) and every copy of it on the other endpoints."""
        previous = event.get("previous_message")
        if not isinstance(previous, Mapping) or self._from_bot(previous):
            return
        channel, ts = str(event.get("channel", "")), str(event.get("deleted_ts", ""))
        thread = SlackThread(enterprise, team, channel, str(previous.get("thread_ts") or ts))
        message_id = event_id(enterprise, team, channel, ts)
        latest = self._edits.get(message_id, message_id)
        # Sent by this run and not known to be answered: its answer may be being written.
        running = latest in self._sent and self.answering(latest) is not False

        async def delete() -> None:
            if not await self._owns(thread):
                return
            thread_id = await self._thread_id(thread)
            if not await self._recorded(thread_id, message_id):
                return
            if running:
                await self.client.interrupt(thread_id)
            await self.client.delete(thread_id, message_id, id=f"{message_id}:deleted")

        self.lanes.submit(thread.key, delete)
