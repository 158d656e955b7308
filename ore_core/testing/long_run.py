"""LongRun and BurstRun: conversations on a fake platform while faults strike, counted.

`LongRun`: users in every conversation write `messages` messages each, the next once
the previous one is answered, all conversations at once. `BurstRun`: users write all
their messages at once, and wait for the answers. Faults (kill -9 of the conduit or of
`ore serve`, see `ConduitProcess` and `ServeProcess`; a rate limit the fake serves next)
strike when a given number of answers has been shown: the run is paced by work done,
never by the clock. Then what each conversation shows is counted against what was
sent: sent, answered, lost, doubled, out of order (conversations whose answers are not
in the order of their messages).

A package's test is its fake's calls: how a user says something, what the bot shows,
how to wait on the fake's changes, and its faults.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

__all__ = ["BurstRun", "Fault", "LongRun", "audit"]

Fault = tuple[int, Callable[[], Awaitable[None]]]
"""(answers shown first, the fault): it strikes once that many answers are shown."""


def audit(
    sent: dict[str, list[str]], shown: Callable[[str], list[str]], answer: Callable[[str], str]
) -> dict[str, int]:
    """What the conversations show (`shown(conversation)`: the bot's texts in order)
    against the messages `sent` to each, whose answers are `answer(text)`."""
    counts = {"sent": 0, "answered": 0, "lost": 0, "doubled": 0, "out_of_order": 0}
    for conversation, texts in sent.items():
        wanted = [answer(text) for text in texts]
        got = shown(conversation)
        counts["sent"] += len(wanted)
        counts["answered"] += sum(1 for w in wanted if w in got)
        counts["lost"] += sum(1 for w in wanted if w not in got)
        counts["doubled"] += sum(got.count(w) - 1 for w in wanted if w in got)
        counts["doubled"] += sum(1 for g in got if g not in wanted)  # what no one asked
        firsts = [got.index(w) for w in wanted if w in got]
        counts["out_of_order"] += firsts != sorted(firsts)
    return counts


@dataclass
class LongRun:
    """The load and its count (see the module docstring).

    `say(conversation, text)` writes as a user; `shown(conversation)` is what the bot
    shows there; `wait_until(predicate, within)` waits on the fake's changes;
    `answer(text)` is the core's answer to `text`.
    """

    say: Callable[[str, str], Awaitable[object]]
    shown: Callable[[str], list[str]]
    wait_until: Callable[[Callable[[], bool], float], Awaitable[None]]
    answer: Callable[[str], str]
    conversations: Sequence[str]
    messages: int
    patience: float = 60.0  # seconds any one wait may take on a loaded machine
    sent: dict[str, list[str]] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)

    def answered(self) -> int:
        """Messages whose answer is shown so far."""
        total = 0
        for conversation, texts in self.sent.items():
            shown = set(self.shown(conversation))
            total += sum(1 for text in texts if self.answer(text) in shown)
        return total

    def _shows(self, conversation: str, text: str) -> bool:
        return self.answer(text) in self.shown(conversation)

    def _answered_more_than(self, count: int) -> bool:
        return self.answered() > count

    async def _progress_to(self, count: int) -> None:
        """Until `count` answers are shown; TimeoutError when none more is shown within
        `patience` (a loaded machine is slow, a stuck run shows nothing new)."""
        while (shown := self.answered()) < count:
            await self.wait_until(partial(self._answered_more_than, shown), self.patience)

    def differences(self) -> dict[str, list[str]]:
        """What each conversation shows where it is not exactly the answers, in order."""
        return {
            conversation: got
            for conversation, texts in self.sent.items()
            if (got := self.shown(conversation)) != [self.answer(text) for text in texts]
        }

    def counts(self) -> dict[str, int]:
        """The audit of what the conversations show now (see `audit`)."""
        return audit(self.sent, self.shown, self.answer)

    @staticmethod
    def text(number: int, message: int) -> str:
        """What the users of conversation `number` write as their `message`th message."""
        return f"c{number} m{message}"

    async def _converse(self, number: int, conversation: str) -> None:
        texts = self.sent.setdefault(conversation, [])
        for message in range(self.messages):
            text = self.text(number, message)
            texts.append(text)
            await self.say(conversation, text)
            try:
                await self.wait_until(partial(self._shows, conversation, text), self.patience)
            except TimeoutError:
                self.unanswered.append(text)
                return

    async def run(self, faults: Sequence[Fault] = ()) -> dict[str, int]:
        """Run the load, striking each fault at its count; the audit's counts."""
        load = asyncio.gather(*(self._converse(n, c) for n, c in enumerate(self.conversations)))
        try:
            for after, fault in faults:
                await self._progress_to(after)
                await fault()
            await load
        finally:
            if not load.done():
                load.cancel()
                await asyncio.gather(load, return_exceptions=True)
        return self.counts()


@dataclass
class BurstRun(LongRun):
    """A burst: each conversation's `messages` written at once, then their answers
    awaited in order, each within `patience` (`unanswered`: those not shown then)."""

    async def _converse(self, number: int, conversation: str) -> None:
        texts = self.sent.setdefault(conversation, [])
        for message in range(self.messages):
            text = self.text(number, message)
            texts.append(text)
            await self.say(conversation, text)
        for text in texts:
            try:
                await self.wait_until(partial(self._shows, conversation, text), self.patience)
            except TimeoutError:
                self.unanswered += [t for t in texts if not self._shows(conversation, t)]
                return
