"""SlackPlatform: a Slack thread as the engine sees it (`ore_core.conduit.Platform`).

A conversation is a Slack thread, keyed `ENTERPRISE:TEAM:CHANNEL:THREAD_TS`
(`SlackThread.key`). `connect` learns who the bot is (`auth.test`), opens the inbox and
serves Slack's events (`bolt`): each one the conduit takes is kept in the inbox before
Slack is acknowledged, and leaves it when the engine confirms it (`Inbound.done`: the
core has it), so a crash or a core away for minutes loses nothing; what an earlier run
left in the inbox comes first, in order. The engine's relayed copies are posted here with
`chat.postMessage`, edited with `chat.update` and deleted with `chat.delete`, every
failure classified once by `SlackApi.once`. Slack takes no idempotency key, so each copy
carries it in message metadata `ore_relay` (`{"key"}`) and the adapter finds what a key
posted (`ReadsBack`): in the thread as listed once per run, or as recorded since. A
post whose response was lost is looked for before it is reported transient, so the
engine's retry never posts it twice.

A reaction event names only the reacted message's `ts`: `take` looks up its thread
(`conversations.replies`, remembered) and writes it into the body before the body is
kept, so the inbox's events need no call to be read again. The bot's own reaction, for
a reaction made elsewhere, is `reactions.add` / `reactions.remove` (`react`), Slack's
`already_reacted` and `no_reaction` being what was asked for.

A copy with files (`Part.attachments`) is its text, posted under the key `KEY:files`
first, then each file uploaded into the thread (`files.SlackFiles`), then the text's
metadata changed to the key itself: read back after a kill, a text still marked
`:files` is not posted again but its files are (a file uploaded just before the kill
may show twice; none is lost), and a copy under its own key is done.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack.answer import RELAY_EVENT, relay_key
from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_conduit_slack.bolt import bolt_app, serve
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.files import SLACK_FILE_LIMIT, SlackFiles
from ore_conduit_slack.ids import SlackThread, message_of
from ore_conduit_slack.inbound import Decoder, Identity
from ore_conduit_slack.inbox import Inbox
from ore_conduit_slack.names import UserNames
from ore_conduit_slack.reactions import REACTION_EVENTS, THREAD_OF_ITEM, name_of
from ore_conduit_slack.text import neutralise
from ore_core.conduit import Capabilities, Edit, Inbound, Part
from ore_core.conduit.engine import PlatformContext

if TYPE_CHECKING:
    from ore_conduit_slack.outbound import Rendering

__all__ = ["SlackPlatform"]

log = structlog.get_logger("ore.conduit.slack")

_REMEMBERED = 10_000  # event ids remembered as sent by this run
_GONE = frozenset({"message_not_found"})  # chat.delete of what is deleted already
_AS_ASKED = frozenset({"already_reacted", "no_reaction"})  # a reaction as it should be
_THREADS_REMEMBERED = 10_000  # (channel, ts) -> thread_ts of reacted messages


class SlackPlatform:
    """Slack's Web API in the engine's words (see the module docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        max_message_length=11_000,
        markup="markdown",
        edits_arrive=True,
        deletes_arrive=True,
        reactions=True,
        idempotency="read_back",
        file_max_bytes=SLACK_FILE_LIMIT,
    )

    def __init__(
        self,
        config: SlackConfig,
        context: PlatformContext | None = None,
        ready: Callable[[str], None] | None = None,
    ) -> None:
        """`context`: the engine's (None only for a platform driven by hand, which
        moves no files)."""
        self.config = config
        self._ready = ready
        token = config.secret("bot_token")
        client = AsyncWebClient(token=token, base_url=config.api_url, retry_handlers=[])
        self.api = SlackApi(client)
        self.files = SlackFiles(self.api, context, token)
        self.names = UserNames(self.api)
        self.identity = Identity("", "", "")
        self.decoder = Decoder(self.api, config, self.identity)
        self.rendering: Rendering | None = None  # the conduit's answers (its lanes')
        self.inbox: Inbox | None = None
        self._taken: asyncio.Queue[Inbound | None] = asyncio.Queue()
        self._serving: asyncio.Task[None] | None = None
        self._posted: dict[str, dict[str, str]] = {}  # conversation -> key -> ts
        self._sent: OrderedDict[str, None] = OrderedDict()  # event ids sent by this run
        self._edits: dict[str, str] = {}  # event id -> the id of its latest edit
        self._threads: OrderedDict[tuple[str, str], str] = OrderedDict()  # of reacted ones

    async def connect(self) -> None:
        me = await self.api.call("auth.test")
        self.identity = Identity(
            str(me["user_id"]), str(me.get("bot_id") or ""), str(me["team_id"])
        )
        self.decoder = Decoder(self.api, self.config, self.identity)
        self.inbox = inbox = await Inbox.open(
            self.config.state_dir / f"inbox-{self.config.durable}.db"
        )
        pending = await inbox.pending()
        for entry, body in pending:  # before new events: a thread's messages stay in order
            inbound = self.decoder.decode(body)
            if inbound is None:
                await inbox.done(entry)
            else:
                self._taken.put_nowait(replace(inbound, done=partial(inbox.done, entry)))
        if pending:
            log.info("slack events taken over from an earlier run", events=len(pending))
        app = bolt_app(
            self.api.client,
            self.take,
            self.config.secret("signing_secret") if self.config.mode == "http" else "",
            self.config.mode,
        )
        self._serving = asyncio.create_task(serve(app, self.config, self._ready), name="slack-in")
        self._serving.add_done_callback(lambda _: self._taken.put_nowait(None))

    async def close(self) -> None:
        if self._serving is not None:
            self._serving.cancel()
            await asyncio.wait([self._serving])
        if self.inbox is not None:
            await self.inbox.close()
        await self.files.close()

    async def events(self) -> AsyncIterator[Inbound]:
        while (inbound := await self._taken.get()) is not None:
            yield inbound
        assert self._serving is not None
        await self._serving  # it ended: its error, if any, is the conduit's

    async def take(self, body: dict[str, Any]) -> None:
        """Bolt's listener, before Slack is acknowledged: the event it stands for is kept
        in the inbox and queued (InboxError, and Slack sends it again, if it cannot be)."""
        await self._with_thread(body)
        inbound = self.decoder.decode(body)
        if inbound is None:
            return
        assert self.inbox is not None
        try:
            entry = await self.inbox.put(body)
        except BaseException:
            self.decoder.seen.discard(inbound.platform_id)
            raise
        self._taken.put_nowait(replace(inbound, done=partial(self.inbox.done, entry)))

    async def _with_thread(self, body: dict[str, Any]) -> None:
        """A reaction's body gets the `thread_ts` of its message (module docstring); a
        Slack away is raised, and Slack sends the event again."""
        event = body.get("event")
        if not isinstance(event, dict) or event.get("type") not in REACTION_EVENTS:
            return
        item = event.get("item")
        if not isinstance(item, dict) or not item.get("channel") or not item.get("ts"):
            return
        where = (str(item["channel"]), str(item["ts"]))
        thread_ts = self._threads.get(where)
        if thread_ts is None:
            team = str(body.get("team_id") or self.identity.team_id)
            try:
                replies = await self.api.call(
                    "conversations.replies", team, channel=where[0], ts=where[1], limit=1
                )
            except SlackError as exc:  # gone, or a channel the bot cannot read: no thread
                log.info("reacted message not found", channel=where[0], error=exc.error)
                replies = {}
            listed = replies.get("messages") or [{}]
            thread_ts = str(listed[0].get("thread_ts") or where[1])
            self._threads[where] = thread_ts
            if len(self._threads) > _THREADS_REMEMBERED:
                self._threads.popitem(last=False)
        body[THREAD_OF_ITEM] = thread_ts

    def forwarded(self, inbound: Inbound) -> None:
        """The core has `inbound`: a delete of its message may have an answer to stop."""
        self._sent[inbound.platform_id] = None
        if len(self._sent) > _REMEMBERED:
            self._sent.popitem(last=False)
        if isinstance(inbound, Edit):
            self._edits[inbound.target] = inbound.platform_id

    def running(self, message_id: str) -> bool:
        """May the answer to `message_id` (or to its latest edit) be being written? It
        was sent by this run and its answer is not known to be done."""
        latest = self._edits.get(message_id, message_id)
        answering = None if self.rendering is None else self.rendering.answering(latest)
        return latest in self._sent and answering is not False

    async def post(self, conversation: str, part: Part, key: str) -> str:
        if not part.attachments:
            return await self._post(conversation, part, key)
        thread = SlackThread.parse(conversation)
        pending = f"{key}:files"
        ts = await self.find(conversation, pending) or await self._post(conversation, part, pending)
        for attachment in part.attachments:
            await self.files.post(thread, conversation, attachment)
        await self.api.once(
            "chat.update",
            thread.team,
            channel=thread.channel,
            ts=ts,
            markdown_text=neutralise(part.text),
            metadata={"event_type": RELAY_EVENT, "event_payload": {"key": key}},
        )
        (await self._listed(conversation))[key] = ts
        return ts

    async def say(self, conversation: str, text: str) -> None:
        """A plain notice of the conduit's own in the Slack thread."""
        thread = SlackThread.parse(conversation)
        await self.api.once(
            "chat.postMessage",
            thread.team,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            text=text,
        )

    async def _post(self, conversation: str, part: Part, key: str) -> str:
        """`chat.postMessage` of the part's text with `key` in its metadata."""
        thread = SlackThread.parse(conversation)
        metadata = {"event_type": RELAY_EVENT, "event_payload": {"key": key}}
        try:
            reply = await self.api.once(
                "chat.postMessage",
                thread.team,
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                markdown_text=neutralise(part.text),
                metadata=metadata,
            )
        except Ambiguous:
            self._posted.pop(conversation, None)  # listed again: it may be there now
            if (found := await self.find(conversation, key)) is not None:
                return found
            raise
        ts = str(reply["ts"])
        (await self._listed(conversation))[key] = ts
        return ts

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        thread = SlackThread.parse(conversation)
        await self.api.once(
            "chat.update",
            thread.team,
            channel=thread.channel,
            ts=platform_id,
            markdown_text=neutralise(part.text),
        )

    async def delete(self, conversation: str, platform_id: str) -> None:
        thread = SlackThread.parse(conversation)
        try:
            await self.api.once("chat.delete", thread.team, channel=thread.channel, ts=platform_id)
        except SlackError as exc:
            if exc.error not in _GONE:
                raise

    async def react(self, conversation: str, platform_id: str, emoji: str, add: bool) -> None:
        """The bot's own `emoji` on a message: `platform_id` is a copy's `ts` or the
        event id of a person's message."""
        thread = SlackThread.parse(conversation)
        found = message_of(platform_id)
        ts = found[1] if found is not None else platform_id
        method = "reactions.add" if add else "reactions.remove"
        try:
            await self.api.once(
                method, thread.team, channel=thread.channel, timestamp=ts, name=name_of(emoji)
            )
        except SlackError as exc:
            if exc.error not in _AS_ASKED:
                raise

    async def find(self, conversation: str, key: str) -> str | None:
        """The ts of the copy `key` posted (by this run, or by one killed before it
        reported it), None if the thread has none."""
        return (await self._listed(conversation)).get(key)

    async def _listed(self, conversation: str) -> dict[str, str]:
        """key -> ts of the thread's relayed copies, listed once per run."""
        known = self._posted.get(conversation)
        if known is None:
            thread = SlackThread.parse(conversation)
            replies = await self.api.once(
                "conversations.replies",
                thread.team,
                channel=thread.channel,
                ts=thread.thread_ts,
                include_all_metadata=True,
                limit=1000,
            )
            listed = replies.get("messages") or []
            known = {relay_key(m): str(m["ts"]) for m in listed if relay_key(m)}
            self._posted[conversation] = known
        return known
