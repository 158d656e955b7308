"""The `ore` command line: plugins, config, install/uninstall, plugin commands, logging."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ore_core.config import SECRET_MASK
from ore_core.plugins import manager as manager_module
from tests.cli.conftest import ore
from tests.ore_process import ORE

FAKE_BUILTIN = "ore_cli_test_builtin"


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path) -> None:
    """Every test here runs in its own ore state and config directories."""


def run_ore(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        [str(ORE), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.fixture
def builtin_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], None]]:
    """Install a module written by the test as the only built-in plugin."""

    def install(source: str) -> None:
        (tmp_path / f"{FAKE_BUILTIN}.py").write_text(
            "import click\nfrom ore_core.plugins.hookspecs import hookimpl\n" + source
        )
        monkeypatch.syspath_prepend(tmp_path)
        monkeypatch.setattr(manager_module, "BUILTIN_PLUGINS", [FAKE_BUILTIN])

    yield install
    sys.modules.pop(FAKE_BUILTIN, None)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ore.toml"
    path.write_text(text)
    return str(path)


# --- ore plugins -------------------------------------------------------------------


def test_plugins_json_lists_the_test_plugin_with_version_and_hooks() -> None:
    result = ore("plugins", "--json")
    assert result.exit_code == 0
    (entry,) = [entry for entry in json.loads(result.stdout) if entry["name"] == "test"]
    assert entry["distribution"] == "ore-test-plugin"
    assert entry["version"] == "0.3.1"
    assert set(entry["hooks"]) == set(manager_module.HOOK_NAMES)
    assert entry["error"] is None


def test_plugins_table_reports_load_errors_by_name() -> None:
    result = ore("plugins")
    assert result.exit_code == 0
    assert (
        "broken (ore-broken-plugin 0.0.1)\n"
        "  error: RuntimeError: ore-broken-plugin fails on import on purpose\n"
    ) in result.stdout
    assert "test (ore-test-plugin 0.3.1)\n  hooks: ore_compact, ore_configure, " in result.stdout


def test_plugins_hides_builtins_unless_all(builtin_plugin: Callable[[str], None]) -> None:
    builtin_plugin("@hookimpl\ndef ore_register_sinks(register):\n    pass\n")
    names = [entry["name"] for entry in json.loads(ore("plugins", "--json").stdout)]
    everything = json.loads(ore("plugins", "--all", "--json").stdout)
    assert FAKE_BUILTIN not in names
    (builtin,) = [entry for entry in everything if entry["name"] == FAKE_BUILTIN]
    assert builtin["builtin"] is True
    assert builtin["hooks"] == ["ore_register_sinks"]


def test_plugins_hooks_lists_each_hook_with_its_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-test-plugin")
    table = json.loads(ore("plugins", "--hooks", "--json").stdout)
    assert table == {hook: ["test"] for hook in manager_module.HOOK_NAMES}


# --- plugin commands ---------------------------------------------------------------


def test_plugin_command_runs_and_reads_its_plugin_table(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[plugins.test]\ngreeting = "ahoy"\n')
    result = ore("--config", config, "ore-test-hello")
    assert (result.exit_code, result.stdout) == (0, "ahoy from ore-test-plugin\n")


def test_plugin_command_is_listed_in_help() -> None:
    assert "ore-test-hello" in ore("--help").stdout


def test_plugin_command_cannot_replace_a_core_command(
    builtin_plugin: Callable[[str], None],
) -> None:
    builtin_plugin(
        "@hookimpl\ndef ore_register_commands(cli):\n"
        "    @cli.command('config')\n    def hijack():\n        click.echo('hijacked')\n"
    )
    result = ore("--help")  # lists every command, so plugin commands are collected
    assert "plugin.command_shadowed" in result.stderr
    assert "hijacked" not in ore("config").stdout


def test_plugin_whose_command_hook_fails_does_not_break_the_cli(
    builtin_plugin: Callable[[str], None],
) -> None:
    builtin_plugin("@hookimpl\ndef ore_register_commands(cli):\n    raise RuntimeError('oops')\n")
    result = ore("ore-test-hello")
    assert result.stdout == "hello from ore-test-plugin\n"
    assert "plugin.commands_failed" in result.stderr


# --- ore config --------------------------------------------------------------------


def test_config_json_shows_each_value_with_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path, "[nats]\npartitions = 16\n")
    monkeypatch.setenv("ORE_PROCESSOR__NAME", "openai")
    values = {v["key"]: v for v in json.loads(ore("--config", config, "config", "--json").stdout)}
    assert values["nats.partitions"] == {"key": "nats.partitions", "value": 16, "source": config}
    assert values["processor.name"]["source"] == "ORE_PROCESSOR__NAME"
    assert values["store.name"] == {"key": "store.name", "value": "sqlite", "source": "default"}


def test_config_never_prints_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_NATS__TOKEN", "s3cr3t-token")
    config = write_config(tmp_path, '[plugins.openai]\napi_key = "sk-live-123"\n')
    result = ore("--config", config, "config")
    assert result.exit_code == 0
    assert "s3cr3t-token" not in result.output
    assert "sk-live-123" not in result.output
    assert re.search(rf"^nats\.token +{re.escape(SECRET_MASK)} ", result.stdout, re.MULTILINE)


def test_bad_config_is_a_one_line_error_and_status_1(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[log]\nformat = "xml"\n')
    result = ore("--config", config, "config")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("Error: invalid configuration: log.format = 'xml' (from ")


def test_an_unknown_store_key_fails_config_as_it_fails_doctor(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[store]\nbogus = 1\n")
    result = ore("--config", config, "config")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] + "\n" == (
        "Error: invalid [store] configuration: unknown key store.bogus (store 'sqlite', "
        "known keys: path, fsync, busy_timeout, read_only)\n"
    )  # after the warnings of the test environment's broken plugins


# --- logging -----------------------------------------------------------------------


def test_warnings_go_to_stderr_as_json_lines_off_a_terminal() -> None:
    result = ore("plugins", "--json")
    json.loads(result.stdout)
    warnings = [json.loads(line) for line in result.stderr.splitlines()]
    assert {"plugin.load_failed"} == {line["event"] for line in warnings}


def test_log_level_option_overrides_the_config_file(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[log]\nlevel = "debug"\n')
    assert ore("--config", config, "--log-level", "ERROR", "plugins").stderr == ""


def test_log_level_comes_from_the_config_file(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[log]\nlevel = "error"\n')
    assert ore("--config", config, "plugins").stderr == ""


# --- install / uninstall and the real console script ---------------------------------


def test_install_needs_a_package() -> None:
    result = ore("install")
    assert result.exit_code == 2
    assert "name at least one package" in result.stderr


@pytest.mark.slow  # starts a process
def test_uninstall_of_a_package_that_is_not_installed_is_an_error() -> None:
    result = run_ore("uninstall", "-y", "ore-package-that-is-not-installed")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: ore-package-that-is-not-installed is not installed (`ore plugins` lists what is)"
    ]


@pytest.mark.parametrize("package", ["click", "ore-core", "Pydantic_Core"])
def test_uninstall_refuses_ore_and_its_own_dependencies(package: str) -> None:
    result = ore("uninstall", "-y", package)
    assert result.exit_code == 1
    assert "removing it would break every ore command" in result.output


@pytest.mark.slow  # starts a process
def test_uninstall_without_yes_and_without_a_terminal_says_to_add_y() -> None:
    result = run_ore("uninstall", "ore-test-plugin")  # installed, but nobody can answer
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: ore uninstall asks before removing ore-test-plugin, but there is no terminal "
        "to answer: add -y"
    ]


@pytest.mark.slow  # starts a process
def test_install_failure_exits_with_pips_status(tmp_path: Path) -> None:
    result = run_ore("install", "-e", str(tmp_path / "no-such-project"))
    assert result.returncode == 1
    assert "no-such-project" in result.stderr


def probe_wheel(directory: Path) -> Path:
    """A wheel of a tiny distribution that nothing else uses (built by hand: a wheel is a
    zip with its metadata; no build backend, no network)."""
    name, version = "ore_install_probe", "0.1"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": "VALUE = 1\n",
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: ore-install-probe\nVersion: {version}\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.slow  # starts pip
def test_install_prints_a_progress_line_and_pips_summary_not_its_log(tmp_path: Path) -> None:
    wheel = probe_wheel(tmp_path)
    try:
        result = run_ore("install", str(wheel))
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            f"Installing {wheel} with pip ...",
            "Successfully installed ore-install-probe-0.1",
        ]
    finally:
        run_ore("uninstall", "-y", "ore-install-probe")


@pytest.mark.slow  # starts a process
def test_console_script_lists_installed_plugins() -> None:
    result = run_ore("plugins", "--json")
    assert result.returncode == 0
    names = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert names["test"]["version"] == "0.3.1"
    assert names["broken"]["error"].startswith("RuntimeError")
