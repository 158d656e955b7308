"""Redaction: replace secrets in a message with `[REDACTED:<name>]` markers.

Each pattern has a name; the name (never the matched text) is what the marker and the
sender's notice show. Patterns are applied one after another in their given order, so
a structure that can contain other secrets (a private key block) goes first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_PATTERNS", "Redaction", "Redactor", "marker"]


def _token(head: str, body: str) -> str:
    """`head` then `body`, where `head` must start a token: "risk-assessment-..." holds
    no "sk-..." key. The check is a lookbehind placed after `head` so that the regex
    engine can still scan for the literal `head` (a leading lookbehind is ~30x slower)."""
    return f"{head}(?<![A-Za-z0-9_-]{head}){body}"


DEFAULT_PATTERNS: dict[str, str] = {
    # A block without its END line (a paste cut short) is redacted to the end of the text.
    "private_key": (
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----"
        r"(?s:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*)"
    ),
    "openai_key": _token("sk-", r"[A-Za-z0-9_-]{20,}"),
    "slack_token": _token("xox[bap]-", r"[A-Za-z0-9-]{10,}"),
    "aws_access_key_id": _token("(?:AKIA|ASIA)", r"[A-Z0-9]{16}"),
    "github_token": "|".join(
        (_token("gh[pousr]_", r"[A-Za-z0-9]{36,}"), _token("github_pat_", r"[A-Za-z0-9_]{22,}"))
    ),
}
"""The built-in patterns by name: OpenAI keys, Slack tokens, AWS access key ids,
GitHub tokens and PEM private keys."""


def marker(name: str) -> str:
    """What a match of pattern `name` is replaced with."""
    return f"[REDACTED:{name}]"


@dataclass(frozen=True, slots=True)
class Redaction:
    """The rewritten text and how many matches each pattern replaced (matching ones only)."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True when anything was redacted."""
        return bool(self.counts)


class Redactor:
    """Applies named, compiled patterns to text. Stateless after construction: share it."""

    def __init__(self, patterns: Mapping[str, re.Pattern[str]]) -> None:
        self.patterns = dict(patterns)

    def redact(self, text: str) -> Redaction:
        """`text` with every match replaced by its pattern's marker."""
        counts: dict[str, int] = {}
        for name, pattern in self.patterns.items():
            text, count = _substitute(pattern, marker(name), text)
            if count:
                counts[name] = count
        return Redaction(text, counts)


def _substitute(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """`pattern.subn` that leaves empty matches alone (a bare lookahead would otherwise
    put a marker between characters) and never reads `replacement` as a template."""
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        if not match.group():
            return ""
        count += 1
        return replacement

    return pattern.sub(replace, text), count
