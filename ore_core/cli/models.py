"""`ore models`: which turn processor answers and the models it offers, like `llm models`.

The processor is built as `ore serve` and `ore chat` would build it from the same
settings, asked for its models (`models()`: the openai processor asks its server's
`GET /models`) and closed. The configured model is marked; echo offers none.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import click

from ore_core.bus.api.model_offer import ModelOffer
from ore_core.cli.app import opened_processor
from ore_core.cli.options import CliState, cli_state
from ore_core.cli.processor import choose_processor, turn_processors
from ore_core.config import OreSettings
from ore_core.plugins.builtin.processors import ECHO

__all__ = ["models"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models(as_json: bool) -> None:
    """Show which turn processor answers and the models it offers (* the configured one).

    The processor is asked with this command's settings, the ones `ore serve` and `ore
    chat` use when they share its config; set the model with `processor.model`
    (`ORE_PROCESSOR__MODEL`) or `ore chat -m`. The control API's `models` method gives a
    conduit the same answer from the running core (`ModelOffer`).
    """
    state = cli_state()
    choice = choose_processor(state.settings, turn_processors(state.plugin_manager), os.environ)
    name = choice.settings.processor.name
    if choice.echo_reason is not None:
        body: dict[str, Any] = {"processor": ECHO, "model": None, "models": []}
    else:
        body = asyncio.run(_described(state, choice.settings, name))
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    if "error" in body:
        raise click.ClickException(body["error"])
    if choice.echo_reason is not None:
        click.echo(f"echo answers ({choice.echo_reason}): it has no models to choose from")
        return
    configured, offered = body["model"] or "", body["models"]
    click.echo(f"{name} answers" + (f" with model {configured}" if configured else ""))
    if not offered:
        click.echo(f"{name} offers no models to choose from")
    for model in offered:
        click.echo(f"{'*' if model == configured else ' '} {model}")
    if configured and offered and configured not in offered:
        click.echo(f"model {configured} is not among them: set processor.model to one that is")


async def _described(state: CliState, settings: OreSettings, name: str) -> dict[str, Any]:
    """What the processor offers, as the core's `models` method says it."""
    async with opened_processor(state.plugin_manager, settings) as processor:
        return await ModelOffer(processor, name).describe()
