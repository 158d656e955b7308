"""Errors of the OpenAI-compatible turn processor (all `OreError`s)."""

from __future__ import annotations

from ore_core import OreError

__all__ = ["ModelCallFailed", "OpenAIConfigError"]


class OpenAIConfigError(OreError, ValueError):
    """The processor's configuration section is invalid; the message names the field."""


class ModelCallFailed(OreError):
    """The model server refused, kept failing, or broke off the stream.

    `status` is the last HTTP status (None for connection problems and cut streams).
    Nothing of the failed call is recorded in the thread.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
