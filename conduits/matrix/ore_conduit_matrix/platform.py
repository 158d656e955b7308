"""MatrixPlatform: the Matrix adapter of ore's conduit engine (`ore_core.conduit.Platform`).

It logs in as a bot account with matrix-nio, turns `/sync` into ore's events and posts,
edits and redacts messages. Three promises rest on it:

- **No double**: a post's transaction id is the engine's key (`part_key`), sent under
  the access token kept in the state, so a post repeated after a crash is recognised by
  the homeserver and makes no second message.
- **Nothing lost**: a sync's `next_batch` is stored only once the engine confirmed
  (`done()`) every event of that batch and the ones before it (`SyncCursor`).
- **One classification**: every failure is `RateLimited`, `Transient` or `Refused`
  (`errors.classify`); nio's own retries are off, so the engine's policy is the only one.

Reactions go both ways: a user's `m.reaction` is a `Reaction` (its redaction one taken
back), and `react` annotates a message with the bot's own (redacted when taken back).

Encrypted rooms are out of scope: the room is told once (a notice), nothing in it is
read, and a post to it is refused.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

import aiohttp
import structlog
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    LoginResponse,
    MemoryDownloadResponse,
    RoomGetEventResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)

from ore_conduit_matrix.config import MatrixConfig, MissingCredentials
from ore_conduit_matrix.cursor import SyncCursor
from ore_conduit_matrix.errors import classify
from ore_conduit_matrix.ids import Conversation
from ore_conduit_matrix.reading import MEDIA, Reader
from ore_conduit_matrix.rendering import edit_content, file_content, message_content
from ore_conduit_matrix.state import State
from ore_core.artifacts import Attachment
from ore_core.conduit import (
    Capabilities,
    Inbound,
    Message,
    Part,
    PlatformError,
    RateLimited,
    Refused,
    Transient,
    until_answered,
)
from ore_core.conduit.engine import PlatformContext
from ore_core.conduit.media import DownloadFailed, Remote, fetch_files, take_files
from ore_core.files import guess_media_type

__all__ = ["ENCRYPTED_NOTICE", "MatrixPlatform"]

log = structlog.get_logger("ore.conduit.matrix")

ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and this bot reads only unencrypted rooms: "
    "invite it to a room without encryption to talk to it."
)
_NOTICE_TXN = "ore-encrypted-room-notice"
_NETWORK = (aiohttp.ClientError, TimeoutError)
_R = TypeVar("_R")
FILE_LIMIT = 50 * 1024**2
"""Bytes of a file the media repo takes: Synapse's default `max_upload_size` (50M); a
homeserver may set less, and refuses a larger file with one error the engine reports."""


class MatrixPlatform:
    """See the module docstring. `connect()`, then `events()` and the calls; `close()`."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        markup="markdown",
        max_message_length=8000,
        edits_arrive=True,
        deletes_arrive=True,
        reactions=True,
        idempotency="key",
        file_max_bytes=FILE_LIMIT,
    )

    def __init__(self, config: MatrixConfig, context: PlatformContext | None = None) -> None:
        self.config = config
        self.context = context  # for files: uploads in, fetches out (None: text only)
        # nio warns of every error answer that it is no success ("Error validating
        # response"): the adapter classifies and logs those itself, in one line.
        logging.getLogger("nio").setLevel(logging.ERROR)
        self.client = AsyncClient(
            config.homeserver,
            config.user_id,
            config=AsyncClientConfig(max_limit_exceeded=0, max_timeouts=0),
        )
        self.user_id = config.user_id
        self._state: State | None = None
        self._joining: set[str] = set()

    @property
    def state(self) -> State:
        assert self._state is not None, "connect() first"
        return self._state

    # -- the session --------------------------------------------------------------------

    async def connect(self) -> None:
        """Log in (a kept session, the configured token, or the password) and check who
        the bot is; MissingCredentials (one line) for refused credentials, after which
        nothing is left open."""
        self._state = State.open(self.config.state_dir / f"state-{self.config.durable}.db")
        try:
            await self._sign_in()
        except BaseException:
            await self.close()
            raise
        log.info("matrix conduit connected", user=self.user_id, homeserver=self.config.homeserver)

    async def _sign_in(self) -> None:
        token = self.config.token()
        kept = self.state.session()
        if token:
            await self._use(token, "")
        elif kept is None or not await self._use(kept[2], kept[1], kept_session=True):
            await self._login()

    async def _use(self, token: str, device: str, *, kept_session: bool = False) -> bool:
        """Sign in with `token`; False when a kept session's token has been revoked."""
        self.client.restore_login(self.user_id or "@unknown:unknown", device, token)
        answer = await self._reach("whoami", self.client.whoami())
        if isinstance(answer, WhoamiResponse):
            if self.config.user_id and answer.user_id != self.config.user_id:
                raise MissingCredentials(
                    f"the access token is {answer.user_id}'s, not user_id {self.config.user_id}'s"
                )
            self.user_id = self.client.user_id = answer.user_id
            self.client.device_id = answer.device_id or device
            return True
        if kept_session and getattr(answer, "status_code", "") == "M_UNKNOWN_TOKEN":
            self.state.keep_session(None)
            return False
        raise MissingCredentials(
            f"the Matrix access token was refused by {self.config.homeserver} ({answer}); "
            "make a new one for the bot account"
        )

    async def _login(self) -> None:
        self.client.user = self.user_id
        answer = await self._reach(
            "login",
            self.client.login(self.config.secret_password(), device_name=self.config.device_name),
        )
        if not isinstance(answer, LoginResponse):
            raise MissingCredentials(
                f"{self.config.homeserver} refused the password of {self.user_id} ({answer})"
            )
        self.state.keep_session((answer.user_id, answer.device_id, answer.access_token))

    async def _reach(self, call: str, request: Awaitable[_R]) -> _R:
        try:
            return await request
        except _NETWORK as exc:
            raise MissingCredentials(
                f"cannot reach the homeserver {self.config.homeserver} ({call}: {exc!r})"
            ) from exc

    async def close(self) -> None:
        await self.client.close()
        if self._state is not None:
            self._state.close()
            self._state = None

    # -- inbound ------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[Inbound]:
        """The rooms' events from `/sync`, from the stored token on; each one's `done`
        moves the stored token (see `SyncCursor`). A first run with no stored token
        skips what the rooms said before it."""
        cursor = SyncCursor(self.state.keep_sync_token)
        reader = Reader(
            self.user_id, self.config.command_prefix, self.state, self._name, self._fetch
        )
        since = self.state.sync_token()
        history = not since
        full_state = True
        while True:
            response = await self._sync(since, full_state)
            full_state = False
            batch = cursor.begin(response.next_batch)
            await self._accept_invites(response)
            for room, info in response.rooms.join.items():
                if await self._encrypted(room):
                    continue
                for event in _since_joined(self.user_id, info.timeline.events):
                    inbound = None if history else await self._read(reader, room, event.source)
                    if inbound is not None:
                        yield replace(inbound, done=cursor.hand_out(batch))
            cursor.seal(batch)
            since, history = response.next_batch, False

    async def _read(self, reader: Reader, room: str, source: dict[str, Any]) -> Inbound | None:
        """`reader`'s event, a file's taken into ore (`_with_file`)."""
        inbound = await reader.read(room, source)
        content = source.get("content") or {}
        if isinstance(inbound, Message) and content.get("msgtype") in MEDIA:
            return await self._with_file(inbound, room, content)
        return inbound

    async def _with_file(self, message: Message, room: str, content: dict[str, Any]) -> Message:
        """`message` with its file taken into ore; a notice in the room when it cannot
        be (the message goes on without it)."""
        if self.context is None:
            return message
        info = content.get("info") or {}
        name = str(content.get("filename") or content.get("body") or "file")
        remote = Remote(
            name,
            str(info.get("mimetype") or guess_media_type(name)),
            info.get("size") if isinstance(info.get("size"), int) else None,
            functools.partial(self._download, str(content.get("url", ""))),
        )
        attachments, notices = await take_files(self.context.client, [remote])
        for line in notices:
            notice = Part(line, reply_to=message.platform_id, kind="notice", severity="warn")
            try:
                await self.post(message.conversation, notice, _txn("file", message.platform_id))
            except PlatformError as exc:
                log.warning("matrix file notice not posted", error=exc.detail)
        return replace(message, attachments=attachments)

    async def _download(self, mxc: str) -> bytes:
        try:
            answer = await self.client.download(mxc=mxc)
        except (*_NETWORK, ValueError) as exc:
            raise DownloadFailed(f"the download failed ({exc!r})") from exc
        if not isinstance(answer, MemoryDownloadResponse):
            raise DownloadFailed(f"the media repo refused it ({answer})")
        return bytes(answer.body)

    async def _sync(self, since: str, full_state: bool) -> SyncResponse:
        """One `/sync`, tried until it answers on the SDK's one schedule (a rate limit's
        own wait); MissingCredentials if the token is revoked."""

        async def once() -> SyncResponse:
            try:
                answer = await self.client.sync(
                    timeout=self.config.sync_timeout, since=since or None, full_state=full_state
                )
            except _NETWORK as exc:
                raise Transient(f"sync: {exc!r}") from exc
            if isinstance(answer, SyncResponse):
                return answer
            if getattr(answer, "status_code", "") == "M_UNKNOWN_TOKEN":
                raise MissingCredentials(
                    f"the homeserver revoked the bot's access token ({answer}): log in again"
                )
            raise classify("sync", answer)

        return await until_answered(
            once, "matrix sync failed", passing=_failed_sync, asked=_rate_limit_wait
        )

    async def _accept_invites(self, response: SyncResponse) -> None:
        for room, info in response.rooms.invite.items():
            if room in self._joining or not self.config.auto_join:
                continue
            inviter = next(
                (
                    e.sender
                    for e in info.invite_state
                    if getattr(e, "state_key", None) == self.user_id and hasattr(e, "sender")
                ),
                "",
            )
            if self.config.invites_from and inviter not in self.config.invites_from:
                log.warning("matrix invite ignored: not in invites_from", room=room, by=inviter)
                self._joining.add(room)
                continue
            try:
                answer = await self.client.join(room)
            except _NETWORK as exc:
                log.warning("matrix join failed", room=room, error=repr(exc))
                continue
            if isinstance(answer, ErrorResponse):
                log.warning("matrix join failed", room=room, error=str(answer))
            else:
                self._joining.add(room)
                log.info("matrix room joined", room=room, by=inviter)

    async def _encrypted(self, room: str) -> bool:
        """True for an encrypted room (told once that the bot cannot read it)."""
        known = self.client.rooms.get(room)
        if known is None or not known.encrypted:
            return False
        if not self.state.was_told(room):
            log.warning("matrix room is end-to-end encrypted: not read", room=room)
            content = {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE}
            try:
                await self._call(
                    "notice", self.client.room_send(room, "m.room.message", content, _NOTICE_TXN)
                )
            except Transient:
                return True  # told at the next sync
            except PlatformError as exc:
                log.warning("matrix notice refused", room=room, error=exc.detail)
            self.state.keep_told(room)
        return True

    def _name(self, room: str, user: str) -> str:
        known = self.client.rooms.get(room)
        name = known.user_name(user) if known is not None else None
        return name or user.split(":")[0].removeprefix("@")

    async def _fetch(self, room: str, event_id: str) -> dict[str, Any] | None:
        try:
            answer = await self.client.room_get_event(room, event_id)
        except _NETWORK:
            return None
        if isinstance(answer, RoomGetEventResponse):
            content: dict[str, Any] = answer.event.source.get("content") or {}
            return content
        return None

    # -- outbound -----------------------------------------------------------------------

    async def post(self, conversation: str, part: Part, key: str) -> str:
        """Send `part` with the transaction id `key` (its files after it, each under a
        transaction id of its own made from `key`); the text event's id."""
        where = Conversation.parse(conversation)
        self._writable(where.room)
        files: list[tuple[Attachment, bytes]] = []
        if part.attachments and self.context is not None:
            context = self.context
            files, lines = await fetch_files(
                context.client, context.conversations, conversation, part.attachments
            )
            part = replace(part, text="\n".join(filter(None, [part.text, *lines])))
        event_id = await self._post_text(conversation, where, part, key)
        for index, (attachment, data) in enumerate(files):
            await self._post_file(where, attachment, data, _txn("file", key, str(index)))
        return event_id

    async def _post_file(
        self, where: Conversation, attachment: Attachment, data: bytes, txn: str
    ) -> None:
        """Upload `data` to the media repo, then its `m.image` / `m.file` event."""
        uploaded, _ = await self._call(
            "upload",
            self.client.upload(
                io.BytesIO(data),
                content_type=attachment.media_type,
                filename=attachment.name,
                filesize=len(data),
            ),
        )
        assert isinstance(uploaded, UploadResponse)
        content = file_content(attachment, uploaded.content_uri, where)
        await self._call("send", self.client.room_send(where.room, "m.room.message", content, txn))

    async def _post_text(self, conversation: str, where: Conversation, part: Part, key: str) -> str:
        """Send the text of `part` under `key`; the event's id."""
        content = message_content(part, where)
        before = self.state.sending(key, part.text)
        answer = await self._call(
            "send", self.client.room_send(where.room, "m.room.message", content, key)
        )
        assert isinstance(answer, RoomSendResponse)
        self.state.note(answer.event_id, conversation)
        if before is not None and before != part.text:
            # The event the key made before a crash, with the text of then (the start of
            # a streamed answer): the homeserver names it as it is; show the text now.
            await self.edit(conversation, str(answer.event_id), part)
            self.state.keep_shown(key, part.text)
        return str(answer.event_id)

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        """Replace the text of `platform_id` (m.replace). The transaction id counts the
        edits made before (`State.edits`): the same edit asked again is one event, an
        edit back to an earlier text a new one."""
        where = Conversation.parse(conversation)
        self._writable(where.room)
        content = edit_content(part, platform_id)
        made, last = self.state.edits(platform_id)
        if made and last == part.text:
            made -= 1  # the last edit again: its own transaction id names it
        txn = _txn("edit", platform_id, str(made), part.text)
        await self._call("edit", self.client.room_send(where.room, "m.room.message", content, txn))
        self.state.keep_edit(platform_id, made + 1, part.text)

    async def delete(self, conversation: str, platform_id: str) -> None:
        """Redact `platform_id`; a repeated redaction is one event."""
        room = Conversation.parse(conversation).room
        request = self.client.room_redact(room, platform_id, tx_id=_txn("redact", platform_id))
        answer = await self._call("redact", request)
        assert isinstance(answer, RoomRedactResponse)

    async def react(self, conversation: str, platform_id: str, emoji: str, add: bool) -> None:
        """Annotate `platform_id` with the bot's `emoji` (m.reaction), or redact that
        annotation; either is a no-op when already so. The transaction id counts the
        times it was taken back, so a reaction made again is a new event."""
        room = Conversation.parse(conversation).room
        made, taken_back = self.state.own_reaction(platform_id, emoji)
        if add and not made:
            self._writable(room)
            relates = {"rel_type": "m.annotation", "event_id": platform_id, "key": emoji}
            txn = _txn("react", platform_id, emoji, str(taken_back))
            request = self.client.room_send(room, "m.reaction", {"m.relates_to": relates}, txn)
            answer = await self._call("react", request)
            assert isinstance(answer, RoomSendResponse)
            self.state.keep_own_reaction(platform_id, emoji, answer.event_id, taken_back)
        elif not add and made:
            txn = _txn("unreact", made)
            answer = await self._call("redact", self.client.room_redact(room, made, tx_id=txn))
            assert isinstance(answer, RoomRedactResponse)
            self.state.keep_own_reaction(platform_id, emoji, "", taken_back + 1)

    def _writable(self, room: str) -> None:
        known = self.client.rooms.get(room)
        if known is not None and known.encrypted:
            raise Refused(f"{room} is end-to-end encrypted", "refused_unsupported")

    async def _call(self, call: str, request: Awaitable[_R]) -> _R:
        """The answer of a call; its failure classified (see `errors.classify`)."""
        try:
            answer = await request
        except _NETWORK as exc:
            raise Transient(f"{call}: {exc!r}") from exc
        if isinstance(answer, ErrorResponse):
            raise classify(call, answer)
        return answer


def _failed_sync(error: BaseException) -> bool:
    """Is `error` a sync's failure (tried again), not a bug or a revoked token?"""
    return isinstance(error, PlatformError)


def _rate_limit_wait(error: BaseException) -> float | None:
    return error.wait if isinstance(error, RateLimited) else None


def _since_joined(me: str, events: list[Any]) -> list[Any]:
    """A room's timeline from the bot's own join on, if it joined in it: what was said
    before a bot joined is history, not questions to it."""
    for index in range(len(events) - 1, -1, -1):
        source = events[index].source
        if (
            source.get("type") == "m.room.member"
            and source.get("state_key") == me
            and (source.get("content") or {}).get("membership") == "join"
            and _before(source).get("membership") != "join"  # a join, not a new name
        ):
            return list(events[index + 1 :])
    return list(events)


def _before(source: dict[str, Any]) -> dict[str, Any]:
    before: dict[str, Any] = (source.get("unsigned") or {}).get("prev_content") or {}
    return before


def _txn(*parts: str) -> str:
    """A transaction id derived from what the call does (a retry of it is recognised)."""
    return "ore-" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]
