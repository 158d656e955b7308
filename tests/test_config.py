"""Settings: ore.toml + ORE_* precedence, one-line errors, masked secrets, value sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_core import ConfigError
from ore_core.config import SECRET_MASK, ConfigValue, OreSettings, load_settings
from ore_core.session.policy import DoubleTexting
from tests.config_errors import assert_settings_error


@pytest.fixture(autouse=True)
def home(ore_isolated_env: Path) -> Path:
    return ore_isolated_env


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def sources(settings: OreSettings) -> dict[str, ConfigValue]:
    return {value.key: value for value in settings.describe_sources()}


def test_defaults_apply_without_file_or_environment(home: Path) -> None:
    settings = load_settings()
    assert settings.nats.url is None
    assert (settings.nats.subject_prefix, settings.nats.partitions) == ("ore", None)
    assert settings.nats.max_payload == 1024 * 1024
    assert settings.store.name == "sqlite"
    assert settings.store.path.is_relative_to(home / "state")
    assert settings.processor.name == "echo"
    assert settings.session.double_texting is DoubleTexting.QUEUE
    assert (settings.log.level, settings.log.format) == ("info", "auto")


def test_explicit_file_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", '[nats]\nurl = ["nats://127.0.0.1:4333"]\n')
    assert load_settings(path).nats.url == ["nats://127.0.0.1:4333"]


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "ore.toml", "[nats]\npartitions = 16\n")
    monkeypatch.setenv("ORE_NATS__PARTITIONS", "4")
    assert load_settings(path).nats.partitions == 4


def test_file_and_environment_merge_within_a_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "ore.toml", '[nats]\nsubject_prefix = "acme.ore"\n')
    monkeypatch.setenv("ORE_NATS__URL", "nats://a:4222, nats://b:4222")
    nats = load_settings(path).nats
    assert nats.subject_prefix == "acme.ore"
    assert nats.url == ["nats://a:4222", "nats://b:4222"]


def test_ore_config_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_CONFIG", str(write(tmp_path / "x.toml", '[store]\nname = "memory"\n')))
    assert load_settings().store.name == "memory"


def test_explicit_file_wins_over_ore_config_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_CONFIG", str(write(tmp_path / "a.toml", '[store]\nname = "a"\n')))
    assert load_settings(write(tmp_path / "b.toml", '[store]\nname = "b"\n')).store.name == "b"


def test_ore_toml_in_the_user_config_directory_is_read_by_default(home: Path) -> None:
    write(home / "config" / "ore" / "ore.toml", '[processor]\nname = "openai"\n')
    assert load_settings().processor.name == "openai"


def test_missing_named_file_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(ConfigError, match=r"gone\.toml \(named by ORE_CONFIG\) does not exist"):
        load_settings()


def test_invalid_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", "[nats\n")
    with pytest.raises(ConfigError, match=r"ore\.toml is not valid TOML"):
        load_settings(path)


def test_bad_value_is_one_line_naming_key_source_and_what_is_allowed(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", "[nats]\npartitions = 3\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert str(raised.value) == (
        f"invalid configuration: nats.partitions = 3 (from {path}): "
        "must be a power of two from 1 to 1024 (1, 2, 4, 8, ...)"
    )


def test_bad_choice_from_environment_lists_the_allowed_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    says = (
        "session.double_texting = 'ignore' (from ORE_SESSION__DOUBLE_TEXTING)",
        "'queue', 'interrupt', 'collect' or 'reject'",
    )
    assert_settings_error(monkeypatch, "ORE_SESSION__DOUBLE_TEXTING", "ignore", *says)


def test_unknown_key_is_reported_with_the_known_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", '[log]\nlevl = "debug"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert f"unknown key log.levl (from {path}, known keys: level, format)" in str(raised.value)


def test_unknown_section_names_the_file_it_came_from(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", "[nast]\nurl = 1\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert f"unknown key nast (from {path}, known keys: nats, store," in str(raised.value)


def test_bad_nats_url_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_NATS__URL", "http://example.org")
    with pytest.raises(ConfigError, match=r"nats\.url .*is not a NATS URL"):
        load_settings()


def test_secret_value_never_appears_in_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", "[nats]\npassword = 918273645\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert "918273645" not in str(raised.value)
    assert f"nats.password = {SECRET_MASK}" in str(raised.value)


def test_secrets_are_masked_in_sources_but_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_NATS__PASSWORD", "hunter2")
    monkeypatch.setenv("ORE_PLUGINS__OPENAI__API_KEY", "sk-secret")
    settings = load_settings()
    assert settings.nats.password is not None
    assert settings.nats.password.get_secret_value() == "hunter2"
    described = sources(settings)
    assert described["nats.password"].value == SECRET_MASK
    assert described["plugins.openai.api_key"].value == SECRET_MASK


def test_sources_name_default_file_and_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "ore.toml", '[store]\nname = "memory"\n')
    monkeypatch.setenv("ORE_LOG__LEVEL", "DEBUG")
    described = sources(load_settings(path))
    assert described["store.name"] == ConfigValue("store.name", "memory", str(path))
    assert described["log.level"] == ConfigValue("log.level", "debug", "ORE_LOG__LEVEL")
    assert described["processor.name"] == ConfigValue("processor.name", "echo", "default")


def test_plugin_tables_come_from_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "ore.toml", '[plugins.test]\ngreeting = "hi"\n')
    monkeypatch.setenv("ORE_PLUGINS__TEST__VOLUME", "11")
    settings = load_settings(path)
    assert settings.plugin_config("test") == {"greeting": "hi", "volume": "11"}
    assert settings.plugin_config("absent") == {}


def test_store_section_keeps_extra_keys_for_its_factory(tmp_path: Path) -> None:
    path = write(tmp_path / "ore.toml", '[store]\nname = "journal"\nfsync = "batch"\n')
    assert load_settings(path).store.model_dump()["fsync"] == "batch"


def test_settings_are_immutable() -> None:
    settings = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.nats.partitions = 2  # type: ignore[misc]
