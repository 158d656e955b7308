"""Inbound: what Telegram's events become in the core, for the engine's `admit` and
`forward` hooks (the engine keeps each conversation's order, finds its thread and
confirms the update once the core has it).

- `/start` is answered with the greeting and `/new` with a confirmation, by the conduit
  (local replies, queued in the state so a crash neither loses nor repeats one).
- A message is sent with its event id `telegram:CHAT:MESSAGE` (the core stores a
  repeat once) and a traceparent that is a function of it; its file is fetched and
  stored in ore's files bucket (`MediaReader`), and the message carries it as an
  attachment, its caption as the text (a notice in the chat for a file not taken).
- An edit is one core edit of the message it names (the core decides whether it is
  answered again), unless ore never took that message.
- A reaction (`TelegramReactions`: a user's adds and removals on one message) is the
  core's react on the turn the message shows: a relayed copy's turn, the answer turn of
  the bot's answer, else the user's message itself. It never starts a model turn.
- `/retry` asks for another answer (a core regenerate) to the question of the answer
  it replies to (the bot's, or a relayed copy's), or else to the conversation's latest
  question. `/stop` is the engine's interrupt.

Every call waits while the core is away, as long as it takes; a refusal or a bug is
logged and the update confirmed, or it would come back forever.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from ore_conduit_telegram.ids import traceparent_of
from ore_conduit_telegram.platform import message_of, platform_id
from ore_conduit_telegram.reactions import TelegramReactions
from ore_conduit_telegram.updates import Said, TelegramCommand, TelegramEdit, TelegramMessage
from ore_core import EventContext, OreError, Role, UserMessageEvent
from ore_core.conduit import Inbound, until_answered

if TYPE_CHECKING:
    from ore_conduit_telegram.platform import TelegramPlatform
    from ore_core.artifacts import Attachment
    from ore_core.conduit.engine import Engine

__all__ = ["NEW_CONVERSATION", "NOTHING_TO_RETRY", "NOT_AN_ANSWER", "Forwarding"]

log = structlog.get_logger("ore.conduit.telegram")

NOTHING_TO_RETRY = "Nothing to answer again yet."
NOT_AN_ANSWER = "That message is not one of my answers: reply /retry to an answer."
NEW_CONVERSATION = "New conversation started."


class Forwarding:
    """The Telegram conduit's side of the engine's inbound hooks (module docstring)."""

    def __init__(self, engine: Engine, platform: TelegramPlatform) -> None:
        self.engine = engine
        self.client = engine.client
        self.name = engine.name
        self.platform = platform

    async def admit(self, inbound: Inbound) -> bool:
        """False for what the conduit answers itself (`/start`, `/new`); a local reply
        that cannot be queued is logged, and the update confirmed."""
        if not isinstance(inbound, TelegramCommand) or inbound.name not in ("start", "new"):
            return True
        text = self.platform.config.greeting if inbound.name == "start" else NEW_CONVERSATION
        try:
            await self._note(inbound.said, inbound.name, text)
        except Exception:
            log.exception("telegram update not handled", event=inbound.platform_id)
        return False

    async def forward(self, thread_id: str, inbound: Inbound) -> None:
        """Send `inbound`, waiting while the core is away; a refusal is logged."""
        try:
            await until_answered(
                lambda: self._forward(thread_id, inbound), "a telegram update waits for the core"
            )
        except OreError as exc:
            log.error("telegram update not handled", event=inbound.platform_id, error=str(exc))
        except Exception:
            log.exception("telegram update not handled", event=inbound.platform_id)

    async def _forward(self, thread_id: str, inbound: Inbound) -> None:
        if isinstance(inbound, TelegramMessage):
            await self._message(thread_id, inbound.said, inbound.text)
        elif isinstance(inbound, TelegramEdit):
            await self._edited(thread_id, inbound)
        elif isinstance(inbound, TelegramCommand) and inbound.name == "retry":
            await self._retry(thread_id, inbound.said)
        elif isinstance(inbound, TelegramReactions) and inbound.reactions:
            turn = await self._turn_shown(thread_id, inbound.reactions[0].target)
            for reaction in inbound.reactions:
                await self.engine.forward(thread_id, replace(reaction, target=turn))
        else:
            await self.engine.forward(thread_id, inbound)

    def _context(self, said: Said, event: str) -> EventContext:
        return EventContext(
            provenance=self.name,
            user=str(said.sender),
            user_name=said.sender_name,
            traceparent=traceparent_of(event),
        )

    async def _read_file(self, said: Said) -> tuple[Attachment, ...]:
        """The attachments of a message with a file; a notice in the chat for a file
        not taken (the caption goes on regardless)."""
        if not said.files:
            return ()
        media = await self.platform.media.read(said.files)
        if media.notice:
            await self._note(said, "file", media.notice)
        return media.attachments

    async def _message(self, thread_id: str, said: Said, text: str) -> None:
        attachments = await self._read_file(said)
        if not text and not attachments:
            return  # a file not taken, without a caption: the notice says so
        event = said.event_id
        await self.platform.state.set_asked(traceparent_of(event), said.message_id, event)
        message = UserMessageEvent(
            id=event, content=text, attachments=attachments, context=self._context(said, event)
        )
        await self.client.send(thread_id, message)

    async def _edited(self, thread_id: str, edit: TelegramEdit) -> None:
        """One core edit: the core decides whether it is answered again (the latest
        message) or recorded in place (an older one on a linked thread)."""
        said = edit.said
        if not await self._recorded(thread_id, edit.target):
            log.info("edit of a message ore never took", thread_id=thread_id)
            return
        event = edit.platform_id
        await self.platform.state.set_asked(traceparent_of(event), said.message_id, edit.target)
        context = self._context(said, event)  # the files stay the message's (the core's edit)
        await self.client.edit(thread_id, edit.target, edit.text, id=event, context=context)

    async def _recorded(self, thread_id: str, message_id: str) -> bool:
        """Whether the thread holds the message (edited or not)."""
        edits = f"{message_id}:edit:"
        return any(
            turn.event_id == message_id or turn.event_id.startswith(edits)
            for turn in await self.client.turns(thread_id)
        )

    async def _retry(self, thread_id: str, said: Said) -> None:
        """Another answer (a sibling in the core; nothing is relayed again) to the
        question of the bot's answer it replies to, or else to the latest question."""
        question: str | None
        if said.reply_to_sender and said.reply_to_sender == self.platform.identity.id:
            thread_id, question = await self._question_of_answer(said)
            if question is None:
                await self._note(said, "retry", NOT_AN_ANSWER)
                return
        else:
            turns = await self.client.turns(thread_id)
            latest = next((t for t in reversed(turns) if t.role == Role.USER), None)
            question = latest.id if latest is not None else None
        if question is None:
            await self._note(said, "retry", NOTHING_TO_RETRY)
            return
        retry = said.event_id
        await self.platform.state.set_asked(traceparent_of(retry), said.message_id, question)
        context = self._context(said, retry)
        await self.client.regenerate(thread_id, question, id=retry, context=context)

    async def _turn_shown(self, thread_id: str, message: str) -> str:
        """The turn the Telegram message `message` (its event id) shows: a relayed copy's,
        the bot's answer's, else the message's own (its event id)."""
        chat, message_id = int(message.split(":")[1]), message_of(message)
        copied = await self.engine.posted.lookup(platform_id(chat, message_id))
        if copied is not None:
            return copied[1]
        question = await self.platform.state.question_of(chat, message_id)
        if question is None:
            return message
        turns = await self.client.turns(thread_id)
        edits = f"{question}:edit:"
        asked = [
            t.id
            for t in turns
            if t.role == Role.USER
            and (question in (t.id, t.event_id) or t.event_id.startswith(edits))
        ]
        answer = next(
            (
                t.id
                for t in turns
                if asked and t.parent_id == asked[-1] and t.role == Role.ASSISTANT
            ),
            None,
        )
        return answer or message

    async def _question_of_answer(self, said: Said) -> tuple[str, str | None]:
        """(the thread, the turn) of the bot's answer a `/retry` replies to, in the
        answer's own conversation (a private chat may have moved on with `/new`), or of
        the relayed copy it replies to; no turn for a message that is neither."""
        state = self.platform.state
        question = await state.question_of(said.chat, said.reply_to)
        if question is None:  # a relayed copy (posted by this process, or reported before)
            copied = await self.engine.posted.lookup(platform_id(said.chat, said.reply_to))
            return copied if copied is not None else ("", None)
        root = await state.chain(said.chat, said.reply_to)
        if root is None:
            return "", None
        conversations = self.engine.conversations
        return await conversations.thread_of(said.conversation(root).key), question

    async def _note(self, said: Said, what: str, text: str) -> None:
        note_id = f"{what}:{said.chat}:{said.message_id}"
        note = (note_id, said.chat, said.topic, said.message_id, text)
        await self.platform.state.add_note(note)
        await self.platform.notes.flush()
