"""Endpoints: `NS:VALUE` / `NS:KEY=VALUE` parsed and validated (docs/design/bridging.md)."""

from __future__ import annotations

import pytest

from ore_core.endpoint import (
    MAX_KEY_LENGTH,
    MAX_VALUE_LENGTH,
    Endpoint,
    EndpointError,
    parse_endpoint,
)

KEYS = {"slack": "slack.thread", "stdin": "id"}


def parse(text: str) -> Endpoint:
    return parse_endpoint(text, KEYS.get)


def test_the_short_form_takes_the_conduit_s_conversation_key() -> None:
    assert parse("slack:C0123/1712.0001") == Endpoint("slack", "slack.thread", "C0123/1712.0001")


def test_the_full_form_names_the_key() -> None:
    assert parse("slack:slack.channel=C9") == Endpoint("slack", "slack.channel", "C9")


def test_the_full_form_works_for_a_conduit_that_is_not_installed() -> None:
    assert parse("web:web.thread=abc") == Endpoint("web", "web.thread", "abc")


def test_the_terminal_s_endpoint_is_the_thread_id() -> None:
    assert parse("stdin:3fa1") == Endpoint("stdin", "id", "3fa1")


def test_a_short_value_with_an_equals_sign_stays_a_value() -> None:
    assert parse("slack:a=b").value == "a=b"


def test_an_unknown_conduit_in_the_short_form_is_refused_with_the_full_form_named() -> None:
    with pytest.raises(
        EndpointError, match=r"no installed conduit named 'telegram' declares.*full"
    ):
        parse("telegram:12345")


@pytest.mark.parametrize("text", ["slack", "slack:", ":C1", ""])
def test_text_without_conduit_and_value_is_refused(text: str) -> None:
    with pytest.raises(EndpointError, match="CONDUIT:VALUE"):
        parse(text)


def test_an_invalid_namespace_is_refused() -> None:
    with pytest.raises(EndpointError, match="invalid conduit namespace"):
        parse("Sla ck:x.y=1")


def test_a_key_outside_the_namespace_is_refused() -> None:
    with pytest.raises(EndpointError, match="outside the namespace"):
        Endpoint("slack", "telegram.chat", "1")


def test_a_bare_prefix_is_not_a_key() -> None:
    with pytest.raises(EndpointError, match="outside the namespace"):
        Endpoint("slack", "slack.", "1")


def test_an_over_long_key_is_refused() -> None:
    with pytest.raises(EndpointError, match="key must have"):
        Endpoint("slack", "slack." + "k" * MAX_KEY_LENGTH, "1")


@pytest.mark.parametrize("value", ["", "v" * (MAX_VALUE_LENGTH + 1)])
def test_an_empty_or_over_long_value_is_refused(value: str) -> None:
    with pytest.raises(EndpointError, match="value must have"):
        Endpoint("slack", "slack.thread", value)


def test_an_id_endpoint_must_name_a_valid_thread_id() -> None:
    with pytest.raises(EndpointError, match="names a thread id"):
        Endpoint("stdin", "id", "../etc")


def test_the_hash_depends_on_key_and_value_only() -> None:
    one = Endpoint("slack", "slack.thread", "C1")
    assert one.hash == Endpoint("slack", "slack.thread", "C1").hash
    assert one.hash != Endpoint("slack", "slack.thread", "C2").hash
    assert len(one.hash) == 32
