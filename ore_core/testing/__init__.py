"""The pytest plugin for ore plugin authors (registered under `pytest11` as `ore`).

Fixtures: `ore_plugin_manager`, `register_plugin`, `ore_isolated_env` (plugins);
`mock_openai` (a scripted OpenAI-compatible HTTP server); `nats_server`, `nats_url`,
`nats_client`, `nats_cluster` (real nats-server processes on free loopback ports).
`conduit_core`, `start_conduit` (a real core and a conduit under test). Processors for
tests live in `ore_core.testing.processors`; the conformance suites for stores and
conduits in `ore_core.testing.store_conformance` and `.conduit_conformance`.
"""

# The fixture modules are loaded as plugins of their own, so their names never shadow
# the submodules of this package.
pytest_plugins = [
    "ore_core.testing.plugins",
    "ore_core.testing.mock_openai",
    "ore_core.testing.nats",
    "ore_core.testing.conduit_conformance",
]
