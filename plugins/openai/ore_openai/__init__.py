"""ore-openai: an ore turn processor for OpenAI-compatible chat completion APIs.

Select it with `processor.name = "openai"`; see `OpenAIConfig` for the settings.
"""

from ore_openai.config import OpenAIConfig
from ore_openai.errors import ModelCallFailed, OpenAIConfigError
from ore_openai.processor import OpenAIProcessor

__all__ = ["ModelCallFailed", "OpenAIConfig", "OpenAIConfigError", "OpenAIProcessor"]
