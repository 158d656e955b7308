"""Test helpers for the Telegram conduit, reusable by anyone testing against Telegram
offline: `FakeTelegram` is a local Bot API server on 127.0.0.1; `TelegramPlatform`
adapts it to ore's conduit conformance kit."""

from ore_conduit_telegram.testing.fake import FakeChat, FakeMessage, FakeTelegram, RecordedCall
from ore_conduit_telegram.testing.platform import TelegramPlatform

__all__ = ["FakeChat", "FakeMessage", "FakeTelegram", "RecordedCall", "TelegramPlatform"]
