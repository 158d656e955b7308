"""Processor configuration: section, environment, defaults and validation."""

from __future__ import annotations

import pytest

from ore_openai.config import NO_API_KEY, OpenAIConfig
from ore_openai.errors import OpenAIConfigError


def test_defaults_need_no_section_and_no_environment() -> None:
    config = OpenAIConfig.load({}, environ={})
    assert config.base_url == "https://api.openai.com/v1"
    assert config.max_iterations == 8
    assert config.effective_api_key == NO_API_KEY


def test_environment_fills_base_url_and_api_key() -> None:
    env = {"ORE_OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "OPENAI_API_KEY": "sk-env"}
    config = OpenAIConfig.load({}, environ=env)
    assert (config.base_url, config.api_key) == ("http://127.0.0.1:11434/v1", "sk-env")


def test_the_section_wins_over_the_environment() -> None:
    config = OpenAIConfig.load({"base_url": "http://a/v1"}, environ={"ORE_OPENAI_BASE_URL": "x"})
    assert config.base_url == "http://a/v1"


def test_the_processor_name_key_of_the_section_is_ignored() -> None:
    assert OpenAIConfig.load({"name": "openai", "model": "m"}, environ={}).model == "m"


def test_an_unknown_key_is_rejected_by_name() -> None:
    with pytest.raises(OpenAIConfigError, match="max_iteration"):
        OpenAIConfig.load({"max_iteration": 3}, environ={})


def test_an_invalid_value_is_rejected_naming_the_field() -> None:
    with pytest.raises(OpenAIConfigError, match="max_iterations"):
        OpenAIConfig.load({"max_iterations": 0}, environ={})
