"""The answer lane shows the stored answer, whatever the live events missed."""

from __future__ import annotations

from typing import cast

from ore_core.artifacts.kinds import Text, TextDelta
from ore_core.conduit.answering import AnswerLane, Outbound
from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.client import ConduitClient
from ore_core.conduit.conversations import Conversations
from ore_core.conduit.copies import Copies
from ore_core.conduit.feed import Delivery
from ore_core.conduit.pacing import Pacing
from ore_core.conduit.platform import Part, part_key
from ore_core.events import ArtifactEvent, EventContext, LifecycleEvent, TurnCompleteEvent
from ore_core.testing.scripted_platform import ScriptedPlatform
from ore_core.turn import Role, Turn

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONTEXT = EventContext(provenance="memo", traceparent=TRACE)


def lane_on(platform: ScriptedPlatform, *, streams: bool = True) -> AnswerLane:
    # The lane's own answers use the platform and the pacing only: the client behind
    # the conversations and the copy engine is never asked, so none is connected.
    out = Outbound(
        "memo",
        platform,
        Capabilities(edit=True, streaming=streams),
        Conversations(cast(ConduitClient, None), "memo.room"),
        cast(Copies, None),
        Pacing("memo"),
        stream_interval=0.0,
    )
    lane = AnswerLane("t-1", out)
    lane.conversation = "room-1"
    return lane


async def test_a_streamed_answer_shows_the_stored_text_when_its_live_text_never_came() -> None:
    # A core killed after it stored the answer but before its live `Text` went out
    # answers the redelivered message with `done` only: the stored turn is all the
    # conduit gets of the rest of the answer.
    platform = ScriptedPlatform()
    lane = lane_on(platform)
    user = Turn("u-1", Role.USER, (Text("hi"),), event_id="m-1")
    await lane.handle(Delivery("t-1", TurnCompleteEvent.of(user, CONTEXT), 3))
    delta = ArtifactEvent.of(TextDelta("answer "), CONTEXT)
    await lane.handle(Delivery("t-1", delta, None))
    await lane.tick()
    assert await platform.wait_for("room-1", 1) == ["answer "]

    answer = Turn("a-1", Role.ASSISTANT, (Text("answer to m-1"),), parent_id="u-1")
    await lane.handle(Delivery("t-1", TurnCompleteEvent.of(answer, CONTEXT), 4))
    await lane.handle(Delivery("t-1", LifecycleEvent(phase="done", context=CONTEXT), 4))
    assert list(platform.shown["room-1"].values()) == ["answer to m-1"]


def answered(text: str) -> TurnCompleteEvent:
    answer = Turn("a-1", Role.ASSISTANT, (Text(text),), parent_id="u-1")
    return TurnCompleteEvent.of(answer, CONTEXT)


USER = TurnCompleteEvent.of(Turn("u-1", Role.USER, (Text("hi"),), event_id="m-1"), CONTEXT)
DONE = LifecycleEvent(phase="done", context=CONTEXT)


async def test_a_conduit_restarted_after_the_answer_was_stored_finishes_the_message_it_began() -> (
    None
):
    # The run before the kill posted the first delta; the restarted conduit gets only
    # the stored events, and posts the answer under the same key: the platform knows the
    # key, so the message is edited to the whole answer, not posted twice.
    platform = ScriptedPlatform()
    await platform.post("room-1", Part("answer "), part_key(TRACE, 0))
    lane = lane_on(platform)
    for event in (USER, answered("answer to m-1"), DONE):
        await lane.handle(Delivery("t-1", event, 4))
    assert list(platform.shown["room-1"].values()) == ["answer to m-1"]


async def test_an_answer_shown_from_its_live_text_is_not_posted_again_by_its_stored_turn() -> None:
    platform = ScriptedPlatform()
    lane = lane_on(platform, streams=False)
    await lane.handle(Delivery("t-1", USER, 3))
    await lane.handle(Delivery("t-1", ArtifactEvent.of(Text("answer to m-1"), CONTEXT), None))
    await lane.handle(Delivery("t-1", answered("answer to m-1"), 4))
    await lane.handle(Delivery("t-1", DONE, 4))
    assert (list(platform.shown["room-1"].values()), platform.calls) == (["answer to m-1"], 1)


async def test_answers_stay_in_order_when_the_next_starts_before_the_last_one_s_live_end() -> None:
    # Under load the live end of an answer may be missed; the next answer's stream
    # starts first. The earlier one is shown at once, then finished from its turn.
    platform = ScriptedPlatform()
    lane = lane_on(platform)
    second = EventContext(provenance="memo", traceparent=TRACE[:3] + "1" + TRACE[4:])
    await lane.handle(Delivery("t-1", USER, 3))
    await lane.handle(Delivery("t-1", ArtifactEvent.of(TextDelta("answer "), CONTEXT), None))
    user_2 = Turn("u-2", Role.USER, (Text("again"),), event_id="m-2")
    await lane.handle(Delivery("t-1", TurnCompleteEvent.of(user_2, second), None))
    await lane.handle(Delivery("t-1", ArtifactEvent.of(TextDelta("second"), second), None))
    await lane.handle(Delivery("t-1", ArtifactEvent.of(Text("second"), second), None))
    await lane.handle(Delivery("t-1", answered("answer to m-1"), 4))
    await lane.handle(Delivery("t-1", DONE, 4))
    assert list(platform.shown["room-1"].values()) == ["answer to m-1", "second"]
