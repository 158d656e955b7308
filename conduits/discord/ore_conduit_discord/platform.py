"""DiscordPlatform: the adapter of the conduit shape (`ore_core.conduit.Platform`).

A conversation is a Discord channel: a text channel, a thread (Discord's threads are
channels too) or a DM, keyed `GUILD:CHANNEL` (`@me:CHANNEL` for a DM). A message in a
channel continues that channel's ore thread, and a Discord thread opened from a message
is a conversation of its own. A user's reaction (MESSAGE_REACTION_ADD/REMOVE) is a
`Reaction`; the bot's own (what `react` makes for a reaction elsewhere) is not. Everything else
(order, acknowledgement, streaming, copies, retries) is the engine's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, ClassVar

import aiohttp

from ore_conduit_discord.config import DiscordConfig, Webhook
from ore_conduit_discord.gateway import Dispatch, Gateway, Session, intents
from ore_conduit_discord.rest import DiscordRest, Files
from ore_core.conduit import (
    Capabilities,
    Command,
    Delete,
    Edit,
    Inbound,
    Message,
    Part,
    PlatformError,
    Reaction,
    Sender,
    part_key,
)
from ore_core.conduit.engine import PlatformContext
from ore_core.conduit.media import DownloadFailed, Remote, fetch_files, take_files
from ore_core.files import guess_media_type

log = logging.getLogger(__name__)

__all__ = ["DM", "DiscordPlatform", "conversation_of", "split_conversation"]

DM = "@me"
_SHOWN = {0, 19}  # a message, a reply (not joins, pins, thread notices)
_AVATARS = "https://cdn.discordapp.com/avatars"
_SIGNS = {"error": "⚠️ ", "notice": "-# "}  # a notice as Discord's small grey subtext
LIMIT = 2000
FILE_LIMIT = 10 * 1024**2
"""Bytes a bot may upload to a message where the server has no boost (Discord's
documented default, all files of the message together)."""


def conversation_of(guild: str | None, channel: str) -> str:
    return f"{guild or DM}:{channel}"


def split_conversation(conversation: str) -> tuple[str, str]:
    guild, _, channel = conversation.rpartition(":")
    return guild, channel


def sender_of(author: dict[str, Any], member: dict[str, Any] | None) -> Sender:
    """The name a guild shows (nickname, else display name, else user name), the avatar."""
    name = (member or {}).get("nick") or author.get("global_name") or author["username"]
    avatar = f"{_AVATARS}/{author['id']}/{author['avatar']}.png" if author.get("avatar") else ""
    return Sender(name=name, id=str(author["id"]), avatar=avatar)


def unlabelled(part: Part) -> str:
    """A relayed copy's text without the `label: ` the engine starts it with (the
    webhook shows the label as the author, or `shown` sets it in bold)."""
    label = f"{part.sender.name}: " if part.sender is not None else ""
    return part.text.removeprefix(label) if label else part.text


def shown(part: Part) -> str:
    """The text the bot posts for `part`: a relayed copy without a webhook starts with
    its sender's label in bold, an error or a notice with its sign. The engine split the
    text at 2,000 characters; where the sign would push a part over, it goes without."""
    if part.sender is not None:
        text = f"**{part.sender.name}:** {unlabelled(part)}"
    else:
        text = f"{_SIGNS.get(part.kind, '')}{part.text}"
    return text if len(text) <= LIMIT else part.text


class DiscordPlatform:
    """Discord's gateway and REST API in the engine's words."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        max_message_length=LIMIT,
        markup="markdown",
        edits_arrive=True,
        deletes_arrive=True,
        reactions=True,
        idempotency="key",
        file_max_bytes=FILE_LIMIT,
    )

    def __init__(self, config: DiscordConfig, context: PlatformContext | None = None) -> None:
        self.config = config
        self.context = context  # for files: uploads in, fetches out (None: text only)
        self.rest = DiscordRest(config.api_url, config.bot_token())
        self.session = Session(config.state_dir / f"session-{config.durable}.json")
        self.gateway: Gateway | None = None
        self.me = ""
        self._http: aiohttp.ClientSession | None = None
        self._parents: dict[str, str] = {}  # thread -> the channel it is in
        self._hooks = {str(Webhook(url).id) for url in config.webhooks.values()}
        self._deleting: set[str] = set()
        self._names: dict[str, str] = {}  # user id -> name, for a removal (which has none)

    async def connect(self) -> None:
        """Log in (MissingToken for a refused token), register the slash commands and
        open the gateway (its first event then arrives through `events`)."""
        try:
            me = await self.rest.start()
            self.me = str(me["id"])
            await self.rest.register_commands(self.me)  # a bot's application id is its user id
            url = await self.rest.gateway_url()
        except BaseException:
            await self.rest.close()  # the engine closes only what connected
            raise
        self._http = aiohttp.ClientSession()
        self.gateway = Gateway(
            self._http,
            url,
            self.config.bot_token(),
            intents(self.config.message_content),
            self.session,
            self.config.identify_delay,
        )

    async def close(self) -> None:
        if self.gateway is not None:
            await self.gateway.close()
        if self._http is not None:
            await self._http.close()
        await self.rest.close()

    async def events(self) -> AsyncIterator[Inbound]:
        assert self.gateway is not None, "connect() first"
        async for dispatch in self.gateway.dispatches():
            event = self._inbound(dispatch)
            if event is None:
                self.session.acknowledge(dispatch.seq)
            elif isinstance(event, Message) and dispatch.data.get("attachments"):
                yield await self._with_files(event, dispatch.data["attachments"])
            else:
                yield event

    async def _with_files(self, message: Message, described: list[dict[str, Any]]) -> Message:
        """`message` with its files taken into ore; a notice in the channel for each one
        that could not be (the message goes on without it)."""
        if self.context is None:
            return message
        remotes = [
            Remote(
                str(a.get("filename") or "file"),
                str(a.get("content_type") or guess_media_type(str(a.get("filename", "")))),
                a.get("size"),
                functools.partial(self._download, str(a["url"])),
            )
            for a in described
        ]
        attachments, notices = await take_files(self.context.client, remotes)
        for index, line in enumerate(notices):
            notice = Part(line, reply_to=message.platform_id, kind="notice", severity="warn")
            key = part_key(f"{message.platform_id}.files", index)
            try:
                await self.post(message.conversation, notice, key)
            except PlatformError as exc:
                log.warning("discord: could not post a file notice: %s", exc)
        return replace(message, attachments=attachments)

    async def _download(self, url: str) -> bytes:
        assert self._http is not None
        try:
            async with self._http.get(url) as answer:
                if answer.status != 200:
                    raise DownloadFailed(f"{url}: Discord answered {answer.status}")
                return await answer.read()
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise DownloadFailed(f"the download failed ({exc or type(exc).__name__})") from exc

    # ---------------------------------------------------------------- outbound

    async def post(self, conversation: str, part: Part, key: str) -> str:
        _, channel = split_conversation(conversation)
        files, lines = await self._files(conversation, part)
        if lines:
            part = replace(part, text="\n".join(filter(None, [part.text, *lines])))
        hook = self._hook(channel) if part.sender is not None else None
        if hook is not None:
            unlabelled_part = replace(part, text=unlabelled(part))
            return await self.rest.post_as(hook[0], hook[1], unlabelled_part, files)
        return await self.rest.post(channel, replace(part, text=shown(part)), key, files)

    async def _files(self, conversation: str, part: Part) -> tuple[Files, list[str]]:
        if not part.attachments or self.context is None:
            return [], []
        context = self.context
        return await fetch_files(
            context.client, context.conversations, conversation, part.attachments
        )

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        _, channel = split_conversation(conversation)
        hook = self._hook(channel) if part.sender is not None else None
        if hook is not None:
            await self.rest.edit_as(hook[0], hook[1], platform_id, unlabelled(part))
        else:
            await self.rest.edit(channel, platform_id, shown(part))

    async def delete(self, conversation: str, platform_id: str) -> None:
        _, channel = split_conversation(conversation)
        self._deleting.add(platform_id)
        await self.rest.delete(channel, platform_id)

    async def react(self, conversation: str, platform_id: str, emoji: str, add: bool) -> None:
        _, channel = split_conversation(conversation)
        await self.rest.react(channel, platform_id, emoji, add)

    def _hook(self, channel: str) -> tuple[Webhook, str] | None:
        """The webhook for `channel` (or for the channel a thread is in, with the thread)."""
        hook = self.config.webhook(channel)
        if hook is not None:
            return hook, ""
        parent = self._parents.get(channel)
        hook = self.config.webhook(parent) if parent else None
        return (hook, channel) if hook is not None else None

    # ---------------------------------------------------------------- inbound

    def _inbound(self, dispatch: Dispatch) -> Inbound | None:
        data, done = dispatch.data, functools.partial(self._done, dispatch.seq)
        if dispatch.kind == "GUILD_CREATE":
            for thread in data.get("threads", []):
                self._parents[str(thread["id"])] = str(thread["parent_id"])
        elif dispatch.kind in {"THREAD_CREATE", "THREAD_UPDATE"} and data.get("parent_id"):
            self._parents[str(data["id"])] = str(data["parent_id"])
        elif dispatch.kind == "INTERACTION_CREATE":
            return self._command(dispatch)
        elif dispatch.kind == "MESSAGE_DELETE":
            if data["id"] in self._deleting:  # the echo of the engine's own delete
                self._deleting.discard(data["id"])
                return None
            return Delete(
                conversation=conversation_of(data.get("guild_id"), data["channel_id"]),
                platform_id=f"{data['id']}:deleted",
                target=data["id"],
                done=done,
            )
        elif dispatch.kind in {"MESSAGE_CREATE", "MESSAGE_UPDATE"} and self._from_a_user(data):
            return self._message(dispatch)
        elif dispatch.kind in {"MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE"}:
            return self._reaction(dispatch)
        return None

    def _reaction(self, dispatch: Dispatch) -> Reaction | None:
        """A user's reaction; the bot's own (shown for a reaction elsewhere) is none."""
        data = dispatch.data
        user = str(data["user_id"])
        if user == self.me:
            return None
        member = data.get("member")
        if member is not None and member.get("user"):
            self._names[user] = sender_of(member["user"], member).name
        emoji = data["emoji"]
        name = f"{emoji['name']}:{emoji['id']}" if emoji.get("id") else str(emoji["name"])
        removed = dispatch.kind == "MESSAGE_REACTION_REMOVE"
        change = f"{'-' if removed else '+'}{dispatch.seq}"  # Discord's events have no id
        return Reaction(
            conversation=conversation_of(data.get("guild_id"), data["channel_id"]),
            platform_id=f"{data['message_id']}:{user}:{name}:{change}",
            sender=Sender(name=self._names.get(user, "someone"), id=user),
            target=str(data["message_id"]),
            emoji=name,
            removed=removed,
            done=functools.partial(self._done, dispatch.seq),
        )

    def _from_a_user(self, data: dict[str, Any]) -> bool:
        author = data.get("author")
        if author is None or "content" not in data or data.get("type", 0) not in _SHOWN:
            return False
        if str(author["id"]) == self.me or str(data.get("webhook_id", "")) in self._hooks:
            return False
        bot = author.get("bot") or data.get("webhook_id")
        return not bot or str(author["id"]) in self.config.allow_bots

    def _message(self, dispatch: Dispatch) -> Inbound | None:
        data, done = dispatch.data, functools.partial(self._done, dispatch.seq)
        conversation = conversation_of(data.get("guild_id"), data["channel_id"])
        sender = sender_of(data["author"], data.get("member"))
        text = data["content"].strip()  # its files are taken into ore by `events`
        if dispatch.kind == "MESSAGE_UPDATE":
            if not data.get("edited_timestamp"):
                return None  # an embed unfurled, not an edit
            edit_id = f"{data['id']}:{data['edited_timestamp']}"
            return Edit(
                conversation=conversation,
                platform_id=edit_id,
                sender=sender,
                target=data["id"],
                text=text,
                done=done,
            )
        reference = data.get("message_reference") or {}
        reply_to = (
            str(reference.get("message_id", ""))
            if reference.get("channel_id") == data["channel_id"]
            else ""
        )
        return Message(
            conversation=conversation,
            platform_id=str(data["id"]),
            sender=sender,
            text=text,
            reply_to=reply_to,
            done=done,
        )

    def _command(self, dispatch: Dispatch) -> Inbound | None:
        data = dispatch.data
        if data.get("type") != 2:
            return None
        member = data.get("member")
        author = (member or {}).get("user") or data["user"]
        options = data["data"].get("options") or []
        args = " ".join(str(option.get("value", "")) for option in options)
        name = data["data"]["name"]
        done = functools.partial(self._answered, dispatch.seq, data["id"], data["token"], name)
        return Command(
            conversation=conversation_of(data.get("guild_id"), data["channel_id"]),
            platform_id=str(data["id"]),
            sender=sender_of(author, member),
            name=name,
            args=args,
            done=done,
        )

    async def _done(self, seq: int) -> None:
        self.session.acknowledge(seq)

    async def _answered(self, seq: int, interaction: str, token: str, name: str) -> None:
        """The core has the command: tell its user (Discord shows "failed" otherwise)."""
        try:
            await self.rest.answer_command(interaction, token, f"/{name}: done")
        except PlatformError as exc:  # expired (3 s) or refused: the command still counts
            log.info("discord: could not answer /%s: %s", name, exc)
        self.session.acknowledge(seq)
