"""The public surface (`ore_core`) and the light conduit SDK (`ore_core.conduit`)."""

from __future__ import annotations

import pytest

import ore_core
from tests.project.import_support import modules_after as _modules_after

SDK_MODULES = {
    # The vocabulary a conduit speaks.
    "ore_core": "the public face",
    "ore_core.artifacts": "the artifacts' face",
    "ore_core.artifacts.base": "Artifact and its registry",
    "ore_core.artifacts.kinds": "Text, Image, ...: what a message carries",
    "ore_core.artifacts.attachment": "Attachment: a file a message refers to (issue 39)",
    "ore_core.files": "upload and fetch attachments (issue 39)",
    "ore_core.files.policy": "which files are taken: size and media types (issue 39)",
    "ore_core.files.store": "uploads stored once by content (issue 39)",
    "ore_core.files.remote": "ConduitFiles: a conduit writes, and reads through the core",
    "ore_core.files.reading": "the reader processors use in the core (issue 39)",
    "ore_core.errors": "the OreError tree",
    "ore_core.events": "the wire schema of every event",
    "ore_core.ids": "thread and event ids",
    "ore_core.jsonutil": "the one JSON codec",
    "ore_core.subjects": "subject names",
    "ore_core.turn": "Turn, carried by turn_complete",
    # The transport.
    "ore_core._nats": "the face of the one place that knows nats-py's internals",
    "ore_core._nats.connection": "connect, credentials, TLS (issue 27)",
    "ore_core._nats.publisher": "acked sends (issue 27)",
    "ore_core._nats.object_store": "object store reads by name only (issue 39)",
    "ore_core.tracing": "the publish and delivery spans (issue 33; OpenTelemetry loads only "
    "once tracing is enabled)",
    # The SDK itself.
    "ore_core.conduit": "the SDK's face",
    "ore_core.conduit.base": "Conduit, ConduitConfig",
    "ore_core.conduit.capabilities": "what a platform can show",
    "ore_core.conduit.client": "ConduitClient",
    "ore_core.conduit.requests": "one control API request and its errors, shared by "
    "ConduitClient and ControlClient (issue 37)",
    "ore_core.conduit.counters": "the conduit metrics (issue 33)",
    "ore_core.conduit.feed": "EventFeed: a thread's output, live and caught up",
    "ore_core.conduit.waiting": "the one retry policy while the core is away (issue 36)",
    "ore_core.endpoint": "the endpoint grammar: a conduit declares its key's form (issue 41)",
}
"""Every module `from ore_core import Conduit, ConduitClient, ...` may load, each with the
reason it was reviewed for: a module that is not listed fails the test below, so the SDK
grows only by a decision, never by accident (and never by squeezing a module to fit)."""


@pytest.mark.parametrize("name", ore_core.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(ore_core, name) is not None


def test_public_names_are_the_objects_of_their_defining_modules() -> None:
    from ore_core.conduit import ConduitClient
    from ore_core.errors import OreError
    from ore_core.turn import Turn

    assert ore_core.ConduitClient is ConduitClient
    assert ore_core.OreError is OreError
    assert ore_core.Turn is Turn


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = ore_core.no_such_name  # type: ignore[attr-defined]


def test_import_ore_core_loads_only_the_package() -> None:
    assert _modules_after("import ore_core") == ["ore_core"]


def test_import_ore_core_bus_does_not_load_the_core_service() -> None:
    assert _modules_after("import ore_core.bus") == ["ore_core", "ore_core.bus"]


@pytest.mark.parametrize(
    "statement",
    [
        "import ore_core.conduit",
        "from ore_core import Conduit, ConduitClient, ConduitConfig, UserMessageEvent, Text",
    ],
)
def test_the_conduit_sdk_stays_small(statement: str) -> None:
    loaded = _modules_after(statement)
    assert [name for name in loaded if name not in SDK_MODULES] == []
    heavy = ("ore_core.session", "ore_core.ledger", "ore_core.bus.", "ore_core.plugins")
    assert [name for name in loaded if name.startswith(heavy)] == []
