"""The repository's tests (core, plugins, conduits) use the ore pytest kit.

The kit is opt-in (see `ore_core.testing`); opting in here, at the top level, covers
every test directory in `testpaths`.
"""

pytest_plugins = ["ore_core.testing"]
