"""The pluggy plugin (entry point `ore: guard = "ore_guard.plugin"`).

Both hooks run once at start-up; the interceptor they register is then awaited by the
core directly for every message, without going through pluggy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ore_core import hookimpl
from ore_guard.config import PLUGIN_NAME, GuardConfig
from ore_guard.interceptor import GuardInterceptor

if TYPE_CHECKING:
    from ore_core import Interceptor
    from ore_core.config import OreSettings

__all__ = ["ore_configure", "ore_register_interceptors"]

# A module plugin keeps what ore_configure hands it until the registration hooks,
# which ore calls right after it. Defaults apply when nothing configured the plugin.
_config = GuardConfig()


@hookimpl
def ore_configure(config: OreSettings) -> None:
    """Validate and keep the `[plugins.guard]` table (a bad one stops ore at start-up)."""
    global _config
    _config = GuardConfig.load(config.plugin_config(PLUGIN_NAME))


@hookimpl
def ore_register_interceptors(register: Callable[[Interceptor], None]) -> None:
    """Register a `GuardInterceptor` built from the kept settings."""
    register(GuardInterceptor(_config))
