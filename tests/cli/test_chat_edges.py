"""`ore chat -m` is never silently ignored (issue 28, item 13)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from ore_core.cli import main


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-conduit-stdin,ore-openai")


def chat(*args: str) -> Result:
    return CliRunner().invoke(main, ["chat", *args], input="")


def test_dash_m_under_echo_says_echo_answers_and_what_to_set() -> None:
    result = chat("-m", "llama3.2", "hi")
    assert result.exit_code == 2
    assert "-m llama3.2 chooses the model a model processor asks, but echo answers: " in (
        " ".join(result.output.split())
    )
    assert "OPENAI_API_KEY" in result.output


def test_dash_m_with_echo_chosen_explicitly_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__NAME", "echo")
    result = chat("-m", "llama3.2", "hi")
    assert result.exit_code == 2
    assert "echo answers: processor.name is echo" in " ".join(result.output.split())


def test_dash_m_with_a_core_elsewhere_says_to_use_slash_model() -> None:
    result = chat("-m", "llama3.2", "--nats", "nats://127.0.0.1:1", "hi")
    assert result.exit_code == 2
    assert "type /model NAME in the chat instead" in " ".join(result.output.split())


def test_dash_s_under_echo_says_echo_answers_and_what_to_set() -> None:
    result = chat("-s", "be brief", "hi")
    assert result.exit_code == 2
    assert "-s sets the system prompt a model processor sends, but echo answers: " in (
        " ".join(result.output.split())
    )


def test_dash_s_with_a_core_elsewhere_says_to_set_it_there() -> None:
    result = chat("-s", "be brief", "--nats", "nats://127.0.0.1:1", "hi")
    assert result.exit_code == 2
    assert "-s chooses how the core `ore chat` starts answers" in " ".join(result.output.split())


def test_dash_c_with_a_chosen_thread_is_a_usage_error() -> None:
    result = chat("-c", "--thread", "abc", "hi")
    assert result.exit_code == 2
    assert "-c continues the last thread: leave out --thread, --new and --attach" in (
        " ".join(result.output.split())
    )
