"""The compaction step: an interceptor that summarises a long thread before it is answered.

Before a user message is recorded, the step measures the active path plus the new
message (`compaction.path_tokens`); past `threshold` of the model's context window it
summarises the older turns into a summary turn and marks the boundary, so the answer
is asked with the summary, the kept turns and the new message. `/compact [focus]`
does it now; `/uncompact` (or `/undo` right after a compaction) goes back.

The summariser is a plugin's (`ore_compact`) or else the processor's own
(`processor.summarise`, with its `context_window(model)`): a processor without them
and no plugin means no automatic compaction. A failure (the model failed, or the
summary is not shorter than what it replaces) keeps the whole thread, is said once,
and pauses automatic tries for `retry_after` messages (a circuit breaker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import structlog

from ore_core.events import IngressEvent, Notice, NoticeEvent, Severity, UserMessageEvent
from ore_core.session.compaction import (
    BYTES_PER_TOKEN,
    boundary_info,
    estimate_tokens,
    path_tokens,
    plan_cut,
    store_compaction,
    uncompact,
)
from ore_core.session.protocols import InterceptResult
from ore_core.session.slash import SlashCommands, parse_command
from ore_core.session.stream import APP_CONTEXT
from ore_core.turn import Turn

if TYPE_CHECKING:
    from ore_core.config import CompactionSettings
    from ore_core.session.stream import Stream

__all__ = [
    "COMMANDS",
    "DEFAULT_CONTEXT_WINDOW",
    "SUMMARY_PROMPT",
    "Compactor",
    "Summariser",
    "summary_prompt",
]

log = structlog.get_logger("ore.compaction")

DEFAULT_CONTEXT_WINDOW = 128_000
"""Tokens assumed when neither the settings nor the processor know the model's window."""

SUMMARY_PROMPT = (
    "The conversation above is being shortened: write the summary that will replace it. "
    "Keep every decision and its reason, the names of people, files, systems and things "
    "mentioned, the questions still open, the tasks in progress, and every standing "
    "instruction the user gave (how to answer, what to avoid), word for word where short. "
    "Write plain prose and lists, no preamble; say only what the conversation says."
)
"""What the summariser is asked (with the focus of `/compact FOCUS` appended)."""

COMMANDS = {
    "compact": "Summarise the earlier conversation now: /compact [FOCUS]",
    "uncompact": "Restore the turns the last compaction summarised",
}
"""The commands this step runs itself (ahead of the slash commands), as `/help` lists them."""

MESSAGE_OVERHEAD = 16
"""Tokens counted for a new message beside its text (role, framing)."""


class Summariser(Protocol):
    """Writes the summary of `turns`: the text that will stand for them."""

    def __call__(self, turns: Sequence[Turn], prompt: str, model: str) -> Awaitable[str]: ...


def summary_prompt(focus: str = "") -> str:
    """The summariser's instructions, with a `/compact` focus when given."""
    focus = focus.strip()
    return f"{SUMMARY_PROMPT}\nFocus on: {focus}" if focus else SUMMARY_PROMPT


