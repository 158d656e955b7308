"""Credentials: a missing one is one line before anything starts, a refused one is one
line at connect, and a password login is made once (its session is kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_matrix import MatrixConfig, MatrixPlatform, MissingCredentials
from ore_conduit_matrix.testing import BOT, FakeMatrix


def test_no_password_and_no_token_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MATRIX_PASSWORD", raising=False)
    monkeypatch.delenv("MATRIX_ACCESS_TOKEN", raising=False)
    config = MatrixConfig(homeserver="https://matrix.example.org", user_id=BOT)
    with pytest.raises(MissingCredentials, match="neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD"):
        config.check_secrets()


def test_a_password_without_the_user_id_is_one_line() -> None:
    config = MatrixConfig(homeserver="https://matrix.example.org", password="secret")
    with pytest.raises(MissingCredentials, match="user_id is not set"):
        config.check_secrets()


async def test_a_wrong_password_is_refused_in_one_line(hs: FakeMatrix, tmp_path: Path) -> None:
    settings = hs.conduit_settings(str(tmp_path), password="wrong")
    platform = MatrixPlatform(MatrixConfig.model_validate(settings))
    with pytest.raises(MissingCredentials, match="refused the password of @ore:fake"):
        await platform.connect()
    assert platform.client.client_session is None or platform.client.client_session.closed


async def test_a_revoked_token_is_refused_in_one_line(hs: FakeMatrix, tmp_path: Path) -> None:
    hs.revoke(hs.token)
    settings = hs.conduit_settings(str(tmp_path), password=None, access_token=hs.token)
    platform = MatrixPlatform(MatrixConfig.model_validate(settings))
    with pytest.raises(MissingCredentials, match="access token was refused"):
        await platform.connect()


async def test_a_kept_session_that_was_revoked_logs_in_again(hs: FakeMatrix, adapters) -> None:
    first = await adapters(read=False)
    token = first.platform.client.access_token
    await first.close()
    hs.revoke(token)
    again = await adapters(read=False)
    assert again.platform.client.access_token not in ("", token)
    assert [name for name, _ in hs.calls].count("login") == 2


async def test_a_token_revoked_while_running_ends_the_events_with_one_line(
    hs: FakeMatrix, adapters
) -> None:
    adapter = await adapters()
    hs.revoke(adapter.platform.client.access_token)
    await hs.create_room()  # news: the waiting sync answers, the next one is refused
    assert adapter.reader is not None
    with pytest.raises(MissingCredentials, match="revoked the bot's access token"):
        await adapter.reader
