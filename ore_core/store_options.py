"""The `[store]` table as each store factory reads it: its own keys, validated.

A store factory (built in or a plugin's) gets the `[store]` section as a mapping and
validates the keys its store understands with a model derived from `StoreOptions`; a
misspelt or foreign key is a `ConfigError` naming it, never silently ignored. Kept
apart from the factories so the session's stores and the bus's JetStream store
validate alike without one importing the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ore_core.config import ConfigError
from ore_core.errors import describe_validation_error

__all__ = ["StoreOptions", "store_options"]

_Options = TypeVar("_Options", bound="StoreOptions")


class StoreOptions(BaseModel):
    """The keys every store takes; unknown keys are errors (they are almost always typos).

    `name` (the `store.name` that chose the factory) is accepted and ignored.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""


def store_options(model: type[_Options], store: str, section: Mapping[str, Any]) -> _Options:
    """`section` validated by `model`; a `ConfigError` naming each bad `store.*` key."""
    try:
        return model.model_validate(dict(section))
    except ValidationError as exc:
        problems = describe_validation_error(
            exc,
            key_prefix="store.",
            show_input=True,
            origin=lambda _: f"store {store!r}",
            known_keys=[name for name in model.model_fields if name != "name"],
        )
        raise ConfigError(f"invalid [store] configuration: {problems}") from None
