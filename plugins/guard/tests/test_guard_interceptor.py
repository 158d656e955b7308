"""GuardInterceptor end to end: a real Manager, MemoryStore and scripted processor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING

import pytest

from ore_core import (
    EventContext,
    InterruptEvent,
    Manager,
    NoticeEvent,
    Severity,
    Stream,
    Text,
    Turn,
    TurnContext,
    UserMessageEvent,
)
from ore_core.session.slash import default_commands
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from ore_guard import GuardConfig, GuardInterceptor

if TYPE_CHECKING:
    from conftest import FakeClock

OPENAI_KEY = "sk-proj-" + "Zx9" * 16
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


class RecordingProcessor:
    """Answers "ok" (a real ScriptedProcessor) and keeps what each turn showed the model."""

    def __init__(self) -> None:
        self.scripted = ScriptedProcessor(["ok"])
        self.messages: list[str] = []
        self.histories: list[list[str]] = []

    async def __call__(self, ctx: TurnContext) -> None:
        self.messages.append(ctx.event.content)
        self.histories.append(texts(ctx.turns()))
        await self.scripted(ctx)


def texts(turns: Iterable[Turn]) -> list[str]:
    """The text of every Text artifact of `turns`, in order."""
    return [a.content for turn in turns for a in turn.artifacts if isinstance(a, Text)]


def message(text: str, user: str = "", provenance: str = "slack") -> UserMessageEvent:
    """A user message from `provenance`, written by `user` (none: an anonymous sender)."""
    return UserMessageEvent(content=text, context=EventContext(provenance=provenance, user=user))


@pytest.fixture
def processor() -> RecordingProcessor:
    return RecordingProcessor()


@pytest.fixture
def start(clock: FakeClock, processor: RecordingProcessor) -> Callable[..., Manager]:
    """`start(**settings)`: a Manager whose only interceptor is a guard with `settings`
    (burst 3 and 10 per minute unless given); use it as `async with start(...) as manager`."""

    def build(**settings: object) -> Manager:
        defaults = {"burst": 3, "rate": 10}
        guard = GuardInterceptor(GuardConfig.load({**defaults, **settings}), clock=clock)
        return Manager(MemoryStore(), processor, interceptors=[guard])

    return build


@pytest.fixture
async def manager(start: Callable[..., Manager]) -> AsyncIterator[Manager]:
    async with start() as m:
        yield m


async def send(stream: Stream, text: str, user: str = "alice") -> list[NoticeEvent]:
    """Process one message from `user` and return the notices it caused."""
    found: list[NoticeEvent] = []
    async with stream.subscribe("notice") as subscription:
        await stream.process(message(text, user))
        while (event := subscription.get_nowait()) is not None:
            assert isinstance(event, NoticeEvent)
            found.append(event)
    return found


# -- redaction -----------------------------------------------------------------------


async def test_a_secret_never_reaches_the_processor(
    manager: Manager, processor: RecordingProcessor
) -> None:
    stream = await manager.create()
    await send(stream, f"my key is {OPENAI_KEY}, why does it fail?")
    assert processor.messages == ["my key is [REDACTED:openai_key], why does it fail?"]
    assert OPENAI_KEY not in str(processor.histories)


async def test_a_secret_never_reaches_the_store(manager: Manager) -> None:
    stream = await manager.create()
    await send(stream, f"creds: {AWS_KEY}")
    stored = await manager.store.get(stream.id)
    assert texts(stored.all_turns()) == ["creds: [REDACTED:aws_access_key_id]", "ok"]


async def test_the_sender_is_told_what_was_redacted_but_not_the_secret(manager: Manager) -> None:
    stream = await manager.create()
    [notice] = await send(stream, f"{OPENAI_KEY} and {AWS_KEY}")
    assert notice.severity == Severity.INFO
    assert "openai_key" in notice.content
    assert "aws_access_key_id" in notice.content
    assert OPENAI_KEY not in notice.content
    assert AWS_KEY not in notice.content


async def test_the_notice_carries_the_context_of_the_message(manager: Manager) -> None:
    stream = await manager.create()
    async with stream.subscribe("notice") as subscription:
        sent = message(f"key {AWS_KEY}", "alice", provenance="telegram")
        await stream.process(sent)
        notice = subscription.get_nowait()
    assert isinstance(notice, NoticeEvent)
    assert notice.context == sent.context


async def test_a_message_without_secrets_passes_unchanged_and_silently(
    manager: Manager, processor: RecordingProcessor
) -> None:
    stream = await manager.create()
    assert await send(stream, "what is the capital of France?") == []
    assert processor.messages == ["what is the capital of France?"]


async def test_redaction_happens_before_slash_commands_see_the_message(
    clock: FakeClock, processor: RecordingProcessor
) -> None:
    guard = GuardInterceptor(GuardConfig(), clock=clock)
    commands = default_commands()  # order 0: after the guard even when listed first
    async with Manager(MemoryStore(), processor, interceptors=[commands, guard]) as manager:
        stream = await manager.create()
        await send(stream, f"/meta api_key {OPENAI_KEY}")
        assert stream.get_metadata("api_key") == "[REDACTED:openai_key]"


async def test_redact_false_leaves_secrets_alone(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(redact=False) as manager:
        stream = await manager.create()
        await send(stream, f"key {AWS_KEY}")
    assert processor.messages == [f"key {AWS_KEY}"]


# -- rate limiting ---------------------------------------------------------------------


async def test_the_fourth_message_of_a_burst_of_three_is_consumed_with_a_warning(
    manager: Manager, processor: RecordingProcessor
) -> None:
    stream = await manager.create()
    for n in range(3):
        assert await send(stream, f"message {n}") == []
    [notice] = await send(stream, "message 3")
    assert notice.severity == Severity.WARN
    assert "Try again in 6 s" in notice.content  # 10 per 60 s: a token every 6 s
    assert processor.messages == ["message 0", "message 1", "message 2"]


async def test_a_consumed_message_stores_nothing(manager: Manager) -> None:
    stream = await manager.create()
    for n in range(4):
        await send(stream, f"message {n}")
    stored = await manager.store.get(stream.id)
    assert "message 3" not in texts(stored.all_turns())
    assert len(stored.all_turns()) == 6


async def test_the_sender_may_write_again_after_the_announced_wait(
    manager: Manager, processor: RecordingProcessor, clock: FakeClock
) -> None:
    stream = await manager.create()
    for n in range(4):
        await send(stream, f"message {n}")
    clock.advance(6)
    assert await send(stream, "message 4") == []
    assert processor.messages[-1] == "message 4"


async def test_different_users_have_separate_buckets(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(burst=1) as manager:
        stream = await manager.create()
        await send(stream, "alice 1", user="alice")
        assert await send(stream, "bob 1", user="bob") == []
        [refused] = await send(stream, "alice 2", user="alice")
    assert refused.severity == Severity.WARN
    assert processor.messages == ["alice 1", "bob 1"]


async def test_one_user_name_on_two_conduits_is_two_senders(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(burst=1) as manager:
        stream = await manager.create()
        for conduit in ("slack", "telegram"):
            await stream.process(message(f"from {conduit}", "alice", provenance=conduit))
    assert processor.messages == ["from slack", "from telegram"]


async def test_anonymous_senders_are_limited_per_thread(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(thread_burst=1) as manager:
        first, second = await manager.create(), await manager.create()
        await send(first, "first 1", user="")
        await send(second, "second 1", user="")
        await send(first, "first 2", user="")
    assert processor.messages == ["first 1", "second 1"]


async def test_interrupts_pass_through_and_take_no_token(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(burst=1) as manager:
        stream = await manager.create()
        await stream.process(InterruptEvent(context=message("", "alice").context))
        await send(stream, "after the interrupt")
    assert processor.messages == ["after the interrupt"]


async def test_rate_limit_false_lets_every_message_through(
    start: Callable[..., Manager], processor: RecordingProcessor
) -> None:
    async with start(burst=1, rate_limit=False) as manager:
        stream = await manager.create()
        for n in range(5):
            await send(stream, f"message {n}")
    assert len(processor.messages) == 5


# -- the defaults ----------------------------------------------------------------------


async def send_quickly(stream: Stream, count: int, user: str) -> list[list[NoticeEvent]]:
    """`count` messages at the same instant (the fake clock never moves)."""
    return [await send(stream, f"message {n}", user=user) for n in range(count)]


async def test_by_default_a_person_may_send_twenty_quick_messages(
    clock: FakeClock, processor: RecordingProcessor
) -> None:
    guard = GuardInterceptor(clock=clock)
    async with Manager(MemoryStore(), processor, interceptors=[guard]) as manager:
        notices = await send_quickly(await manager.create(), 21, user="alice")
    assert notices[:20] == [[]] * 20
    assert "60 per 60 s, 20 at once" in notices[20][0].content


async def test_by_default_a_thread_without_users_may_take_forty_quick_messages(
    clock: FakeClock, processor: RecordingProcessor
) -> None:
    guard = GuardInterceptor(clock=clock)
    async with Manager(MemoryStore(), processor, interceptors=[guard]) as manager:
        notices = await send_quickly(await manager.create(), 41, user="")
    assert notices[:40] == [[]] * 40
    assert "120 per 60 s, 40 at once" in notices[40][0].content


async def test_by_default_a_person_gets_a_message_a_second_after_the_burst(
    clock: FakeClock, processor: RecordingProcessor
) -> None:
    guard = GuardInterceptor(clock=clock)
    async with Manager(MemoryStore(), processor, interceptors=[guard]) as manager:
        stream = await manager.create()
        await send_quickly(stream, 21, user="alice")
        clock.advance(1)
        assert await send(stream, "one second later", user="alice") == []
