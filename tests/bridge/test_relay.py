"""The SDK's relay rendering (issue 29): what an endpoint shows of a linked thread."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ore_core.artifacts.kinds import Text
from ore_core.conduit import Capabilities, Delivery, SettingsCache, ThreadSettings, classify
from ore_core.conduit.relay import Relayed, degrade, split_message
from ore_core.events import (
    ArtifactEvent,
    DeliveryEvent,
    EventContext,
    NoticeEvent,
    OutputEvent,
    PropertiesEvent,
    PropertyOperation,
    TurnCompleteEvent,
    TurnDeletedEvent,
)
from ore_core.turn import Role, Turn

LINKED = ThreadSettings.of_metadata(
    {"ore.gateway": "g", "ore.gateway.answer": "origin", "ore.gateway.label": "{name} ({conduit})"}
)


def delivery(event: OutputEvent) -> Delivery:
    return Delivery("t1", event, 7)


def user_turn(origin: str, text: str = "hi", **extra: str) -> Delivery:
    turn = Turn(
        id="u1", role=Role.USER, artifacts=(Text(content=text),), extra=tuple(extra.items())
    )
    return delivery(TurnCompleteEvent(turn=turn, context=EventContext(provenance=origin)))


def answer(origin: str) -> Delivery:
    return delivery(
        ArtifactEvent(artifact=Text(content="hello"), context=EventContext(provenance=origin))
    )


def test_the_endpoint_s_own_message_is_never_echoed() -> None:
    assert classify(user_turn("slack"), "slack", LINKED).action == "own"


def test_another_endpoint_s_message_is_shown_with_its_label() -> None:
    relayed = classify(user_turn("telegram", "hi all", sender="Ana"), "slack", LINKED)
    assert (relayed.action, relayed.shown, relayed.turn_id) == (
        "relayed",
        "Ana (telegram): hi all",
        "u1",
    )


def test_the_label_follows_the_thread_s_template() -> None:
    settings = LINKED.with_values({"ore.gateway.label": "<{name}@{conduit}>"})
    assert classify(user_turn("nats", sender="bo"), "slack", settings).label == "<bo@nats>"


def test_a_broken_label_template_falls_back_to_the_default() -> None:
    settings = LINKED.with_values({"ore.gateway.label": "{nick} says"})
    assert classify(user_turn("nats", sender="bo"), "slack", settings).label == "bo (nats)"


def test_a_sender_without_a_name_is_labelled_by_the_context_user_name() -> None:
    turn = Turn(id="u1", role=Role.USER, artifacts=(Text(content="x"),))
    context = EventContext(provenance="nats", user_name="Zoe")
    event = delivery(TurnCompleteEvent(turn=turn, context=context))
    assert classify(event, "slack", LINKED).label == "Zoe (nats)"


def test_own_answers_are_always_shown() -> None:
    assert classify(answer("slack"), "slack", LINKED).action == "answer"


def test_others_answers_are_hidden_when_the_origin_answers() -> None:
    assert classify(answer("telegram"), "slack", LINKED).action == "hidden"


def test_others_answers_are_shown_when_the_gateway_answers_all() -> None:
    settings = LINKED.with_values({"ore.gateway.answer": "all"})
    assert classify(answer("telegram"), "slack", settings).action == "answer"


def test_an_edit_from_another_endpoint_names_the_turn_it_replaces() -> None:
    relayed = classify(user_turn("telegram", edit_of="u0", sender="Ana"), "slack", LINKED)
    assert (relayed.action, relayed.edit_of) == ("edited", "u0")


def test_a_reply_names_the_turn_it_answers() -> None:
    assert classify(user_turn("telegram", reply_to="u0"), "slack", LINKED).reply_to == "u0"


def test_a_delete_from_another_endpoint_names_the_turn_to_delete() -> None:
    event = delivery(TurnDeletedEvent(turn="u1", context=EventContext(provenance="telegram")))
    assert classify(event, "slack", LINKED) == Relayed("deleted", "telegram", turn_id="u1")


def test_the_endpoint_s_own_delete_is_not_shown_again() -> None:
    event = delivery(TurnDeletedEvent(turn="u1", context=EventContext(provenance="slack")))
    assert classify(event, "slack", LINKED).action == "own"


def test_another_endpoint_s_delivery_status_is_shown() -> None:
    event = DeliveryEvent(
        turn="u1",
        endpoint="telegram",
        status="failed",
        detail="429",
        context=EventContext(provenance="telegram"),
    )
    relayed = classify(delivery(event), "slack", LINKED)
    assert (relayed.action, relayed.text) == ("delivery", "delivery to telegram failed: 429")


def test_another_sender_s_notice_is_hidden() -> None:
    event = delivery(NoticeEvent(content="x", context=EventContext(provenance="telegram")))
    assert classify(event, "slack", LINKED).action == "hidden"


def test_a_properties_event_feeds_the_settings_cache() -> None:
    cache = SettingsCache()
    cache.load("t1", {"ore.gateway.answer": "origin"})
    event = PropertiesEvent(
        operations=[PropertyOperation(op="set", key="ore.gateway.answer", value="all")]
    )
    assert classify(delivery(event), "slack", cache.get("t1")).action == "settings"
    assert cache.update("t1", event).answer == "all"


def test_a_deleted_setting_goes_back_to_its_default() -> None:
    event = PropertiesEvent(operations=[PropertyOperation(op="delete", key="ore.gateway.label")])
    settings = LINKED.with_values({"ore.gateway.label": "[{name}]"}).apply(event.operations or ())
    assert settings.label == "{name} ({conduit})"


def test_an_unknown_answer_setting_reads_as_origin() -> None:
    assert ThreadSettings.of_metadata({"ore.gateway.answer": "sometimes"}).answer == "origin"


def test_a_thread_never_loaded_has_the_default_settings() -> None:
    assert SettingsCache().get("t9") == ThreadSettings()


# -- degrade -------------------------------------------------------------------------


def test_an_edit_is_made_in_place_where_the_platform_edits() -> None:
    relayed = classify(user_turn("nats", "new", edit_of="u0", sender="bo"), "slack", LINKED)
    assert degrade(relayed, Capabilities(edit=True)) == ("edit", "bo (nats): new")


def test_an_edit_is_reposted_marked_edited_where_it_cannot() -> None:
    relayed = classify(user_turn("nats", "new", edit_of="u0", sender="bo"), "slack", LINKED)
    assert degrade(relayed, Capabilities()) == ("post", "bo (nats): new (edited)")


def test_a_reply_is_quoted_without_threads() -> None:
    relayed = classify(user_turn("nats", "yes", reply_to="u0", sender="bo"), "slack", LINKED)
    assert degrade(relayed, Capabilities(), quoted="tea?\nor coffee?") == (
        "post",
        "> tea?\n> or coffee?\nbo (nats): yes",
    )


def test_a_reply_is_not_quoted_where_the_platform_threads() -> None:
    relayed = classify(user_turn("nats", "yes", reply_to="u0", sender="bo"), "slack", LINKED)
    assert degrade(relayed, Capabilities(threads=True), quoted="tea?") == ("post", "bo (nats): yes")


# -- split_message ---------------------------------------------------------------------


def open_fence_after(piece: str) -> bool:
    """True if `piece` ends inside a code fence (a CommonMark-ish count of fence lines)."""
    from ore_core.conduit.relay import _after_line

    fence = None
    for line in piece.splitlines(keepends=True):
        fence = _after_line(fence, line)
    return fence is not None


def test_text_within_the_limit_is_one_piece() -> None:
    assert split_message("short", 100) == ["short"]


def test_empty_text_is_no_piece() -> None:
    assert split_message("", 100) == []


def test_a_too_small_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        split_message("x" * 40, 8)


def test_a_cut_inside_a_fence_closes_and_reopens_it() -> None:
    text = "intro\n```python\n" + "".join(f"x = {i}\n" for i in range(40)) + "```\nend"
    pieces = split_message(text, 80)
    assert len(pieces) > 1
    assert all(p.count("```") % 2 == 0 for p in pieces)
    assert all(p.startswith("```python\n") for p in pieces[1:])


lines = st.one_of(
    st.text(alphabet="abc xyz", max_size=60),
    st.sampled_from(["```", "```python", "~~~", "````", "    ```"]),
)
texts = st.lists(lines, max_size=40).map("\n".join)


@settings(deadline=None, max_examples=300)
@given(text=texts, limit=st.integers(min_value=16, max_value=200))
def test_every_piece_fits_the_limit(text: str, limit: int) -> None:
    assert all(len(piece) <= limit for piece in split_message(text, limit))


@settings(deadline=None, max_examples=300)
@given(text=texts, limit=st.integers(min_value=64, max_value=200))
def test_no_piece_but_the_last_ends_inside_a_fence(text: str, limit: int) -> None:
    pieces = split_message(text, limit)
    assert not any(open_fence_after(piece) for piece in pieces[:-1])


@settings(deadline=None, max_examples=300)
@given(text=texts, limit=st.integers(min_value=64, max_value=200))
def test_splitting_loses_and_adds_nothing_but_fence_lines(text: str, limit: int) -> None:
    def content(s: str) -> str:
        kept = [line for line in s.splitlines() if not line.lstrip().startswith(("```", "~~~"))]
        return "".join("".join(kept).split())

    assert content("".join(split_message(text, limit))) == content(text)


@settings(deadline=None, max_examples=300)
@given(text=st.text(max_size=600), limit=st.integers(min_value=16, max_value=200))
def test_text_without_fences_is_cut_without_a_change(text: str, limit: int) -> None:
    text = text.replace("`", "").replace("~", "")
    assert "".join(split_message(text, limit)) == text


def test_a_delivery_status_of_another_endpoint_s_message_is_hidden() -> None:
    event = DeliveryEvent(
        turn="u1",
        endpoint="telegram",
        status="failed",
        origin="web",
        context=EventContext(provenance="telegram"),
    )
    assert classify(delivery(event), "slack", LINKED).action == "hidden"
    assert classify(delivery(event), "web", LINKED).action == "delivery"
