"""`[plugins.guard]` settings: defaults, conversions, and errors that name the bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_core.config import load_settings
from ore_guard.config import PLUGIN_NAME, GuardConfig, GuardConfigError
from ore_guard.redact import DEFAULT_PATTERNS


def test_an_empty_section_enables_rate_limiting_and_every_default_pattern() -> None:
    config = GuardConfig.load({})
    assert config.rate_limit
    assert config.redact
    assert list(config.redaction_patterns()) == list(DEFAULT_PATTERNS)


def test_an_invalid_regex_is_refused_naming_the_pattern() -> None:
    with pytest.raises(GuardConfigError, match=r"pattern 'ticket_id' is not a valid regular"):
        GuardConfig.load({"patterns": {"ticket_id": "TCK-(\\d+"}})


def test_the_error_names_the_settings_table() -> None:
    with pytest.raises(GuardConfigError, match=r"\[plugins\.guard\].*patterns"):
        GuardConfig.load({"patterns": {"ticket_id": "["}})


def test_a_pattern_that_matches_the_empty_string_is_refused() -> None:
    with pytest.raises(GuardConfigError, match="'anything' matches the empty string"):
        GuardConfig.load({"patterns": {"anything": "x*"}})


def test_a_pattern_name_that_cannot_be_a_marker_is_refused() -> None:
    with pytest.raises(GuardConfigError, match="pattern name 'my key'"):
        GuardConfig.load({"patterns": {"my key": "k-[0-9]{8}"}})


def test_an_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(GuardConfigError, match="rates"):
        GuardConfig.load({"rates": 5})


@pytest.mark.parametrize("section", [{"rate": 0}, {"per": 0}, {"burst": 0}, {"max_senders": 0}])
def test_limits_must_be_positive(section: dict[str, int]) -> None:
    with pytest.raises(GuardConfigError, match=next(iter(section))):
        GuardConfig.load(section)


def test_an_extra_pattern_runs_after_the_defaults() -> None:
    config = GuardConfig.load({"patterns": {"ticket": "TCK-[0-9]{6}"}})
    assert list(config.redaction_patterns()) == [*DEFAULT_PATTERNS, "ticket"]


def test_a_pattern_with_a_default_name_replaces_the_default() -> None:
    config = GuardConfig.load({"patterns": {"openai_key": "sk-[a-z]{8}"}})
    assert config.redaction_patterns()["openai_key"].pattern == "sk-[a-z]{8}"


def test_an_empty_pattern_switches_a_default_off() -> None:
    config = GuardConfig.load({"patterns": {"aws_access_key_id": ""}})
    assert "aws_access_key_id" not in config.redaction_patterns()


@pytest.mark.usefixtures("ore_isolated_env")
def test_settings_come_from_ore_toml_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = tmp_path / "ore.toml"
    config_file.write_text(
        '[plugins.guard]\nburst = 2\n[plugins.guard.patterns]\nticket = "TCK-[0-9]{6}"\n'
    )
    monkeypatch.setenv("ORE_PLUGINS__GUARD__RATE", "4")
    monkeypatch.setenv("ORE_PLUGINS__GUARD__REDACT", "false")
    settings = load_settings(config_file)
    config = GuardConfig.load(settings.plugin_config(PLUGIN_NAME))
    assert (config.rate, config.burst, config.redact) == (4, 2, False)
    assert config.patterns == {"ticket": "TCK-[0-9]{6}"}


def test_the_defaults_fit_a_person_typing_and_a_busy_group_thread() -> None:
    config = GuardConfig()
    assert (config.burst, config.rate, config.per) == (20, 60, 60.0)
    assert (config.thread_burst, config.thread_rate) == (40, 120)


def test_describe_says_the_limits_in_one_line() -> None:
    assert GuardConfig().describe() == (
        "per sender 20 at once, then 60 per 60 s; "
        "per thread without a user 40, then 120; redacting secrets"
    )


def test_describe_says_when_there_is_no_rate_limit() -> None:
    assert GuardConfig(rate_limit=False, redact=False).describe() == (
        "no rate limit; not redacting secrets"
    )
