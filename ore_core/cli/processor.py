"""One way to choose the turn processor, for every command that runs or describes a core.

`ore serve`, `ore chat` (and `ore config`, `ore doctor`, which describe what those
would do) all call `choose_processor`: an explicitly configured `processor.name`
wins; otherwise the `openai` processor answers when the ore-openai plugin is
installed and the environment names an endpoint (`OPENAI_API_KEY` or
`ORE_OPENAI_BASE_URL`); otherwise echo, with the reason. `answering_line` is the one
line each command prints at start, so nobody is left guessing who answers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import pluggy

from ore_core.config import OreSettings, ProcessorSettings
from ore_core.plugins.builtin.processors import ECHO
from ore_core.plugins.manager import plugin_callers

__all__ = [
    "MODEL_ENDPOINT_ENV",
    "MODEL_PROCESSOR",
    "ProcessorChoice",
    "answering_line",
    "choose_processor",
    "turn_processors",
]

MODEL_PROCESSOR = "openai"
MODEL_ENDPOINT_ENV = ("OPENAI_API_KEY", "ORE_OPENAI_BASE_URL")
"""The variables the ore-openai plugin reads (ore_openai.config); the core cannot import it."""

_SET_ENDPOINT = (
    "set OPENAI_API_KEY or ORE_OPENAI_BASE_URL "
    "(e.g. ORE_OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama)"
)
_INSTALL_MODEL = "pip install ./plugins/openai (the ore-openai plugin), then "


@dataclass(frozen=True, slots=True)
class ProcessorChoice:
    """The settings to run with, how the processor was chosen, and why echo (if it is)."""

    settings: OreSettings
    source: str
    """`processor.name` set explicitly (`config`), picked from the environment (`auto`), or
    the default."""
    echo_reason: str | None = None


def turn_processors(plugins: pluggy.PluginManager) -> list[str]:
    """Names of the registered turn processors (failing plugins are reported elsewhere)."""
    names: list[str] = []
    for _, caller in plugin_callers(plugins, "ore_register_turn_processors"):
        try:
            caller(register=lambda name, factory: names.append(name))
        except Exception:  # build_runtime names the plugin when it fails there too
            continue
    return names


def choose_processor(
    settings: OreSettings,
    processors: Collection[str],
    environ: Mapping[str, str],
    *,
    from_file: str | None = None,
) -> ProcessorChoice:
    """Which processor answers with these settings, plugins and environment; `from_file`
    (the processor of `--processor FILE.py:NAME`) wins over all of them."""
    if from_file is not None:
        processor = ProcessorSettings.model_validate(
            {**settings.processor.model_dump(), "name": from_file}
        )
        return ProcessorChoice(settings.model_copy(update={"processor": processor}), "--processor")
    explicit = any(
        value.key == "processor.name" and value.source != "default"
        for value in settings.describe_sources()
    )
    if explicit:
        reason = None if settings.processor.name != ECHO else "processor.name is echo"
        return ProcessorChoice(settings, "config", reason)
    installed = MODEL_PROCESSOR in processors
    named = [name for name in MODEL_ENDPOINT_ENV if environ.get(name)]
    if installed and named:
        processor = ProcessorSettings.model_validate(
            {**settings.processor.model_dump(), "name": MODEL_PROCESSOR}
        )
        return ProcessorChoice(
            settings.model_copy(update={"processor": processor}), f"auto: {named[0]} is set"
        )
    install = "" if installed else _INSTALL_MODEL
    return ProcessorChoice(settings, "default", f"no model configured, {install}{_SET_ENDPOINT}")


def answering_line(
    processor: str,
    description: str,
    choice: ProcessorChoice,
    interceptors: Mapping[str, str] | None = None,
) -> str:
    """The line printed at start: `answering with openai model X at URL`, or echo and why,
    then what each described interceptor does (`guard: 20 messages at once, ...`)."""
    if processor == ECHO:
        reason = choice.echo_reason or f"processor {choice.settings.processor.name!r} is missing"
        line = f"answering with echo: {reason}"
    else:
        line = f"answering with {description}"
    return "".join([line, *(f"; {name}: {text}" for name, text in (interceptors or {}).items())])
