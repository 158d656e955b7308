"""`ore models`: which turn processor answers and the models it offers, like `llm models`.

The processor is built as `ore serve` and `ore chat` would build it from the same
settings, asked for its models (`models()`: the openai processor asks its server's
`GET /models`) and closed. The configured model is marked; echo offers none.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Coroutine
from typing import Any

import click

from ore_core.cli.app import opened_processor
from ore_core.cli.options import CliState, cli_state
from ore_core.cli.processor import choose_processor, turn_processors
from ore_core.config import OreSettings

__all__ = ["models"]

ASK_TIMEOUT = 10.0
"""Seconds the processor may take to list its models."""


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models(as_json: bool) -> None:
    """Show which turn processor answers and the models it offers (* the configured one).

    The processor is asked with this command's settings, the ones `ore serve` and `ore
    chat` use when they share its config; set the model with `processor.model`
    (`ORE_PROCESSOR__MODEL`) or `ore chat -m`.
    """
    state = cli_state()
    choice = choose_processor(state.settings, turn_processors(state.plugin_manager), os.environ)
    name = choice.settings.processor.name
    configured = str(choice.settings.processor.model_dump().get("model") or "")
    offered: list[str] | None = []
    if choice.echo_reason is None:
        offered = asyncio.run(_offered(state, choice.settings))
    if as_json:
        body = {"processor": name, "model": configured or None, "models": offered}
        click.echo(json.dumps(body, indent=2))
        return
    if choice.echo_reason is not None:
        click.echo(f"echo answers ({choice.echo_reason}): it has no models to choose from")
        return
    click.echo(f"{name} answers" + (f" with model {configured}" if configured else ""))
    if offered is None:
        click.echo(f"{name} does not list the models it offers")
        return
    if not offered:
        click.echo("its server lists no models")
    for model in offered:
        click.echo(f"{'*' if model == configured else ' '} {model}")
    if configured and offered and configured not in offered:
        click.echo(f"model {configured} is not among them: set processor.model to one that is")


async def _offered(state: CliState, settings: OreSettings) -> list[str] | None:
    """The models the processor offers; None for a processor that cannot say."""
    async with opened_processor(state.plugin_manager, settings) as processor:
        ask: Callable[[], Coroutine[Any, Any, list[str]]] | None = getattr(
            processor, "models", None
        )
        if ask is None:
            return None
        async with asyncio.timeout(ASK_TIMEOUT):
            return list(await ask())
