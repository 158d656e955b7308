"""ore-conduit-telegram: Telegram chats <-> ore threads.

Run it with `ore conduit telegram`; configure it with the environment variable
TELEGRAM_BOT_TOKEN and the `[plugins.telegram]` table (see `TelegramConfig` and the
README). `ore_conduit_telegram.testing` has a fake Bot API server for tests.
"""

from ore_conduit_telegram.conduit import TelegramConduit
from ore_conduit_telegram.config import MissingToken, TelegramConfig
from ore_conduit_telegram.ids import Conversation, event_id, traceparent_of
from ore_conduit_telegram.text import split_text, to_html

__all__ = [
    "Conversation",
    "MissingToken",
    "TelegramConduit",
    "TelegramConfig",
    "event_id",
    "split_text",
    "to_html",
    "traceparent_of",
]
