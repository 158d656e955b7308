"""The pluggy plugin: registers the `openai` turn processor (entry point `ore: openai`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ore_core import Tool, hookimpl
from ore_core.session.protocols import TurnProcessorFactory

if TYPE_CHECKING:
    from ore_openai.processor import OpenAIProcessor

__all__ = ["PROCESSOR_NAME", "create_processor", "ore_register_turn_processors"]

PROCESSOR_NAME = "openai"


def create_processor(
    section: Mapping[str, Any], tools: Mapping[str, Tool] | Iterable[Tool] = ()
) -> OpenAIProcessor:
    """Build the processor from its `[processor]` section (and env), offering `tools`.

    The processor and the OpenAI SDK are imported here, when a processor is built:
    registering it (every `ore` command loads the plugin) stays cheap.
    """
    from ore_openai.config import OpenAIConfig
    from ore_openai.processor import OpenAIProcessor

    return OpenAIProcessor(OpenAIConfig.load(section), tools)


@hookimpl
def ore_register_turn_processors(register: Callable[[str, TurnProcessorFactory], None]) -> None:
    """Offer `processor.name = "openai"`."""
    register(PROCESSOR_NAME, create_processor)
