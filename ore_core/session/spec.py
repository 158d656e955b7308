"""ModelSpec: which model and sampling settings a turn asks for.

Derived from thread metadata (`ore.model.*` keys) so that `/model NAME` in any
conduit changes the model of the next turn. Parsing is tolerant: an unparsable
number is ignored rather than failing the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "KEY_MAX_OUTPUT_TOKENS",
    "KEY_MODEL_NAME",
    "KEY_TEMPERATURE",
    "KEY_THINKING_LEVEL",
    "ModelSpec",
]

KEY_MODEL_NAME = "ore.model.name"
KEY_THINKING_LEVEL = "ore.model.thinking_level"
KEY_TEMPERATURE = "ore.model.temperature"
KEY_MAX_OUTPUT_TOKENS = "ore.model.max_output_tokens"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Model name and sampling settings; empty/None fields mean "processor default"."""

    name: str = ""
    thinking_level: str = ""
    temperature: float | None = None
    max_output_tokens: int | None = None

    @property
    def is_empty(self) -> bool:
        """True when nothing is set (the processor uses its configured defaults)."""
        return self == ModelSpec()

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> ModelSpec:
        """Read the `ore.model.*` keys; without a model name the spec is empty."""
        name = metadata.get(KEY_MODEL_NAME, "")
        if not name:
            return cls()
        temperature: float | None
        try:
            temperature = float(metadata[KEY_TEMPERATURE])
        except (KeyError, ValueError):
            temperature = None
        max_tokens: int | None
        try:
            max_tokens = int(metadata[KEY_MAX_OUTPUT_TOKENS])
        except (KeyError, ValueError):
            max_tokens = None
        return cls(
            name=name,
            thinking_level=metadata.get(KEY_THINKING_LEVEL, ""),
            temperature=temperature,
            max_output_tokens=max_tokens if max_tokens and max_tokens > 0 else None,
        )
