"""The adapter contract's own rules (`ore_core.conduit.platform`): the idempotency key
every platform passes, and the failure classes the engine acts on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ore_core.conduit import Message, RateLimited, Refused, Sender, Transient, part_key


@settings(deadline=None)
@given(st.text(min_size=1, max_size=80), st.integers(min_value=0, max_value=500))
def test_a_part_key_fits_discords_nonce_and_is_the_same_in_every_process(
    turn: str, part: int
) -> None:
    key = part_key(turn, part)
    assert len(key) == 25
    assert key.isalnum()
    assert key == part_key(turn, part)


def test_parts_and_turns_get_different_keys() -> None:
    keys = {part_key(turn, part) for turn in ("t-1", "t-2", "t-1.1") for part in range(3)}
    assert len(keys) == 9


def test_each_failure_class_carries_the_reason_a_delivery_report_gives() -> None:
    assert Transient("502 bad gateway").reason == "platform_unavailable"
    limited = RateLimited("slow down", wait=2.5)
    assert (limited.reason, limited.wait) == ("rate_limited", 2.5)
    assert Refused("missing access", "refused_permission").reason == "refused_permission"


async def test_an_inbound_event_is_done_only_when_the_engine_says_so() -> None:
    confirmed: list[str] = []

    async def confirm() -> None:
        confirmed.append("offset 7")

    message = Message(
        conversation="c", platform_id="7", sender=Sender("ann"), text="hi", done=confirm
    )
    assert confirmed == []
    await message.done()
    assert confirmed == ["offset 7"]
    assert message == Message(conversation="c", platform_id="7", sender=Sender("ann"), text="hi")
