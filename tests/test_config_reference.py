"""docs/configuration.md is generated from the settings models and cannot drift."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ore_core.config import OreSettings
from ore_core.config_reference import REGENERATE, Setting, render_reference, settings, update_page
from tests.docs.support import DOCS

PAGE = DOCS / "configuration.md"


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    nested = [
        field.annotation
        for field in model.model_fields.values()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    ]
    return [model, *(sub for child in nested for sub in _models(child))]


def test_the_committed_reference_is_what_the_settings_models_generate() -> None:
    committed = PAGE.read_text()
    assert update_page(committed, render_reference()) == committed, (
        f"docs/configuration.md is out of date with ore_core/config.py; run: {REGENERATE}"
    )


@pytest.mark.parametrize("model", _models(OreSettings), ids=lambda model: model.__name__)
def test_every_setting_has_a_description(model: type[BaseModel]) -> None:
    missing = [name for name, field in model.model_fields.items() if not field.description]
    assert missing == [], (
        f"{model.__name__} fields without a description: {missing}; give each an attribute "
        f"docstring (the line below the field), then run: {REGENERATE}"
    )


def test_every_setting_is_in_the_reference_with_its_environment_variable() -> None:
    rows = {row.key: row for row in settings()}
    assert rows["nats.url"].env == "ORE_NATS__URL"
    assert rows["session.double_texting"].default == '`"queue"`'
    assert rows["plugins.<name>.<key>"].env == "ORE_PLUGINS__<NAME>__<KEY>"
    assert "store.<key>" in rows  # [store] passes other keys to the store's factory


def test_the_environment_variables_in_the_reference_are_the_ones_ore_reads(
    ore_isolated_env: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings_row("log.level").env, "debug")
    monkeypatch.setenv(settings_row("nats.subject_prefix").env, "tenant-a")
    loaded = OreSettings()
    assert (loaded.log.level, loaded.nats.subject_prefix) == ("debug", "tenant-a")


def test_update_page_refuses_a_page_without_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        update_page("# no markers here\n", render_reference())


def settings_row(key: str) -> Setting:
    return next(row for row in settings() if row.key == key)
