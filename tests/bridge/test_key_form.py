"""Endpoints checked against the installed conduit's declared `key_form` (issue 41)."""

from __future__ import annotations

import pytest

from ore_core.bridge.gateways import GatewayError, check_gateways
from ore_core.config import GatewaySettings
from ore_core.endpoint import Endpoint, EndpointError, KeyForm, parse_endpoint

KEYS = {"slack": "slack.thread", "telegram": "telegram.thread"}
FORMS = {
    "slack": KeyForm("ENTERPRISE:TEAM:CHANNEL:THREAD_TS", "-:T0123:C0123:1712.0001"),
    "telegram": KeyForm("CHAT:TOPIC:ROOT", "-1001234567890:0:0"),
}


def parse(text: str) -> Endpoint:
    return parse_endpoint(text, KEYS.get, FORMS.get)


def test_a_value_of_the_declared_form_is_the_conduit_s_conversation() -> None:
    assert parse("slack:-:T0123:C0123:1712.0001") == Endpoint(
        "slack", "slack.thread", "-:T0123:C0123:1712.0001"
    )


def test_a_value_of_another_form_is_refused_naming_the_expected_one() -> None:
    with pytest.raises(EndpointError) as caught:
        parse("slack:C0123/1712.0001")
    assert str(caught.value) == (
        "endpoint slack:C0123/1712.0001 is not a slack conversation: write "
        "slack:ENTERPRISE:TEAM:CHANNEL:THREAD_TS (e.g. slack:-:T0123:C0123:1712.0001), the "
        "slack conduit's slack.thread"
    )


def test_a_key_the_conduit_never_looks_up_is_refused_naming_the_one_it_does() -> None:
    with pytest.raises(EndpointError) as caught:
        parse("telegram:telegram.chat=-100123")
    assert str(caught.value) == (
        "endpoint telegram:telegram.chat=-100123: the telegram conduit looks conversations "
        "up by telegram.thread, never by telegram.chat: write telegram:CHAT:TOPIC:ROOT (e.g. "
        "telegram:-1001234567890:0:0), the telegram conduit's telegram.thread"
    )


def test_a_form_whose_example_does_not_match_it_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="not of the form"):
        KeyForm("CHAT:TOPIC:ROOT", "-100123")


def test_a_gateway_with_a_wrong_key_is_refused_with_its_name() -> None:
    gateway = GatewaySettings.model_validate(
        {
            "name": "support",
            "endpoints": [
                {"conduit": "slack", "key": "-:T0123:C0123:1712.0001"},
                {"conduit": "telegram", "key": "telegram.chat=-100123"},
            ],
        }
    )
    with pytest.raises(GatewayError, match=r"^gateway 'support': endpoint telegram:telegram\.chat"):
        check_gateways([gateway], KEYS.get, FORMS.get)
