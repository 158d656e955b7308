"""The platform engine (issue 36): a scripted platform (`ore_core.testing.scripted_platform`)
run as a conduit against a real core on a real nats-server, and the pacing of its calls."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from types import ModuleType

import pytest

from ore_core.conduit import (
    Capabilities,
    ConduitClient,
    ConduitConfig,
    ControlClient,
    Delivery,
    Engine,
    Lane,
    Message,
    Platform,
    PlatformConduit,
    RateLimited,
    Refused,
    Sender,
    Transient,
)
from ore_core.conduit.answering import AnswerLane, Outbound
from ore_core.conduit.pacing import Pacing
from ore_core.events import DeliveryEvent, decode_output
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform, conduit_for
from tests.paths import DOCS

THREAD = "shared-1"
ROOM = "room-1"
TIMEOUT = 30.0


async def linked(core: ConduitCore, *, reaction_lines: bool | None = None) -> ConduitClient:
    """THREAD, made by namespace `web`, linked to the scripted conduit's ROOM; web's client."""
    web = core.client_for("web")
    await web.create_thread(THREAD)
    endpoint = {"namespace": "memo", "key": "memo.room", "value": ROOM}
    body: dict[str, object] = {"thread": THREAD, "endpoint": endpoint}
    if reaction_lines is not None:
        body["reaction_lines"] = reaction_lines
    await ControlClient.beside(core.client).call("links.add", body)
    return web


async def delivery_report(web: ConduitClient, text: str) -> DeliveryEvent:
    """Send `text` from web; the first delivery status the scripted endpoint reports."""
    async with web.events(THREAD, kinds={"delivery"}) as feed:
        await web.send(THREAD, text, user_name="Ana")
        async for delivery in feed:
            assert isinstance(delivery.event, DeliveryEvent)
            return delivery.event
    raise AssertionError("the feed ended")


async def start(
    ore_start_conduit: StartConduit,
    platform: ScriptedPlatform,
    conduit: type[PlatformConduit] | None = None,
) -> None:
    """The scripted conduit (or `conduit`, made for `platform`), running and listening."""
    await ore_start_conduit(conduit or conduit_for(platform), {})
    await asyncio.wait_for(platform.connected.wait(), TIMEOUT)


async def relaying(
    core: ConduitCore,
    ore_start_conduit: StartConduit,
    platform: ScriptedPlatform | None = None,
    *,
    reaction_lines: bool | None = None,
) -> tuple[ConduitClient, ScriptedPlatform]:
    """THREAD linked to ROOM and the scripted conduit running on `platform` (a new one
    unless given); web's client and the platform."""
    web = await linked(core, reaction_lines=reaction_lines)
    platform = platform or ScriptedPlatform()
    await start(ore_start_conduit, platform)
    return web, platform


async def copied(web: ConduitClient, platform: ScriptedPlatform, text: str) -> None:
    """Ana's `text` (id w-1) sent from web, until its copy is shown on ROOM."""
    await web.send(THREAD, text, id="w-1", user_name="Ana")
    await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT)


async def answered_hi(ore_start_conduit: StartConduit) -> ScriptedPlatform:
    """The scripted conduit running, once Ana's "hi" (p-1) on ROOM is answered there."""
    platform = ScriptedPlatform()
    await start(ore_start_conduit, platform)
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi"))
    assert await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT) == ["echo: hi"]
    return platform


# -- inbound -------------------------------------------------------------------------


