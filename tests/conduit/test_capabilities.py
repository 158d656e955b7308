"""A conduit's declared capabilities (`ore_core.conduit.Capabilities`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ore_core.conduit import Capabilities, Conduit


def test_a_conduit_that_declares_nothing_claims_the_least() -> None:
    assert Conduit.capabilities == Capabilities(
        edit=False, delete=False, threads=False, streaming=False, markup="plain"
    )


def test_capabilities_are_frozen_so_one_conduit_cannot_change_anothers() -> None:
    with pytest.raises(ValidationError):
        Capabilities().edit = True  # type: ignore[misc]


@pytest.mark.parametrize("bad", [{"edits": True}, {"max_message_length": 10}, {"markup": "bbcode"}])
def test_a_misspelt_or_impossible_capability_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Capabilities.model_validate(bad)
