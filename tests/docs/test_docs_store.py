"""The store built in docs/writing-a-store.md passes the Store conformance suite as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_core import ConfigError, OreSettings
from ore_core.plugins.manager import OrePluginManager
from ore_core.plugins.registry import collect_registrations
from ore_core.testing.plugins import temporary_plugin
from tests.docs.support import load_module, page_blocks

STORE_CODE, CONFORMANCE_CODE = page_blocks("writing-a-store.md")
folder_store = load_module("folder_store", STORE_CODE)

# The page's test class, run here exactly as the page shows it.
TestFolderStore = load_module("test_folder_store", CONFORMANCE_CODE).TestFolderStore


def test_the_guide_registers_the_folder_store_under_its_name(
    ore_plugin_manager: OrePluginManager, tmp_path: Path
) -> None:
    with temporary_plugin(ore_plugin_manager, folder_store):
        registrations = collect_registrations(ore_plugin_manager, OreSettings())
    store = registrations.store_factory("folder")({"name": "folder", "path": str(tmp_path)})
    assert isinstance(store, folder_store.FolderStore)
    assert store.directory == tmp_path


def test_the_guide_store_without_a_path_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"store\.path"):
        folder_store.folder_store({"name": "folder"})
