"""NatsCredentials: the one credentials object of the core, the conduits and the CLI."""

from __future__ import annotations

from pathlib import Path

from ore_core import NatsCredentials, TlsFiles
from ore_core.config import NatsSettings

SEED = "SU" + "A" * 56


def test_no_credentials_connect_without_authentication() -> None:
    options = NatsCredentials().connect_options()
    assert options == {
        "user": None,
        "password": None,
        "token": None,
        "user_credentials": None,
        "tls": None,
    }


def test_a_seed_is_passed_as_a_seed_and_anything_else_as_a_seed_file() -> None:
    assert NatsCredentials(nkey_seed=SEED).connect_options()["nkeys_seed_str"] == SEED
    options = NatsCredentials(nkey_seed=Path("/etc/ore/user.nk")).connect_options()
    assert options["nkeys_seed"] == "/etc/ore/user.nk"


def test_repr_never_shows_the_secrets() -> None:
    shown = repr(NatsCredentials(user="ore", password="hunter2", token="t0k", nkey_seed=SEED))
    assert "ore" in shown
    assert "hunter2" not in shown
    assert "t0k" not in shown
    assert SEED not in shown


def test_from_settings_reads_the_nats_table() -> None:
    settings = NatsSettings.model_validate(
        {"user": "ore", "password": "pw", "creds_file": "/etc/ore/ore.creds", "tls_ca_file": "ca"}
    )
    credentials = NatsCredentials.from_settings(settings)
    assert credentials.user == "ore"
    assert credentials.password == "pw"
    assert credentials.creds_file == Path("/etc/ore/ore.creds")
    assert credentials.tls == TlsFiles(ca_file=Path("ca"))


def test_from_settings_without_tls_files_keeps_nats_py_defaults() -> None:
    assert NatsCredentials.from_settings(NatsSettings()).tls is None
