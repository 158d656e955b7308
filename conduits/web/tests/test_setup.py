"""First run: the token file, the address, and refusing what would be unsafe."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ore_conduit_web import WebConduit
from ore_conduit_web.server import bind
from ore_conduit_web.tokens import TOKENS_FILE, Tokens, TokensError
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.conduit import ConduitConfigError

ORE = str(Path(sys.executable).with_name("ore"))


def test_the_first_run_writes_a_token_only_its_owner_can_read(tmp_path: Path) -> None:
    tokens = Tokens.load(tmp_path / "web", "ann")
    path = tmp_path / "web" / TOKENS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens.user_of(tokens.token_of("ann")) == "ann"


def test_a_later_run_keeps_the_token(tmp_path: Path) -> None:
    first = Tokens.load(tmp_path, "ann").token_of("ann")
    assert Tokens.load(tmp_path, "ann").token_of("ann") == first


def test_tokens_from_the_config_sign_in_their_users(tmp_path: Path) -> None:
    tokens = Tokens.load(tmp_path, "ann", {"bob": "b" * 20})
    assert tokens.user_of("b" * 20) == "bob"
    assert tokens.user_of("b" * 19) is None


def test_a_damaged_tokens_file_is_reported_by_name(tmp_path: Path) -> None:
    (tmp_path / TOKENS_FILE).write_text("{not json")
    with pytest.raises(TokensError, match=TOKENS_FILE):
        Tokens.load(tmp_path, "ann")


def test_a_taken_port_falls_back_to_a_free_one_and_says_so() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        sock, note = bind("127.0.0.1", port)
        sock.close()
    finally:
        taken.close()
    assert note is not None
    assert f"port {port} is taken" in note


@pytest.mark.slow  # starts ore
def test_a_taken_port_that_was_asked_for_is_refused_in_one_line(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [ORE, "conduit", "web", "--nats", ore_nats_server.url, "--port", str(port)],
            env={**os.environ, "ORE_LOAD_PLUGINS": "ore-conduit-web", "ORE_LOG__LEVEL": "warning"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: web conduit: port {port} is taken: stop what listens there, or choose "
        "another port (--port, or port in [plugins.web]; 0: any free port)"
    ]


def test_serving_other_machines_without_a_token_is_refused() -> None:
    with pytest.raises(ConduitConfigError, match="needs a token"):
        WebConduit.load_config({"host": "0.0.0.0", "auth": False})


def test_a_short_configured_token_is_refused() -> None:
    with pytest.raises(ConduitConfigError, match="shorter than 16"):
        WebConduit.load_config({"users": {"bob": "short"}})


def test_an_unknown_setting_is_refused_naming_it() -> None:
    with pytest.raises(ConduitConfigError, match="colour"):
        WebConduit.load_config({"colour": "blue"})


def test_the_conduit_declares_what_a_browser_can_show() -> None:
    capabilities = WebConduit.capabilities
    assert (capabilities.edit, capabilities.streaming, capabilities.markup) == (
        True,
        True,
        "markdown",
    )
