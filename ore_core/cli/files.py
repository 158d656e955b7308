"""`ore files sweep`: an operator frees the stored files no thread refers to any more.

A file is stored once for every thread that carries it, so deleting a thread leaves
its files; the sweep (run by the core, `P.admin.files.sweep`) removes the ones no
stored thread refers to once they are older than `files.retention`. Run it from cron
or a timer; docs/operating.md says how often.
"""

from __future__ import annotations

import json

import click

from ore_core.artifacts.attachment import human_size
from ore_core.cli.admin_call import admin_request

__all__ = ["files"]


@click.group()
def files() -> None:
    """The files the core stores for attachments (the ORE_FILES bucket)."""


@files.command("sweep")
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    help="Seconds an unreferenced file must have been stored (default: files.retention).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def sweep_command(older_than: float | None, as_json: bool) -> None:
    """Remove the stored files no thread refers to, stored more than files.retention
    (or --older-than seconds) ago."""
    body = {} if older_than is None else {"older_than": older_than}
    swept = admin_request("ore files", "files.sweep", body)
    if as_json:
        click.echo(json.dumps(swept))
        return
    click.echo(
        f"removed {swept['removed']} files ({human_size(swept['freed'])}); kept "
        f"{swept['referenced']} that threads refer to and {swept['young']} stored "
        "too recently to remove"
    )
