"""Rendering a plugin package from the templates shipped inside ore (`ore new`).

A kind's files are the `common/` templates (pyproject.toml, README, CI workflow) plus
its own directory under `templates/`. In a template path, the segment `PACKAGE` becomes
the plugin's module and a leading `dot_` a `.` (`dot_github` -> `.github`: a dotted
directory is easy to lose from package data); a `.tmpl` suffix is dropped. Contents are
`string.Template`s (`$module`, `$$` for a literal `$`), substituted strictly, so a
template naming a value nobody provides fails here instead of shipping a `$typo`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from string import Template

from ore_core.errors import OreError
from ore_core.version import __version__

__all__ = ["KINDS", "Kind", "PluginNames", "ScaffoldError", "plan", "write"]


@dataclass(frozen=True)
class Kind:
    """A kind of plugin `ore new` makes: the hook it implements, the README's line that
    shows it at work (a template: `$$name` is the plugin's name), what the package needs
    besides ore, and a stricter rule for NAME where the kind's name is also used elsewhere
    (a conduit's name is its NATS namespace and its durable feed's name)."""

    hook: str
    run_line: str
    requires: tuple[str, ...] = ()
    name_rule: re.Pattern[str] | None = None
    name_hint: str = ""

    def check(self, names: PluginNames) -> None:
        """ScaffoldError (one line) when NAME is a plugin name but not one of this kind."""
        if self.name_rule is not None and not self.name_rule.fullmatch(names.name):
            raise ScaffoldError(f"{names.name!r} is not a conduit name: {self.name_hint}")


KINDS: dict[str, Kind] = {
    "interceptor": Kind(
        "ore_register_interceptors", "ore chat                  # every message passes it"
    ),
    "processor": Kind(
        "ore_register_turn_processors",
        'ORE_PROCESSOR__NAME=$name ore chat   # or [processor] name = "$name" in ore.toml',
    ),
    "store": Kind(
        "ore_register_stores",
        'ORE_STORE__NAME=$name ore chat       # or [store] name = "$name" in ore.toml',
    ),
    "sink": Kind("ore_register_sinks", "ore chat                  # it sees every reply"),
    "conduit": Kind(
        "ore_register_conduits",
        "ore conduit $name --set api_url=URL --set token=TOKEN",
        requires=("aiohttp>=3.9",),
        name_rule=re.compile(r"[a-z0-9-]{1,32}"),
        name_hint="at most 32 lowercase letters, digits or '-' (it names the conduit's "
        "NATS subjects and its durable feed, which take no '_')",
    ),
}
"""What `ore new` makes, by the word typed after it."""

_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
_TEMPLATES = "templates"


class ScaffoldError(OreError):
    """`ore new` cannot render: a bad name, an unknown kind, a directory in the way."""


@dataclass(frozen=True)
class PluginNames:
    """Every name a generated plugin uses, derived from the one the author typed.

    `name` is what users type (`processor.name`, the entry point, `[plugins.NAME]`);
    `module` the import name, `distribution` the name on PyPI, `title` the class prefix.
    """

    name: str
    module: str
    distribution: str
    title: str
    description: str

    @classmethod
    def of(cls, name: str, description: str = "") -> PluginNames:
        """The names for NAME; ScaffoldError (one line) when NAME cannot be all of them."""
        if not _NAME.fullmatch(name):
            raise ScaffoldError(
                f"{name!r} is not a plugin name: use lowercase letters, digits, '-' or '_', "
                "starting with a letter (e.g. no-shouting)"
            )
        if any(char in description for char in '"\\\n'):
            raise ScaffoldError("the description is one line without quotes or backslashes")
        module = "ore_" + name.replace("-", "_")
        title = "".join(part.capitalize() for part in re.split(r"[-_]", name))
        distribution = "ore-" + name.replace("_", "-")
        return cls(name, module, distribution, title, description or f"An ore plugin: {name}.")


def _files(root: Traversable, prefix: str = "") -> dict[str, str]:
    """Every template below `root`: its relative path -> its text."""
    found: dict[str, str] = {}
    for entry in root.iterdir():
        path = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.update(_files(entry, path + "/"))
        elif not entry.name.endswith((".pyc", ".pyo")):
            found[path] = entry.read_text(encoding="utf-8")
    return found


def _target(template_path: str, module: str) -> PurePosixPath:
    parts = []
    for part in PurePosixPath(template_path).parts:
        part = module if part == "PACKAGE" else part
        part = "." + part.removeprefix("dot_") if part.startswith("dot_") else part
        parts.append(part.removesuffix(".tmpl"))
    return PurePosixPath(*parts)


def plan(kind: str, names: PluginNames) -> dict[PurePosixPath, str]:
    """The files of a `kind` plugin named `names`: relative path -> rendered text."""
    if kind not in KINDS:
        raise ScaffoldError(f"unknown kind {kind!r}: choose one of {', '.join(KINDS)}")
    spec = KINDS[kind]
    spec.check(names)
    root = resources.files(__package__ or "ore_core.scaffold") / _TEMPLATES
    values = {**asdict(names), "kind": kind, "hook": spec.hook, "ore_version": __version__}
    values["run_line"] = Template(spec.run_line).substitute(values)
    requires = (f"ore-core>={__version__}", *spec.requires)
    values["dependencies"] = ", ".join(f'"{requirement}"' for requirement in requires)
    templates = {**_files(root / "common"), **_files(root / kind)}
    return {
        _target(path, names.module): Template(text).substitute(values)
        for path, text in sorted(templates.items())
    }


def write(files: dict[PurePosixPath, str], directory: Path, *, force: bool) -> list[Path]:
    """Write `files` below `directory`; without `force` an existing `directory` is refused
    before anything is written. Returns the paths written."""
    if directory.exists() and not force:
        raise ScaffoldError(f"{directory} exists: choose another directory, or --force")
    if directory.exists() and not directory.is_dir():
        raise ScaffoldError(f"{directory} exists and is not a directory")
    written = []
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
