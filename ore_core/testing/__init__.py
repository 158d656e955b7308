"""The pytest kit for ore plugin and conduit authors. Opt-in: nothing loads it for you.

Enable it in the suite's top-level `conftest.py`:

    pytest_plugins = ["ore_core.testing"]

or for one run with `pytest -p ore_core.testing`. It needs pytest-asyncio
(`pip install '.[testing]'` in a checkout of ore). Every fixture is prefixed `ore_`:

- plugins: `ore_plugin_manager`, `ore_register_plugin`, `ore_isolated_env`;
- NATS: `ore_nats_server`, `ore_nats_url`, `ore_nats_client`, `ore_nats_cluster`
  (real nats-server processes on free loopback ports);
- conduits: `ore_conduit_core`, `ore_start_conduit` (a real core and a conduit under
  test), `ore_bus_config` (that core's settings: override it to change them).

Processors for tests live in `ore_core.testing.processors`, the 3-node cluster in
`ore_core.testing.cluster`, and the conformance suites for stores and conduits in
`ore_core.testing.store_conformance` and `.conduit_conformance`; a store whose
writes fail on demand (disk full, read-only) in `ore_core.testing.faulty_store`; a conduit
run as a process to kill under load in `ore_core.testing.conduit_process`, `ore serve`
as one in `ore_core.testing.serve_process`, and a long run of many conversations under
such kills, or a burst into one under rate limits, counted, in
`ore_core.testing.long_run` (`LongRun`, `BurstRun`). A platform conduit's own tests
build on `ore_core.testing.harness` (its fake, a core with scripted answers, the
conduit, the waits). The scripted
OpenAI-compatible server is the openai plugin's (`ore_openai.testing`).
"""

try:
    import pytest_asyncio  # noqa: F401  (the fixtures below need it)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the ore pytest kit (ore_core.testing) needs pytest-asyncio: "
        "pip install '.[testing]' in a checkout of ore, or pip install pytest-asyncio"
    ) from exc

# The fixture modules are loaded as plugins of their own, so their names never shadow
# the submodules of this package.
pytest_plugins = [
    "ore_core.testing.plugins",
    "ore_core.testing.nats",
    "ore_core.testing.conduit_conformance",
]
