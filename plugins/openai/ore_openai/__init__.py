"""ore-openai: an ore turn processor for OpenAI-compatible chat completion APIs.

Select it with `processor.name = "openai"`; see `OpenAIConfig` for the settings.
The names below load on first use: ore imports this package's plugin module for every
command (`ore --help` too), and the OpenAI SDK is needed only when a chat runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ore_openai.config import OpenAIConfig
    from ore_openai.errors import ModelCallFailed, OpenAIConfigError
    from ore_openai.processor import OpenAIProcessor

__all__ = ["ModelCallFailed", "OpenAIConfig", "OpenAIConfigError", "OpenAIProcessor"]

_EXPORTS = {
    "ModelCallFailed": "ore_openai.errors",
    "OpenAIConfig": "ore_openai.config",
    "OpenAIConfigError": "ore_openai.errors",
    "OpenAIProcessor": "ore_openai.processor",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ore_openai' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
