"""The web API's operations on threads, for one signed-in user, over the conduit SDK.

Threads live in the conduit's namespace; the user who made one is its owner
(`web.owner` in its metadata) and the only one who sees it: another user's thread
answers exactly like an unknown one. A conduit may not delete threads (an operator's
decision in ore), so deleting hides the thread (`web.deleted`) from its owner.

Bridging: a thread's conversation key (`WebConduit.conversation_key`) is `web.thread`,
whose value is the thread's own id, recorded when the page makes it; so an operator
can name the web thread as an endpoint (`ore chat --attach web:ID`, a `[[gateway]]`)
and link other endpoints to it (`ore link add ID nats:room`). Messages sent from the
page carry the user's name (the label other endpoints show) and an edit names the turn
it replaces (`edit_of`), so linked endpoints update their copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel

from ore_conduit_web.live import LiveHub, Position
from ore_conduit_web.relays import History, stored_delivery
from ore_conduit_web.tree import (
    ThreadTree,
    build_tree,
    leaf_under,
    mark_compaction,
    text_of,
)
from ore_core import (
    EventContext,
    EventDecodeError,
    Role,
    Turn,
    UserMessageEvent,
    turn_from_dict,
)
from ore_core.artifacts import Attachment
from ore_core.conduit import ApiError, ConduitClient, ThreadInfo, ThreadSettings
from ore_core.errors import OreError
from ore_core.events import BATCH_KIND, new_event_id
from ore_core.session.compaction import BOUNDARY_INFO_KEY, BoundaryInfo
from ore_core.session.spec import KEY_MODEL_NAME

__all__ = ["Reactions", "ThreadSummary", "WebError", "WebThreads"]

Reactions = dict[str, dict[str, list[str]]]
"""Turn -> emoji -> who reacts with it now."""

OWNER = "web.owner"
TITLE = "web.title"
CREATED = "web.created"
UPDATED = "web.updated"
DELETED = "web.deleted"
NAMESPACE = "ore.namespace"  # the thread's home namespace, kept by the core
CONVERSATION = "web.thread"
"""The conversation key: the web thread's own id (an endpoint `web:ID` names it)."""
DEFAULT_TITLE = "New chat"
_TITLE_LENGTH = 80
_FORK_TRIES = 50  # a fork right after an answer may meet the thread still busy (409)
_LIST_AT_ONCE = 32


