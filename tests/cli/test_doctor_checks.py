"""`ore doctor` fails when the chat cannot work (issue 28, item 10).

Each test sets up one thing a chat would trip over, against real local servers (the
openai plugin's mock model server, a real nats-server), and checks doctor's line.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.cli import main
from ore_openai.testing import DEFAULT_MODEL, MockOpenAIServer

Checks = dict[str, dict[str, str]]


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-openai,ore-conduit-stdin")


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockOpenAIServer]:
    """A model server with one model that needs the key `sk-right`, configured for ore."""
    with MockOpenAIServer(api_key="sk-right") as server:
        monkeypatch.setenv("ORE_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        monkeypatch.setenv("ORE_PROCESSOR__MODEL", DEFAULT_MODEL)
        yield server


def doctor(*options: str) -> tuple[int, Checks]:
    result = CliRunner().invoke(main, [*options, "doctor", "--json"])
    return result.exit_code, {check["part"]: check for check in json.loads(result.stdout)}


def refused_url() -> str:
    """A loopback URL where connections are refused (bound, never listening)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{silent.getsockname()[1]}/v1"


def test_a_model_server_that_answers_passes(model: MockOpenAIServer) -> None:
    code, checks = doctor()
    assert code == 0
    assert checks["processor"]["status"] == "ok"
    assert [(r.method, r.path) for r in model.recorded] == [("GET", "/v1/models")]


def test_a_misspelt_processor_key_fails_naming_it(
    model: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__TEMPRATURE", "0.2")
    code, checks = doctor()
    assert code == 1
    assert checks["processor"]["status"] == "FAIL"
    assert "temprature" in checks["processor"]["found"]


def test_an_unreachable_model_url_fails(
    model: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = refused_url()
    monkeypatch.setenv("ORE_OPENAI_BASE_URL", url)
    code, checks = doctor()
    assert code == 1
    assert checks["processor"]["status"] == "FAIL"
    assert f"openai at {url}: connection failed" in checks["processor"]["found"]


def test_a_wrong_api_key_fails(model: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    code, checks = doctor()
    assert code == 1
    assert "HTTP 401" in checks["processor"]["found"]
    assert "check api_key" in checks["processor"]["found"]


def test_openai_without_an_api_key_fails_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__NAME", "openai")  # api.openai.com, and no key
    code, checks = doctor()
    assert code == 1
    assert "no API key; set OPENAI_API_KEY" in checks["processor"]["found"]


def test_a_model_the_server_does_not_have_fails_with_the_ones_it_has(
    model: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_PROCESSOR__MODEL", "llama3.2")
    code, checks = doctor()
    assert code == 1
    assert (
        f"model 'llama3.2' is not served there (it serves: {DEFAULT_MODEL})"
        in (checks["processor"]["found"])
    )


def test_a_configured_plugin_that_is_not_installed_fails(tmp_path: Path) -> None:
    config = tmp_path / "ore.toml"
    config.write_text('[plugins.gaurd]\nblocked = ["x"]\n', encoding="utf-8")
    code, checks = doctor("--config", str(config))
    assert code == 1
    assert checks["plugin gaurd"]["status"] == "FAIL"
    assert "[plugins.gaurd] is configured" in checks["plugin gaurd"]["found"]


def test_a_configured_plugin_that_is_installed_passes(tmp_path: Path) -> None:
    config = tmp_path / "ore.toml"
    config.write_text("[plugins.stdin]\n", encoding="utf-8")
    code, checks = doctor("--config", str(config))
    assert code == 0
    assert not [part for part in checks if part.startswith("plugin ")]


def test_an_unreachable_nats_url_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_NATS__URL", refused_url().replace("http", "nats").removesuffix("/v1"))
    code, checks = doctor()
    assert code == 1
    assert checks["nats"]["status"] == "FAIL"
    assert checks["nats"]["found"].startswith("nothing answers at nats://127.0.0.1:")


def test_a_nats_url_that_refuses_ores_user_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    users = "authorization { users = [ {user: ore, password: right} ] }\n"
    with EmbeddedNatsServer(tmp_path / "nats", config=users) as server:
        monkeypatch.setenv("ORE_NATS__URL", server.url)
        monkeypatch.setenv("ORE_NATS__USER", "ore")
        monkeypatch.setenv("ORE_NATS__PASSWORD", "wrong")
        code, checks = doctor()
        assert code == 1
        assert checks["nats"]["found"].startswith(f"NATS at {server.url} refused the user")
        monkeypatch.setenv("ORE_NATS__PASSWORD", "right")
        code, checks = doctor()
    assert checks["nats"]["status"] == "ok"