class Compactor:
    """The interceptor: runs before slash commands (order -10) so it owns its commands."""

    name = "compaction"
    order = -10

    def __init__(self, settings: CompactionSettings, summariser: Summariser | None = None) -> None:
        self.settings = settings
        self.summariser = summariser
        self._paused: dict[str, int] = {}  # thread id -> messages until the next try
        self._warned: set[str] = set()  # threads told they near the threshold

    def list_commands(self, commands: SlashCommands) -> None:
        """Have `/help` of `commands` list `/compact` and `/uncompact`."""
        for name, description in COMMANDS.items():
            commands.mention(name, description)

    async def intercept(self, event: IngressEvent, stream: Stream) -> InterceptResult:
        """Handle `/compact`, `/uncompact`, `/undo` after a compaction; compact when due."""
        if not isinstance(event, UserMessageEvent):
            return InterceptResult(event)
        command = parse_command(event.content)
        if command is None:
            _tell_everyone(stream, await self._auto(event, stream))
            return InterceptResult(event)
        name, focus = command
        if name == "compact":
            notice = await self.compact(stream, focus)
        elif name == "uncompact" or (name == "undo" and self._just_compacted(stream)):
            notice = self.uncompact(stream)
        else:
            return InterceptResult(event)
        if notice.severity == Severity.INFO:  # nothing happened: for the sender only
            return InterceptResult(None, [notice])
        _tell_everyone(stream, notice)
        return InterceptResult(None)

    async def compact(self, stream: Stream, focus: str = "") -> Notice:
        """Compact `stream`'s thread now (`/compact`): the notice says what happened."""
        tools = self._tools(stream)
        if tools is None:
            return Notice("Nothing can summarise this thread (no summariser).", Severity.INFO)
        notice = await self._run(stream, tools[0], focus)
        return notice or Notice("Nothing to compact yet.", Severity.INFO)

    def uncompact(self, stream: Stream) -> Notice:
        """Go back to the uncompacted branch (`/uncompact`)."""
        info = uncompact(stream.state())
        if info is None:
            return Notice("This thread is not compacted.", Severity.INFO)
        return Notice(
            f"Restored the {info.dropped_turn_count} summarised turns (the summary stays "
            "in the thread's history).",
            Severity.SUCCESS,
        )

    async def _auto(self, event: UserMessageEvent, stream: Stream) -> Notice | None:
        if not self.settings.enabled:
            return None
        tools = self._tools(stream)
        if tools is None:
            return None
        summariser, window = tools
        paused = self._paused.get(stream.id, 0)
        if paused:
            self._paused[stream.id] = paused - 1
            return None
        size = path_tokens(stream.turns()) + _message_tokens(event)
        if size > window * self.settings.threshold:
            self._warned.discard(stream.id)
            return await self._run(stream, summariser, "", auto=True)
        return self._warning(stream.id, size / window)

    def _warning(self, thread_id: str, share: float) -> Notice | None:
        """The notice, once per crossing, that the thread is past `warn_at` of the window."""
        warn_at = self.settings.warn_at
        if not warn_at or share <= warn_at:
            self._warned.discard(thread_id)  # below again (compacted): warn at the next crossing
            return None
        if thread_id in self._warned:
            return None
        self._warned.add(thread_id)
        return Notice(
            f"This thread fills ~{share:.0%} of the model's context window; at "
            f"{self.settings.threshold:.0%} its earlier conversation will be summarised "
            "(/compact [FOCUS] does it now).",
            Severity.WARN,
        )

    async def _run(
        self, stream: Stream, summariser: Summariser, focus: str, *, auto: bool = False
    ) -> Notice | None:
        thread = stream.state()
        cut = plan_cut(
            thread.turns(), keep_last=self.settings.keep_last, pin_first=self.settings.pin_first
        )
        if cut is None:
            return None
        dropped = estimate_tokens(cut.older)
        model = self.settings.model or stream.spec().name
        try:
            summary = await summariser(cut.older, summary_prompt(focus), model)
        except Exception as exc:
            return self._failed(stream, f"the summariser failed: {exc}", auto)
        if len(summary.encode()) // BYTES_PER_TOKEN >= dropped or not summary.strip():
            return self._failed(stream, "the summary was not shorter than the turns", auto)
        turn, info = store_compaction(thread, cut, summary, model=model, dropped_tokens=dropped)
        await stream.mark_boundary(turn.id, info.encode(), save=False)
        self._paused.pop(stream.id, None)
        log.info("compacted", thread_id=stream.id, turns=len(cut.older), tokens=dropped)
        return Notice(
            f"↳ earlier conversation summarised ({info.dropped_turn_count} turns, "
            f"~{dropped} → ~{info.summary_token_estimate} tokens; /uncompact restores them)",
            Severity.SUCCESS,
        )

    def _failed(self, stream: Stream, problem: str, auto: bool) -> Notice:
        log.warning("compaction failed", thread_id=stream.id, problem=problem)
        if auto:
            self._paused[stream.id] = self.settings.retry_after
        return Notice(
            f"Could not summarise the earlier conversation ({problem}); the whole thread is "
            f"kept. Next try after {self.settings.retry_after} messages, or /compact.",
            Severity.WARN,
        )

    def _tools(self, stream: Stream) -> tuple[Summariser, int] | None:
        """The summariser and the context window for `stream`, or None."""
        processor = stream.processor
        summariser = self.summariser or getattr(processor, "summarise", None)
        if summariser is None:
            return None
        window = self.settings.context_window
        if not window:
            ask: Callable[[str], int] | None = getattr(processor, "context_window", None)
            name = stream.spec().name or getattr(processor, "default_model", "")
            window = ask(name) if ask is not None else DEFAULT_CONTEXT_WINDOW
        return summariser, window

    def _just_compacted(self, stream: Stream) -> bool:
        info = boundary_info(stream.state())
        return info is not None and info.tip == stream.state().current_tip


def _tell_everyone(stream: Stream, notice: Notice | None) -> None:
    """Publish `notice` to the whole thread (provenance `app`: every bridged endpoint
    shows it), not only to the sender: the thread changed for all."""
    if notice is not None:
        content, severity = notice.content, notice.severity
        stream.publish(NoticeEvent(content=content, severity=severity, context=APP_CONTEXT))


def _message_tokens(event: UserMessageEvent) -> int:
    return len(event.content.encode()) // BYTES_PER_TOKEN + MESSAGE_OVERHEAD
