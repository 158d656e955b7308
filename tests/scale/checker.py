"""The fault runs' checker, in Jepsen's terms: per thread, what became of every message.

A thread's messages are numbered 1..N (N: the last one whose publish JetStream
acknowledged); the answers are the numbers of the stored assistant answers in
`ORE_EVENTS`' order. Every sent number is exactly one of: ok (answered once),
duplicated (answered more than once), unanswered (its user turn was stored, no answer
ever was), lost (no trace of it: prefix, middle or postfix by where it lies among the
answered ones). Answers that were never sent are unexpected; an answer that comes
after a later number's is reordered.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields

__all__ = ["CLASSES", "Verdict", "check"]

CLASSES = (
    "ok",
    "lost_prefix",
    "lost_middle",
    "lost_postfix",
    "unexpected",
    "duplicated",
    "reordered",
    "unanswered",
)


@dataclass
class Verdict:
    """Counts per class, for one thread or summed over all."""

    ok: int = 0
    lost_prefix: int = 0
    lost_middle: int = 0
    lost_postfix: int = 0
    unexpected: int = 0
    duplicated: int = 0
    reordered: int = 0
    unanswered: int = 0

    @property
    def lost(self) -> int:
        return self.lost_prefix + self.lost_middle + self.lost_postfix

    @property
    def clean(self) -> bool:
        """Nothing but ok."""
        return all(getattr(self, f.name) == 0 for f in fields(self) if f.name != "ok")

    def __iadd__(self, other: Verdict) -> Verdict:
        for name in CLASSES:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def check_thread(sent: int, answers: list[int], recorded: Iterable[int]) -> Verdict:
    """The verdict of one thread: `sent` numbers, its `answers` in stream order, and the
    numbers whose user turn was stored (`recorded`)."""
    verdict = Verdict()
    valid = [n for n in answers if 1 <= n <= sent]
    verdict.unexpected = len(answers) - len(valid)
    counts = {n: valid.count(n) for n in set(valid)}
    verdict.ok = sum(1 for c in counts.values() if c == 1)
    verdict.duplicated = sum(c - 1 for c in counts.values())
    first_seen = list(dict.fromkeys(valid))
    verdict.reordered = sum(1 for a, b in itertools.pairwise(first_seen) if b < a)
    stored = set(recorded)
    low, high = (min(counts), max(counts)) if counts else (sent + 1, sent + 1)
    for n in range(1, sent + 1):
        if n in counts:
            continue
        if n in stored:
            verdict.unanswered += 1
        elif n < low:
            verdict.lost_prefix += 1
        elif n > high:
            verdict.lost_postfix += 1
        else:
            verdict.lost_middle += 1
    return verdict


def check(
    sent: Mapping[str, int],
    answers: Mapping[str, list[int]],
    recorded: Iterable[tuple[str, int]],
) -> tuple[Verdict, dict[str, Verdict]]:
    """The total and the per-thread verdicts of a run (threads that are not clean)."""
    stored: dict[str, set[int]] = {}
    for thread_id, n in recorded:
        stored.setdefault(thread_id, set()).add(n)
    total = Verdict()
    bad: dict[str, Verdict] = {}
    for thread_id in sorted(set(sent) | set(answers)):
        verdict = check_thread(
            sent.get(thread_id, 0), answers.get(thread_id, []), stored.get(thread_id, ())
        )
        total += verdict
        if not verdict.clean:
            bad[thread_id] = verdict
    return total, bad
