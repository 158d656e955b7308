"""The core's tests use the ore pytest kit (opt-in: see `ore_core.testing`)."""

pytest_plugins = ["ore_core.testing"]
