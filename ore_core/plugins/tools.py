"""Tools that LLM turn processors may offer to a model, registered by plugins.

A tool is plain data plus an async function, so any processor (OpenAI-compatible
or not) can describe it to its model and call it: `ore_register_tools` collects them
at start-up and processors pick them from `Registrations.tools` by name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Tool", "ToolFunction"]

ToolFunction = Callable[..., Awaitable[Any]]
"""`async fn(**arguments) -> result`: arguments are the model's JSON object, unpacked."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A function a model may call.

    `name` is what the model calls it (letters, digits, `_` and `-`, at most 64: the
    common limit of LLM APIs); `description` tells the model when to use it;
    `parameters` is the JSON Schema of the arguments object (`{"type": "object", ...}`);
    `function` is awaited with those arguments as keywords. The registry checks all
    of this when the tool is registered, so a processor can trust every field.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: ToolFunction

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Run the tool with the model's arguments and return its result."""
        return await self.function(**arguments)
