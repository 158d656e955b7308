"""Telegram's reactions in ore's words: a `message_reaction` update, and the bot's own.

An update says, for one user and one message, the reactions before (`old_reaction`)
and after (`new_reaction`): the emoji only in the new list were added, those only in
the old one taken back, each a `Reaction` of its own (custom emoji and paid reactions
are not Unicode: skipped). The bot may set one reaction per message, and only one of
Telegram's reaction emoji (`ALLOWED`): the bot's reaction on a message is the last one
asked for, taking it back sets none, and another emoji is skipped with a log line
(`show`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ore_core.conduit import Inbound, Reaction

__all__ = ["ALLOWED", "TelegramReactions", "changes", "telegram_emoji"]

_REACTION_EMOJI = (
    "👨‍💻 🤷‍♂ 🤷‍♀ ❤‍🔥 👍 👎 ❤ 🔥 🥰 👏 😁 🤔 🤯 😱 🤬 😢 🎉 🤩 🤮 💩 🙏 👌 🕊 🤡 🥱 🥴 "
    "😍 🐳 🌚 🌭 💯 🤣 ⚡ 🍌 🏆 💔 🤨 😐 🍓 🍾 💋 🖕 😈 😴 😭 🤓 👻 👀 🎃 🙈 😇 😨 🤝 ✍ 🤗 🫡 "
    "🎅 🎄 ☃ 💅 🤪 🗿 🆒 💘 🙉 🦄 😘 💊 🙊 😎 👾 🤷 😡"
)
ALLOWED = frozenset(_REACTION_EMOJI.split())
"""The emoji a bot may react with (the Bot API's `ReactionTypeEmoji`)."""

_VARIATION = "\ufe0f"  # ❤️ and ❤ are one emoji; Telegram's list has them without it


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramReactions(Inbound):
    """One `message_reaction` update: its adds and removals, in that order."""

    reactions: tuple[Reaction, ...]


def telegram_emoji(emoji: str) -> str | None:
    """`emoji` as Telegram's reaction list spells it, None if a bot cannot react with it."""
    bare = emoji.replace(_VARIATION, "")
    return bare if bare in ALLOWED else None


def _emoji(reactions: Any) -> list[str]:
    if not isinstance(reactions, list):
        return []
    return [
        str(r["emoji"])
        for r in reactions
        if isinstance(r, Mapping) and r.get("type") == "emoji" and r.get("emoji")
    ]


def changes(update: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(added, taken back) emoji of a `message_reaction` update's body."""
    old, new = _emoji(update.get("old_reaction")), _emoji(update.get("new_reaction"))
    return [e for e in new if e not in old], [e for e in old if e not in new]
