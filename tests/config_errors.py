"""A bad setting, as the tests of each section's settings check it: one line, no trace."""

from __future__ import annotations

import pytest

from ore_core.config import ConfigError, load_settings


def assert_settings_error(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, *says: str
) -> None:
    """`load_settings()` with `variable=value` set fails in one line that says each of `says`."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert "\n" not in message
    assert [part for part in says if part not in message] == [], message
