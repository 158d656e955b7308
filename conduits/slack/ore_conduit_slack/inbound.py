"""Inbound: Slack's events in ore's words (`Message`, `Edit`, `Delete`, `Reaction`,
`Regenerate`).

`Decoder.decode(body)` reads one `event_callback` (or message shortcut) body; the engine
does the rest (one lane per Slack thread, the core's acknowledgement before the
event leaves the inbox).

- Answered: `app_mention`, direct messages (a `Mention`: its thread becomes the bot's),
  and replies in a thread the bot is part of (`reply_in_owned_threads`: `owns` asks
  Slack once). The bot's mention is stripped.
- Ignored: the bot's own messages and edits, other bots (unless `allow_bots`), and
  subtypes that are not a person writing (joins, topic changes, ...).
- Effectively once: the event id is derived from (team, channel, ts), so Slack's retries
  and an `app_mention` plus `message` pair are one message. A local TTL set drops
  repeats early; the core's de-duplication by event id is the durable guard. A retry
  is never dropped by its header alone: if the first delivery was never acknowledged,
  the retry is the message.
- The `ore_regenerate` message shortcut on a question or an answer in a thread the bot
  is part of is one core regenerate of that question (module `shortcut`).
- A message's shared files (`file_share`) ride on it as Slack describes them
  (`SlackMessage.files`): the conduit fetches them into ore before it forwards the
  message (`files.SlackFiles`), so a message of files alone is taken too.
- An edit is one core edit (`on_edit`: or ignored); a delete is a core delete (its
  copies elsewhere go too). Each message carries the sender's display name
  (`users.info`, cached in `names`): the label other endpoints show.
- A user's `reaction_added` / `reaction_removed` on a message of a thread the bot is
  part of is a `Reaction` (its emoji: `reactions.emoji_of`) on that message: a
  person's message named by its event id, one of the bot's (an answer, a copy) by its
  `ts`, for the conduit to find its turn. The bot's own reactions (the engine showing
  a reaction made elsewhere, a delivery status) are never one. The event names only
  the message's `ts`: its thread is looked up before the event is kept
  (`reactions.THREAD_OF_ITEM`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from ore_conduit_slack.api import SlackApi, SlackError
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.ids import SlackThread, edit_event_id, event_id
from ore_conduit_slack.reactions import REACTION_EVENTS, THREAD_OF_ITEM, emoji_of
from ore_conduit_slack.shortcut import REGENERATE
from ore_core.conduit import Delete, Edit, Inbound, Message, Reaction, Sender

__all__ = ["Decoder", "Identity", "Mention", "Regenerate", "SlackMessage", "TtlSet"]

log = structlog.get_logger("ore.conduit.slack")

_WRITTEN = frozenset({None, "", "file_share", "thread_broadcast", "bot_message"})
_FOREIGN_TTL = 300.0  # seconds a thread found not to be the bot's is not asked about again
_LINK = re.compile(r"<(https?://[^|>]+)\|[^>]*>")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is, from `auth.test` at start."""

    user_id: str
    bot_id: str
    team_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SlackMessage(Message):
    """A message, with Slack's objects of the files shared on it (fetched into ore
    before it is forwarded)."""

    files: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Mention(SlackMessage):
    """A message addressed to the bot (a mention, a direct message): always answered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Regenerate(Inbound):
    """The `ore_regenerate` shortcut on `message` (its event id `asked_on`)."""

    sender: Sender
    message: Mapping[str, Any]
    asked_on: str


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


class Decoder:
    """Slack's event bodies as the engine's events (see the module docstring)."""

    def __init__(self, api: SlackApi, config: SlackConfig, identity: Identity) -> None:
        self.api = api
        self.config = config
        self.identity = identity
        self.seen = TtlSet(config.dedupe_ttl, api.now)
        self._owned: set[str] = set()  # thread keys known to be the bot's
        self._foreign = TtlSet(_FOREIGN_TTL, api.now)  # thread keys recently found not to be

    def decode(self, body: Mapping[str, Any]) -> Inbound | None:
        """The event `body` stands for (None: nothing to do; a repeat is nothing)."""
        if body.get("type") == "message_action" and body.get("callback_id") == REGENERATE:
            return self._regenerate(body)
        event = body.get("event")
        if not isinstance(event, Mapping):
            return None
        team = str(body.get("team_id") or event.get("team") or self.identity.team_id)
        enterprise = str(body.get("enterprise_id") or "")
        if event.get("type") in REACTION_EVENTS:
            return self._reaction(body, event, enterprise, team)
        subtype = event.get("subtype")
        if subtype == "message_changed":
            return self._edited(event, enterprise, team)
        if subtype == "message_deleted":
            return self._deleted(event, enterprise, team)
        if subtype in _WRITTEN and event.get("type") in ("message", "app_mention"):
            return self._message(event, enterprise, team)
        return None

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

    def _message(self, event: Mapping[str, Any], enterprise: str, team: str) -> Inbound | None:
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
        raw_files = event.get("files")
        files = (
            tuple(f for f in raw_files if isinstance(f, Mapping))
            if isinstance(raw_files, list)
            else ()
        )
        if not text and not files:
            self.seen.discard(message_id)
            return None
        kind = Mention if addressed else SlackMessage
        sender = Sender("", id=str(event.get("user") or event.get("bot_id") or ""))
        return kind(
            conversation=thread.key, platform_id=message_id, sender=sender, text=text, files=files
        )

    def clean(self, text: str) -> str:
        """The text without the bot's mention, links shown as their URL."""
        text = text.replace(f"<@{self.identity.user_id}>", "")
        return _LINK.sub(r"\1", text).strip()

    async def owns(self, inbound: Inbound) -> bool:
        """Is the bot part of the event's Slack thread? (It wrote in it, or was mentioned
        in it.) Slack away or throttling is raised, for the engine to wait out."""
        thread = SlackThread.parse(inbound.conversation)
        if isinstance(inbound, Mention) or thread.key in self._owned:
            self._owned.add(thread.key)
            return True
        if not self._foreign.add(thread.key):
            return False  # asked recently (a mention since would have made it the bot's)
        try:
            replies = await self.api.once(
                "conversations.replies",
                thread.team,
                channel=thread.channel,
                ts=thread.thread_ts,
                limit=200,
            )
        except SlackError as exc:
            log.warning("cannot read a thread", channel=thread.channel, error=str(exc))
            return False
        except BaseException:
            self._foreign.discard(thread.key)  # asked again when it is tried again
            raise
        mention = f"<@{self.identity.user_id}>"
        for message in replies.get("messages") or []:
            if message.get("user") == self.identity.user_id or (
                message.get("bot_id") == self.identity.bot_id
                or mention in str(message.get("text") or "")
            ):
                self._owned.add(thread.key)
                return True
        return False  # remembered in _foreign for a while

    def _regenerate(self, body: Mapping[str, Any]) -> Inbound | None:
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
        return Regenerate(
            conversation=thread.key,
            platform_id=action_id,
            sender=Sender("", id=user),
            message=message,
            asked_on=asked_on,
        )

    def _reaction(
        self, body: Mapping[str, Any], event: Mapping[str, Any], enterprise: str, team: str
    ) -> Inbound | None:
        item, user = _mapping(event.get("item")), str(event.get("user") or "")
        name = str(event.get("reaction") or "")
        channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
        if item.get("type") != "message" or not (channel and ts and name and user):
            return None
        if user == self.identity.user_id:
            return None  # the bot's own: what it shows for others
        removed = event.get("type") == "reaction_removed"
        message_id = event_id(enterprise, team, channel, ts)
        change = f"{'-' if removed else '+'}{body.get('event_id') or event.get('event_ts')}"
        reaction_id = f"{message_id}:reaction:{user}:{name}:{change}"
        if not self.seen.add(reaction_id):
            return None
        thread = SlackThread(enterprise, team, channel, str(body.get(THREAD_OF_ITEM) or ts))
        own = event.get("item_user") == self.identity.user_id
        return Reaction(
            conversation=thread.key,
            platform_id=reaction_id,
            sender=Sender("", id=user),
            target=ts if own else message_id,
            emoji=emoji_of(name),
            removed=removed,
        )

    def _edited(self, event: Mapping[str, Any], enterprise: str, team: str) -> Inbound | None:
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
        sender = Sender("", id=str(message.get("user") or ""))
        return Edit(
            conversation=thread.key,
            platform_id=edit_id,
            sender=sender,
            target=original,
            text=text,
        )

    def _deleted(self, event: Mapping[str, Any], enterprise: str, team: str) -> Inbound | None:
        previous = event.get("previous_message")
        if not isinstance(previous, Mapping) or self._from_bot(previous):
            return None
        channel, ts = str(event.get("channel", "")), str(event.get("deleted_ts", ""))
        thread = SlackThread(enterprise, team, channel, str(previous.get("thread_ts") or ts))
        message_id = event_id(enterprise, team, channel, ts)
        if not self.seen.add(f"{message_id}:deleted"):
            return None
        return Delete(
            conversation=thread.key, platform_id=f"{message_id}:deleted", target=message_id
        )
