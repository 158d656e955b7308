"""The warning before an automatic compaction (`compaction.warn_at`): said to the thread
once when it crosses the share, not on every message, and again after a compaction
brought it back below. Real Manager, store and compactor; sizes are the estimate."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ore_core import Manager, NoticeEvent
from ore_core.config import CompactionSettings
from ore_core.session.compactor import Compactor
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.turn import Turn
from tests.config_errors import assert_settings_error
from tests.session.support import message

WARNED = "of the model's context window"
COMPACTED = "earlier conversation summarised"


async def summarise(turns: Sequence[Turn], prompt: str, model: str) -> str:
    return "s"


async def notices_of(messages: int, **settings: object) -> list[str]:
    """The notices the thread is told while `messages` messages are answered."""
    compaction = CompactionSettings(
        **{"context_window": 1_000, "keep_last": 2, "pin_first": False, **settings}  # type: ignore[arg-type]
    )
    compactor = Compactor(compaction, summarise)
    async with Manager(MemoryStore(), EchoProcessor(), interceptors=[compactor]) as manager:
        stream = await manager.create()
        async with stream.subscribe("notice") as subscription:
            for number in range(messages):
                await stream.process(message(f"message {number} " + "x" * 80))
            told = []
            while (event := subscription.get_nowait()) is not None:
                assert isinstance(event, NoticeEvent)
                told.append(event.content)
    return told


def kinds(told: list[str]) -> list[str]:
    return ["warned" if WARNED in text else "compacted" for text in told]


async def test_the_warning_is_said_once_before_each_automatic_compaction() -> None:
    told = await notices_of(40, warn_at=0.5)
    assert kinds(told)[:4] == ["warned", "compacted", "warned", "compacted"]
    assert all(a != b for a, b in zip(kinds(told), kinds(told)[1:], strict=False))


async def test_no_warning_without_warn_at() -> None:
    assert set(kinds(await notices_of(40))) == {"compacted"}


def test_warn_at_not_below_the_threshold_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    says = "compaction.warn_at = '0.9' (from ORE_COMPACTION__WARN_AT): must be below compaction"
    assert_settings_error(monkeypatch, "ORE_COMPACTION__WARN_AT", "0.9", f"{says}.threshold (0.8)")
