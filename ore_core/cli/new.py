"""`ore new KIND NAME [DIR]`: start a plugin package from ore's templates.

Everything is checked before the first file is written (the kind, the name, the
directory), so a refusal leaves nothing behind. No question is asked with `--yes`, a
flag for the choice, or no terminal; the command ends with the three commands that
install the package, show it to ore and run its tests.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ore_core.scaffold import KINDS, PluginNames, plan, write

__all__ = ["new"]


@click.command()
@click.argument("kind", metavar=f"{{{'|'.join(KINDS)}}}")
@click.argument("name")
@click.argument("directory", metavar="[DIR]", required=False, type=click.Path(path_type=Path))
@click.option("--description", help="One line saying what the plugin does (README, PyPI).")
@click.option("--force", is_flag=True, help="Write into DIR even when it exists.")
@click.option("-y", "--yes", is_flag=True, help="Ask nothing: take the defaults.")
def new(
    kind: str, name: str, directory: Path | None, description: str | None, force: bool, yes: bool
) -> None:
    """Create a plugin package: its hook, tests on ore's pytest kit, a README and CI.

    NAME is what users type (`ore plugins`, `[plugins.NAME]`); the package is ore-NAME
    with the module ore_NAME, in DIR (default: ./ore-NAME).
    """
    if description is None and not yes and sys.stdin.isatty():
        description = click.prompt("What does it do, in one line", default="", show_default=False)
    names = PluginNames.of(name, description or "")
    files = plan(kind, names)
    target = directory or Path(names.distribution)
    write(files, target, force=force)
    click.echo(f"Created {names.distribution}, {article(kind)} {kind} plugin, in {target}.")
    click.echo("Next:")
    quoted = shlex.quote(str(target))
    for line in (f"ore install -e {quoted}", "ore plugins", f"pytest {quoted}"):
        click.echo(f"  {line}")


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"
