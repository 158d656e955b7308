"""Slack's reactions in ore's words: a reaction's short name and the emoji it stands for.

Slack names a reaction by its short name (`+1`, `tada`, a workspace's own `party_parrot`),
other endpoints by the Unicode emoji. A name the `emoji` library knows (Slack's names are
the common aliases) becomes its emoji, a skin tone dropped (`+1::skin-tone-2` is 👍);
any other name, a custom emoji, travels as `:name:`, which comes back to Slack as the
same name. An emoji going to Slack becomes its alias, and Slack refuses what it does
not know (logged by the engine, nothing else lost).
"""

from __future__ import annotations

import emoji as emoji_names

__all__ = ["REACTION_EVENTS", "THREAD_OF_ITEM", "emoji_of", "name_of"]

REACTION_EVENTS = frozenset({"reaction_added", "reaction_removed"})
THREAD_OF_ITEM = "ore_thread_ts"
"""Where the conduit writes, into a reaction's event body before it is kept in the
inbox, the `thread_ts` of the reacted message (Slack's event names only its `ts`)."""

_OVERRIDES = {"🤔": "thinking_face"}  # where Slack's name is not the library's first alias


def emoji_of(name: str) -> str:
    """The emoji of Slack's reaction `name`, or `:name:` for one that is not Unicode's."""
    base = name.split("::", 1)[0]
    shown = emoji_names.emojize(f":{base}:", language="alias")
    return shown if emoji_names.is_emoji(shown) else f":{name}:"


def name_of(emoji: str) -> str:
    """Slack's short name of `emoji` (`:name:` as it came from Slack: `name`)."""
    if emoji in _OVERRIDES:
        return _OVERRIDES[emoji]
    if emoji_names.is_emoji(emoji):
        return emoji_names.demojize(emoji, language="alias").strip(":")
    return emoji.strip(":")
