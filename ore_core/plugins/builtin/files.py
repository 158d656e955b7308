"""Built-in: the core checks the files of every message against `[files]` (issue 39)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ore_core.files.interceptor import FilePolicyInterceptor
from ore_core.files.policy import FilePolicy
from ore_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from ore_core.config import OreSettings
    from ore_core.session.protocols import Interceptor

__all__ = ["ore_configure", "ore_register_interceptors"]

# Kept from ore_configure until the registration hook, which ore calls right after it.
_policy = FilePolicy()


@hookimpl
def ore_configure(config: OreSettings) -> None:
    """Keep the `[files]` policy."""
    global _policy
    _policy = FilePolicy.from_settings(config.files)


@hookimpl
def ore_register_interceptors(register: Callable[[Interceptor], None]) -> None:
    """Register the check of each message's files."""
    register(FilePolicyInterceptor(_policy))