class WebError(Exception):
    """A request the API refuses: HTTP `status`, a `code` word and a message for people."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _boundary(info: ThreadInfo) -> BoundaryInfo | None:
    """The thread's compaction as the core recorded it; None for none or a damaged
    record (the summary is then shown as the plain system message it is)."""
    try:
        return BoundaryInfo.decode(info.metadata.get(BOUNDARY_INFO_KEY))
    except OreError:
        return None


def _not_found(thread_id: str) -> WebError:
    return WebError(404, "not_found", f"thread {thread_id} not found")


class ThreadSummary(BaseModel):
    """A thread in the list: its title and when it was made and last written to."""

    id: str
    title: str
    created: str
    updated: str


def _visible_to(info: ThreadInfo, user: str, operator: str) -> bool:
    """Its owner sees a thread; one no page made (an operator's: a thread of another
    conduit linked to the web, a gateway's) is the operator's, the conduit's `user`."""
    owner = info.metadata.get(OWNER) or operator
    return owner == user and not info.metadata.get(DELETED)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _summary(info: ThreadInfo) -> ThreadSummary:
    meta = info.metadata
    return ThreadSummary(
        id=info.id,
        title=meta.get(TITLE) or DEFAULT_TITLE,
        created=meta.get(CREATED, ""),
        updated=meta.get(UPDATED) or meta.get(CREATED, ""),
    )


class WebThreads:
    """Thread operations on behalf of users; every method checks the owner first.

    `operator` (the conduit's `user`) owns the threads no page made.
    """

    def __init__(self, client: ConduitClient, hub: LiveHub, operator: str) -> None:
        self.client = client
        self.hub = hub
        self.operator = operator

    # -- finding threads --------------------------------------------------------

    async def owned(self, user: str, thread_id: str) -> ThreadInfo:
        """The thread if `user` owns it and it is not deleted; else WebError 404."""
        try:
            info = await self.client.get_thread(thread_id)
        except ApiError as exc:
            if exc.status in (400, 404):
                raise _not_found(thread_id) from None
            raise
        if not _visible_to(info, user, self.operator):
            raise _not_found(thread_id)
        home = info.metadata.get(NAMESPACE) == self.client.namespace
        if home and CONVERSATION not in info.metadata:  # made before bridging
            await self.client.set_metadata(thread_id, CONVERSATION, thread_id)
        self.hub.relays.know(thread_id, info.metadata)
        return info

    async def find(self, user: str, query: str = "") -> list[ThreadSummary]:
        """The user's threads, last written first; `query` keeps those whose title or
        text (on the active path) contains it, ignoring case."""
        ids: list[str] = []
        after: str | None = None
        while True:
            page = await self.client.list_threads(after=after, limit=1000)
            ids.extend(page.threads)
            if page.next is None:
                break
            after = page.next
        infos: list[ThreadInfo] = []
        for start in range(0, len(ids), _LIST_AT_ONCE):
            chunk = ids[start : start + _LIST_AT_ONCE]
            found = await asyncio.gather(*(self._info(t) for t in chunk))
            infos.extend(i for i in found if i and _visible_to(i, user, self.operator))
        needle = query.strip().casefold()
        if needle:
            matched: list[bool] = []
            for start in range(0, len(infos), _LIST_AT_ONCE):
                batch = infos[start : start + _LIST_AT_ONCE]
                matched += await asyncio.gather(*(self._matches(i, needle) for i in batch))
            infos = [info for info, hit in zip(infos, matched, strict=True) if hit]
        summaries = [_summary(i) for i in infos]
        summaries.sort(key=lambda s: s.updated, reverse=True)
        return summaries

    async def _info(self, thread_id: str) -> ThreadInfo | None:
        try:
            return await self.client.get_thread(thread_id)
        except ApiError as exc:
            if exc.status == 404:
                return None  # deleted by an operator meanwhile
            raise

    async def _matches(self, info: ThreadInfo, needle: str) -> bool:
        if needle in (info.metadata.get(TITLE) or DEFAULT_TITLE).casefold():
            return True
        turns = await self.client.turns(info.id)
        return any(needle in text_of(turn).casefold() for turn in turns)

    # -- changing threads -------------------------------------------------------

    async def create(self, user: str, title: str = "") -> ThreadSummary:
        """A new empty thread owned by `user`."""
        now = _now()
        thread_id = secrets.token_hex(16)
        metadata = {OWNER: user, CREATED: now, UPDATED: now, CONVERSATION: thread_id}
        if title.strip():
            metadata[TITLE] = title.strip()[:_TITLE_LENGTH]
        await self.client.create_thread(thread_id, metadata=metadata)
        return _summary(ThreadInfo(thread_id, "", metadata, 0))

    async def rename(self, user: str, thread_id: str, title: str) -> ThreadSummary:
        """Give the thread a title (the pages showing it are told)."""
        await self.owned(user, thread_id)
        cleaned = " ".join(title.split())[:_TITLE_LENGTH]
        if not cleaned:
            raise WebError(400, "bad_request", "a title needs at least one visible character")
        await self.client.set_metadata(thread_id, TITLE, cleaned)
        self.hub.notify(thread_id, "title")
        return _summary(await self.client.get_thread(thread_id))

    async def choose_model(self, user: str, thread_id: str, model: str) -> str:
        """Answer the thread's next messages with `model`, one the processor offers (""
        goes back to the configured one); the pages showing it are told."""
        await self.owned(user, thread_id)
        if not model:
            await self.client.delete_metadata(thread_id, KEY_MODEL_NAME)
        else:
            offered = (await self.client.models())["models"]
            if model not in offered:
                choices = ", ".join(offered) or "none"
                raise WebError(
                    400, "bad_request", f"model {model!r} is not offered (offered: {choices})"
                )
            await self.client.set_metadata(thread_id, KEY_MODEL_NAME, model)
        self.hub.notify(thread_id, "model")
        return model

    async def delete(self, user: str, thread_id: str) -> None:
        """Hide the thread from its owner for good (ore keeps its history)."""
        await self.owned(user, thread_id)
        await self.client.set_metadata(thread_id, DELETED, _now())
        self.hub.notify(thread_id, "deleted")

    async def send(
        self,
        user: str,
        thread_id: str,
        text: str,
        *,
        parent_id: str | None = None,
        edit_of: str | None = None,
        client_id: str | None = None,
        answer: bool = True,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        """Send a user message (after `parent_id`: a branch from there), with the files
        uploaded for it (`attachments`); its event id.

        `edit_of` makes it an edit of that message, one core edit: the core answers an
        edit of the latest message again (unless `answer` is false) and records an
        older one's in place on a linked thread; linked endpoints edit their copy.
        `client_id` makes a retried request count once.
        """
        info = await self.owned(user, thread_id)
        event_id = f"web-m-{client_id}" if client_id else new_event_id()
        if edit_of is not None:
            await self._note_change(info, text, event_id)
            context = self._context(user)
            await self.client.edit(
                thread_id, edit_of, text, id=event_id, answer=answer, context=context
            )
            return event_id
        if parent_id is not None:
            await self._fork(thread_id, parent_id)
        await self._send(user, info, text, event_id, answer=answer, attachments=attachments)
        return event_id

    async def react(
        self, user: str, thread_id: str, turn_id: str, emoji: str, *, remove: bool = False
    ) -> str:
        """`user` reacts to a turn with `emoji` (or takes it back): one core `react`,
        which tells every endpoint (a `reaction` event) and never starts a model turn;
        the request's event id."""
        await self.owned(user, thread_id)
        event_id = new_event_id()
        await self.client.react(
            thread_id, turn_id, emoji, remove=remove, id=event_id, context=self._context(user)
        )
        return event_id

    async def attachment(self, user: str, thread_id: str, sha256: str) -> Attachment:
        """The file `sha256` of a turn of the thread (WebError 404 when none has it)."""
        await self.owned(user, thread_id)
        for turn in await self._all_turns(thread_id):
            for artifact in turn.artifacts:
                if isinstance(artifact, Attachment) and artifact.sha256 == sha256:
                    return artifact
        raise WebError(404, "not_found", f"no file {sha256[:12]} in thread {thread_id}")

    async def regenerate(self, user: str, thread_id: str, turn_id: str) -> str:
        """Answer the question of `turn_id` (an answer or the question itself) again, as
        a sibling answer: one core regenerate (no question is sent again, so none is
        relayed); the request's event id."""
        await self.owned(user, thread_id)
        turns = {turn.id: turn for turn in await self._all_turns(thread_id)}
        turn = turns.get(turn_id)
        if turn is not None and turn.role != Role.USER:
            turn = turns.get(turn.parent_id)
        if turn is None or turn.role != Role.USER:
            raise WebError(404, "not_found", f"turn {turn_id} has no question on {thread_id}")
        event_id = new_event_id()
        await self.client.regenerate(thread_id, turn.id, id=event_id, context=self._context(user))
        return event_id

    async def delete_message(self, user: str, thread_id: str, turn_id: str) -> None:
        """Delete a message: one core delete (a tombstone the model no longer sees; its
        copies on linked endpoints are deleted)."""
        await self.owned(user, thread_id)
        if not any(turn.id == turn_id for turn in await self._all_turns(thread_id)):
            raise WebError(404, "not_found", f"turn {turn_id} not found on thread {thread_id}")
        await self.client.delete(thread_id, turn_id, id=f"web-d-{turn_id}")

    async def select(self, user: str, thread_id: str, turn_id: str) -> ThreadTree:
        """Show the branch through `turn_id` (a sibling picked with the arrows): its newest leaf
        becomes the thread's tip, so the next message continues it."""
        tree = await self.tree(user, thread_id)
        if not any(view.id == turn_id for view in tree.turns):
            raise WebError(404, "not_found", f"turn {turn_id} not found on thread {thread_id}")
        await self._fork(thread_id, leaf_under(tree, turn_id))
        self.hub.notify(thread_id, "branch")
        return await self.tree(user, thread_id)

    async def fork(self, user: str, thread_id: str, turn_id: str) -> str:
        """Make `turn_id` the tip: the next message branches from it. The new tip."""
        await self.owned(user, thread_id)
        tip = await self._fork(thread_id, turn_id)
        self.hub.notify(thread_id, "branch")
        return tip

    async def interrupt(self, user: str, thread_id: str) -> None:
        """Stop the answer being written (in the core, not only on the page)."""
        await self.owned(user, thread_id)
        await self.client.interrupt(thread_id)

    async def _send(
        self,
        user: str,
        info: ThreadInfo,
        text: str,
        event_id: str,
        *,
        answer: bool = True,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        shown = " ".join([text, *(f"📎 {a.name}" for a in attachments)]).strip()
        await self._note_change(info, shown, event_id)
        message = UserMessageEvent(
            id=event_id,
            content=text,
            answer=answer,
            attachments=tuple(attachments),
            context=self._context(user),
        )
        await self.client.send(info.id, message)

    async def _note_change(self, info: ThreadInfo, text: str, event_id: str) -> None:
        # The thread's metadata first: changed while the message is being handled, a
        # linked thread could lose the message's stored batch in the core (reported).
        if not info.metadata.get(TITLE):
            await self.client.set_metadata(info.id, TITLE, " ".join(text.split())[:_TITLE_LENGTH])
            self.hub.notify(info.id, "title")
        await self.client.set_metadata(info.id, UPDATED, _now())
        self.hub.note_sent(info.id, event_id, text)

    def _context(self, user: str) -> EventContext:
        """The sender: the signed-in user, by name (the label linked endpoints show)."""
        return EventContext(provenance=self.client.namespace, user=user, user_name=user)

    async def _fork(self, thread_id: str, turn_id: str) -> str:
        for attempt in range(_FORK_TRIES):
            try:
                return await self.client.fork(thread_id, turn_id)
            except ApiError as exc:
                if exc.status == 404:
                    raise WebError(
                        404, "not_found", f"turn {turn_id} not found on thread {thread_id}"
                    ) from None
                if exc.status != 409 or attempt == _FORK_TRIES - 1:
                    raise WebError(
                        409, "busy", "an answer is being written: stop it first, then try again"
                    ) from None
            await asyncio.sleep(0.02 * (attempt + 1))  # the answer is being saved
        raise AssertionError("unreachable")

    # -- reading threads --------------------------------------------------------

    async def tree(self, user: str, thread_id: str) -> ThreadTree:
        """Every known turn of the thread, its active path and the stream position."""
        info = await self.owned(user, thread_id)
        settings = ThreadSettings.of_metadata(info.metadata)
        history = History(settings, self.client.namespace)
        reactions: Reactions = {}
        turns, cursor = await self._stored_turns(thread_id, history, reactions)
        path = await self.client.turns(thread_id)
        title = info.metadata.get(TITLE) or DEFAULT_TITLE
        found = build_tree(
            thread_id, title, turns, path, str(cursor) if cursor else "", history, reactions
        )
        found.gateway, found.answer, found.label = settings.gateway, settings.answer, settings.label
        found.model = info.metadata.get(KEY_MODEL_NAME, "")
        mark_compaction(found, _boundary(info))
        return found

    async def _all_turns(self, thread_id: str) -> list[Turn]:
        turns, _ = await self._stored_turns(thread_id)
        return [*turns, *await self.client.turns(thread_id)]

    async def _stored_turns(
        self, thread_id: str, history: History | None = None, reactions: Reactions | None = None
    ) -> tuple[list[Turn], Position | None]:
        """Every turn in the thread's stored events (the core keeps them for days), and
        the position of the last stored event; `history` takes in what they say about
        a linked thread's turns, `reactions` who reacts to each turn now (the last
        `reaction` event of each turn and emoji)."""
        turns: list[Turn] = []
        last: Position | None = None
        after = 0
        while True:
            page = await self.client.read_events(thread_id, after=after, limit=1000)
            for entry in page["events"]:
                value = entry["event"]
                sequence = int(entry["sequence"])
                events = value.get("events", []) if value.get("kind") == BATCH_KIND else [value]
                for index, event in enumerate(events):
                    if event.get("kind") == "turn_complete":
                        turns.append(turn_from_dict(event["turn"]))
                    elif event.get("kind") == "reaction" and reactions is not None:
                        on_turn = reactions.setdefault(str(event["turn"]), {})
                        on_turn[str(event["emoji"])] = [str(r) for r in event.get("reactors", [])]
                    if history is not None:
                        # A malformed event (the core never stores one) shows plainly.
                        with contextlib.suppress(EventDecodeError):
                            history.add(stored_delivery(thread_id, event, sequence))
                    last = Position(sequence, index)
            following = page.get("next")
            if following is None or following <= after:
                return turns, last
            after = int(following)

    async def export(self, user: str, thread_id: str, form: str) -> tuple[str, str]:
        """The thread as (`media type`, text): `markdown` (the active path) or `json`."""
        tree = await self.tree(user, thread_id)
        if form == "json":
            return "application/json", json.dumps(tree.model_dump(), indent=2)
        views = {view.id: view for view in tree.turns}
        lines = [f"# {tree.title}", ""]
        for turn_id in tree.path:
            view = views[turn_id]
            relay = view.relay
            relayed = relay is not None and relay.action in ("relayed", "edited")
            heading = relay.label if relay is not None and relayed else view.role.capitalize()
            lines += [f"## {heading}", ""]
            if view.reasoning:
                lines += ["> " + line for line in view.reasoning.splitlines()] + [""]
            lines += [view.text, ""]
        return "text/markdown; charset=utf-8", "\n".join(lines)
