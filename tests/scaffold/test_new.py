"""`ore new`: every kind renders a package that installs, shows its hook and passes its
own tests; bad input is one line and writes nothing (issue 43)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from ore_core.scaffold import KINDS, PluginNames, plan
from tests.cli.conftest import ore

RUN_ORE = "import sys; from ore_core.cli_entry import run; sys.argv[0] = 'ore'; run()"


def tree(directory: Path) -> dict[str, str]:
    """Every file below `directory`, by relative path, with its text."""
    return {
        str(path.relative_to(directory)): path.read_text()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def layered_venv(directory: Path) -> Path:
    """A throwaway venv that sees everything the test venv has installed (ore, pytest, pip,
    hatchling) but installs into itself: the test venv is left as it was. Its python."""
    venv.create(directory, with_pip=False)
    python = directory / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    (Path(site) / "_ore_test_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return python


@pytest.mark.slow  # starts pip, ore twice and pytest
@pytest.mark.timeout(300)  # pip builds five packages
def test_every_kind_installs_shows_its_hook_and_passes_its_own_tests(tmp_path: Path) -> None:
    packages = {kind: tmp_path / f"ore-new-{kind}" for kind in KINDS}
    dirs = [str(directory) for directory in packages.values()]
    config = packages["sink"] / "pyproject.toml"
    for kind, directory in packages.items():
        assert ore("new", kind, f"new-{kind}", str(directory), "--yes").exit_code == 0
    python = layered_venv(tmp_path / "venv")
    # pip reads PIP_NO_BUILD_ISOLATION=0 as --no-build-isolation: the packages build with
    # the hatchling the test venv has, without the network.
    env = {**os.environ, "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    editable = [arg for directory in packages.values() for arg in ("-e", str(directory))]
    installed = subprocess.run(
        [python, "-c", RUN_ORE, "install", *editable],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    listed = subprocess.run(
        [python, "-c", RUN_ORE, "plugins", "--json"], capture_output=True, text=True, check=True
    )
    hooks = {entry["name"]: entry["hooks"] for entry in json.loads(listed.stdout)}
    assert {f"new-{kind}": hooks.get(f"new-{kind}") for kind in KINDS} == {
        f"new-{kind}": [spec.hook] for kind, spec in KINDS.items()
    }
    # One pytest for the five packages (their [tool.pytest.ini_options] are the same).
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(config), *dirs],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_every_kind_renders_python_that_compiles_and_a_pyproject_with_its_entry_point() -> None:
    names = PluginNames.of("no-shouting")
    for kind in KINDS:
        files = {str(path): text for path, text in plan(kind, names).items()}
        for path, text in files.items():
            if path.endswith(".py"):
                compile(text, path, "exec")
        project = tomllib.loads(files["pyproject.toml"])["project"]
        assert project["entry-points"]["ore"] == {"no-shouting": "ore_no_shouting.plugin"}
        assert project["dependencies"][0].startswith("ore-core")
        assert f"def {KINDS[kind].hook}(" in files["ore_no_shouting/plugin.py"]


def test_new_prints_the_three_commands_that_come_next(tmp_path: Path) -> None:
    target = tmp_path / "shout"
    result = ore("new", "interceptor", "shout", str(target), "--yes")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-4:] == [
        "Next:",
        f"  ore install -e {target}",
        "  ore plugins",
        f"  pytest {target}",
    ]
    assert (target / "ore_shout" / "plugin.py").is_file()
    assert (target / ".github" / "workflows" / "test.yml").is_file()


def test_the_directory_defaults_to_the_distribution_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert ore("new", "sink", "audit", "--yes").exit_code == 0
    assert (tmp_path / "ore-audit" / "ore_audit" / "plugin.py").is_file()


def test_an_existing_directory_is_refused_in_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    result = ore("new", "sink", "audit", str(tmp_path), "--yes")
    assert result.exit_code == 1
    assert result.output == f"Error: {tmp_path} exists: choose another directory, or --force\n"
    assert tree(tmp_path) == {"mine.txt": "keep me"}


def test_force_writes_into_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    result = ore("new", "sink", "audit", str(tmp_path), "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ore_audit" / "plugin.py").is_file()
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("name", ["2fast", "No-Shouting", "no shouting", "a.b", "_x", "x-"])
def test_a_name_that_is_not_a_package_name_is_refused_in_one_line(
    tmp_path: Path, name: str
) -> None:
    result = ore("new", "sink", name, str(tmp_path / "out"), "--yes")
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {name!r} is not a plugin name: use lowercase")
    assert result.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_kind_is_refused_in_one_line_naming_the_kinds(tmp_path: Path) -> None:
    result = ore("new", "widget", "shout", str(tmp_path / "out"), "--yes")
    assert result.exit_code == 1
    assert result.output == (
        "Error: unknown kind 'widget': choose one of interceptor, processor, store, sink, conduit\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_description_with_a_quote_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    result = ore("new", "sink", "audit", str(tmp_path / "out"), "--description", 'say "hi"')
    assert result.exit_code == 1
    assert result.output == "Error: the description is one line without quotes or backslashes\n"
    assert list(tmp_path.iterdir()) == []


def test_the_description_reaches_the_readme_and_the_pyproject(tmp_path: Path) -> None:
    result = ore("new", "processor", "parrot", str(tmp_path), "--force", "--description", "Hi.")
    assert result.exit_code == 0, result.output
    assert tomllib.loads((tmp_path / "pyproject.toml").read_text())["project"]["description"] == (
        "Hi."
    )
    assert "\nHi.\n" in (tmp_path / "README.md").read_text()
