"""`ore models`: which processor answers and what it offers (issue 41 item 8), against the
openai plugin's mock model server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from ore_core.cli import main
from ore_openai.testing import MockOpenAIServer


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-openai")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockOpenAIServer]:
    """A model server offering two models, the second one configured."""
    with MockOpenAIServer(models=("small-1", "big-2"), api_key="sk-right") as server:
        monkeypatch.setenv("ORE_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        monkeypatch.setenv("ORE_PROCESSOR__MODEL", "big-2")
        yield server


def models(*options: str) -> Result:
    return CliRunner().invoke(main, ["models", *options])


def test_the_models_the_server_offers_are_listed_with_the_configured_one_marked(
    server: MockOpenAIServer,
) -> None:
    result = models()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["openai answers with model big-2", "* big-2", "  small-1"]
    assert [(r.method, r.path) for r in server.recorded] == [("GET", "/v1/models")]


def test_json_names_the_processor_the_model_and_the_offer(server: MockOpenAIServer) -> None:
    result = models("--json")
    assert json.loads(result.stdout) == {
        "processor": "openai",
        "model": "big-2",
        "models": ["big-2", "small-1"],
    }


def test_a_configured_model_the_server_lacks_is_said(
    server: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__MODEL", "huge-3")
    assert models().stdout.splitlines()[-1] == (
        "model huge-3 is not among them: set processor.model to one that is"
    )


def test_a_wrong_key_is_one_error_line(
    server: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    result = models()
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("Error: openai could not list its models: openai at ")


def test_echo_says_it_has_no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "none-at-all")
    result = models()
    assert result.exit_code == 0
    assert result.stdout.startswith("echo answers (")
    assert result.stdout.rstrip().endswith("it has no models to choose from")