async def test_an_inbound_message_is_confirmed_only_once_the_core_stored_it(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ScriptedPlatform()
    await start(ore_start_conduit, platform)
    held_when_confirmed: list[bool] = []
    confirmed = asyncio.Event()

    async def done() -> None:
        thread_id, _ = await ore_conduit_core.client_for("memo").lookup_or_create("memo.room", ROOM)
        turns = await ore_conduit_core.client_for("memo").turns(thread_id)
        held_when_confirmed.append(any(t.event_id == "p-1" for t in turns))
        confirmed.set()

    platform.receive(
        Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi", done=done)
    )
    await asyncio.wait_for(confirmed.wait(), TIMEOUT)
    assert held_when_confirmed == [True]


async def test_an_answer_replies_to_the_message_it_answers(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = await answered_hi(ore_start_conduit)
    (answer,) = platform.parts.values()
    assert answer.reply_to == "p-1"


async def test_a_conduit_s_own_lane_shows_its_threads_output(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ScriptedPlatform()
    seen: list[str] = []
    answered = asyncio.Event()

    class Recording(AnswerLane):
        async def handle(self, delivery: Delivery) -> None:
            seen.append(delivery.kind)
            if delivery.kind == "lifecycle" and getattr(delivery.event, "phase", "") == "done":
                answered.set()

    class OwnLane(conduit_for(platform)):  # type: ignore[misc]
        def lane(self, engine: Engine, thread_id: str, outbound: Outbound) -> Lane:
            return Recording(thread_id, outbound)

    await ore_start_conduit(OwnLane, {})
    await asyncio.wait_for(platform.connected.wait(), TIMEOUT)
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi"))
    await asyncio.wait_for(answered.wait(), TIMEOUT)
    assert "text" in seen
    assert platform.shown[ROOM] == {}  # the lane showed nothing: the engine's did not run


async def test_a_copy_s_deadline_comes_from_the_conduit_s_settings(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web = await linked(ore_conduit_core)
    platform = ScriptedPlatform()
    platform.fail(ROOM, RateLimited("429", 5))  # within copy_deadline, past copy_patience

    class Impatient(conduit_for(platform)):  # type: ignore[misc]
        def copy_patience(self, config: ConduitConfig) -> float:
            return 0.0

    await start(ore_start_conduit, platform, Impatient)
    report = await asyncio.wait_for(delivery_report(web, "hi"), TIMEOUT)
    assert (report.status, report.reason) == ("failed", "rate_limited")


# -- relayed copies ------------------------------------------------------------------


async def test_a_copy_the_platform_refuses_is_reported_failed_with_its_reason(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ScriptedPlatform()
    platform.fail(ROOM, Refused("403 missing access", "refused_permission"))
    web, _ = await relaying(ore_conduit_core, ore_start_conduit, platform)
    report = await asyncio.wait_for(delivery_report(web, "hi"), TIMEOUT)
    assert (report.status, report.reason, report.detail) == (
        "failed",
        "refused_permission",
        "403 missing access",
    )
    assert platform.calls == 1  # never tried again


async def test_a_rate_limited_copy_is_reported_retrying_once_then_delivered(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ScriptedPlatform()
    platform.fail(ROOM, RateLimited("429", 0.01), RateLimited("429", 0.01))
    web, _ = await relaying(ore_conduit_core, ore_start_conduit, platform)
    report = await asyncio.wait_for(delivery_report(web, "hi"), TIMEOUT)
    assert (report.status, report.reason) == ("retrying", "rate_limited")
    assert await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT) == ["Ana (web): hi"]
    assert platform.calls == 3


async def test_an_edit_on_another_endpoint_edits_the_copy_in_place(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web, platform = await relaying(ore_conduit_core, ore_start_conduit)
    await copied(web, platform, "helo")
    await web.edit(THREAD, "w-1", "hello", answer=False, user_name="Ana")
    async with platform.changed:
        await asyncio.wait_for(
            platform.changed.wait_for(lambda: "Ana (web): hello" in platform.shown[ROOM].values()),
            TIMEOUT,
        )
    assert list(platform.shown[ROOM].values()) == ["Ana (web): hello"]


async def test_a_delete_on_another_endpoint_deletes_the_copy(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web, platform = await relaying(ore_conduit_core, ore_start_conduit)
    await copied(web, platform, "oops")
    await web.delete(THREAD, "w-1")
    async with platform.changed:
        await asyncio.wait_for(platform.changed.wait_for(lambda: not platform.shown[ROOM]), TIMEOUT)


async def test_a_conduit_s_settings_may_lower_the_longest_message_its_copies_are_split_at(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web = await linked(ore_conduit_core)
    platform = ScriptedPlatform()
    short = platform.capabilities.model_copy(update={"max_message_length": 64})

    class Short(conduit_for(platform)):  # type: ignore[misc,valid-type]
        def platform_capabilities(self, adapter: Platform, config: ConduitConfig) -> Capabilities:
            return short

    await start(ore_start_conduit, platform, Short)
    await web.send(THREAD, "word " * 40, user_name="Ana")  # 200 characters and the label
    shown = await asyncio.wait_for(platform.wait_for(ROOM, 4), TIMEOUT)
    assert all(len(text) <= 64 for text in shown)


async def test_a_conduit_may_give_each_thread_a_lane_of_its_own(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web = await linked(ore_conduit_core)
    platform = ScriptedPlatform()
    seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    class Recording:
        def __init__(self, thread_id: str) -> None:
            self.thread_id = thread_id

        async def open(self) -> None:
            return None

        async def handle(self, delivery: Delivery) -> None:
            seen.put_nowait((self.thread_id, delivery.event.kind))

        def busy(self) -> bool:
            return False

        def due(self) -> float | None:
            return None

        async def tick(self) -> None:
            return None

    class Own(conduit_for(platform)):  # type: ignore[misc,valid-type]
        def lane(self, engine: Engine, thread_id: str, outbound: Outbound) -> Lane:
            return Recording(thread_id)

    await ore_start_conduit(Own, {})
    await asyncio.wait_for(platform.connected.wait(), TIMEOUT)
    await web.send(THREAD, "hi", user_name="Ana")
    thread, kind = await asyncio.wait_for(seen.get(), TIMEOUT)
    while kind != "turn_complete":  # the message's own turn, after its lifecycle events
        thread, kind = await asyncio.wait_for(seen.get(), TIMEOUT)
    assert thread == THREAD
    assert platform.calls == 0  # the lane showed nothing: the engine's lane was not used


async def test_a_conduit_may_connect_its_platform_before_the_core_is_there(
    ore_conduit_core: ConduitCore,
) -> None:
    platform = ScriptedPlatform()

    class Early(conduit_for(platform)):  # type: ignore[misc,valid-type]
        connect_first = True

    await ore_conduit_core.service.stop(grace=0)  # the feed waits for the core
    client = await ConduitClient.connect(ore_conduit_core.nats_url, name="memo")
    run = asyncio.create_task(Early().run(client, Early.load_config({})))
    try:
        await asyncio.wait_for(platform.connected.wait(), TIMEOUT)
    finally:
        run.cancel()
        await asyncio.wait([run])
        await client.close()


# -- pacing --------------------------------------------------------------------------


async def test_a_rate_limit_pauses_its_conversation_only() -> None:
    pacing = Pacing("memo")
    limited = asyncio.Event()
    tries: list[str] = []

    async def in_a() -> str:
        tries.append("a")
        if len(tries) == 1:
            limited.set()
            raise RateLimited("429", 3600)
        return "a"

    loop = asyncio.get_running_loop()
    a = asyncio.create_task(pacing.call("A", in_a, deadline=loop.time() + 7200))
    await limited.wait()
    assert await pacing.call("B", _answer("b"), deadline=loop.time() + 10) == "b"
    assert pacing.paused("A") > 3500  # the whole wait asked, for A alone
    assert pacing.paused("B") == 0
    a.cancel()


async def test_a_rate_limited_call_is_tried_again_after_exactly_its_wait() -> None:
    pacing = Pacing("memo")
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def call() -> str:
        times.append(loop.time())
        if len(times) == 1:
            raise RateLimited("429", 0.05)
        return "ok"

    assert await pacing.call("A", call, deadline=loop.time() + 10) == "ok"
    assert times[1] - times[0] >= 0.05


async def test_a_transient_failure_is_tried_again_until_it_passes() -> None:
    pacing = Pacing("memo")
    failures = [Transient("503"), Transient("reset")]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    loop = asyncio.get_running_loop()
    assert await pacing.call("A", call, deadline=loop.time() + 10) == "ok"
    assert failures == []


async def test_a_refusal_is_raised_at_once() -> None:
    pacing = Pacing("memo")
    tries = 0

    async def call() -> str:
        nonlocal tries
        tries += 1
        raise Refused("too large", "refused_too_large")

    loop = asyncio.get_running_loop()
    with pytest.raises(Refused, match="too large"):
        await pacing.call("A", call, deadline=loop.time() + 10)
    assert tries == 1


def test_a_delivery_event_stored_before_reasons_still_decodes() -> None:
    old = b'{"kind":"delivery","turn":"t1","endpoint":"slack","status":"failed","detail":"x"}'
    event = decode_output(old)
    assert isinstance(event, DeliveryEvent)
    assert (event.status, event.reason) == ("failed", "")


def _answer(value: str) -> Callable[[], Awaitable[str]]:
    async def call() -> str:
        return value

    return call


def test_the_adapter_example_of_writing_a_conduit_is_a_platform_conduit() -> None:
    page = (DOCS / "writing-a-conduit.md").read_text("utf-8")
    match = re.search(r'```python\n("""ore_echo_room.*?)```', page, re.DOTALL)
    assert match is not None, "writing-a-conduit.md must show the adapter example"
    module = ModuleType("ore_echo_room_example")
    exec(compile(match.group(1), "writing-a-conduit.md", "exec"), module.__dict__)
    conduit = module.EchoRoomConduit
    assert issubclass(conduit, PlatformConduit)
    adapter = conduit().platform(conduit.load_config({"token": "t"}), None)
    for method in ("connect", "close", "events", "post", "edit", "delete"):
        assert callable(getattr(adapter, method))
    assert isinstance(adapter.capabilities, Capabilities)
