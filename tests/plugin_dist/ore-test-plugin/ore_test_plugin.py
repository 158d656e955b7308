"""An ore plugin implementing every hook, installed editable so ore's tests load it
through its real `ore` entry point (distribution `ore-test-plugin`).

Everything it registers is harmless when loaded by other tests: the interceptor passes
events on unchanged, the sink only records, names are prefixed `ore-test`.
`calls` records the lifecycle hooks (configure, startup, shutdown) in call order.

`ORE_TEST_CRASH=ingress-ack` (set only by the crash test of `ore serve`) makes the
core's ingress acknowledgement loop crash at its first acknowledgement: a loop crash is
a bug by definition, nothing a client sends can cause one, and a plugin is how code
gets into a real `ore serve` process unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

import click

from ore_core import Artifact, InterceptResult, Role, Text, Tool, hookimpl

calls: list[tuple[str, Any]] = []


class Note(Artifact):
    """A plugin-defined artifact kind."""

    __slots__ = ("text",)
    KIND: ClassVar[str] = "ore_test.note"

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Note) and other.text == self.text

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Note:
        return cls(str(data.get("text", "")))


class PassThrough:
    """An interceptor that hands every event on unchanged."""

    name = "ore-test.pass-through"
    order = 50

    async def intercept(self, event: Any, stream: Any) -> InterceptResult:
        return InterceptResult(event)


class Recorder:
    """A sink that keeps the events it receives."""

    name = "ore-test.recorder"
    kinds = frozenset({"turn_complete"})

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def emit(self, thread_id: str, event: Any) -> None:
        self.events.append((thread_id, event))


class SectionStore:
    """What the store factory builds: it keeps the config section it was given."""

    name = "ore-test"

    def __init__(self, section: Mapping[str, Any]) -> None:
        self.section = dict(section)


class Shout:
    """A turn processor that answers with the user's message in capitals."""

    def __init__(self, section: Mapping[str, Any]) -> None:
        self.section = dict(section)

    async def __call__(self, ctx: Any) -> None:
        await ctx.append(Role.ASSISTANT, Text(ctx.event.content.upper()))


class QuietConduit:
    """A conduit that returns as soon as it runs."""

    name = "ore-test"

    async def run(self, client: Any, config: Any) -> None:
        return None


async def add(a: int, b: int) -> int:
    return a + b


ADD = Tool(
    name="ore_test_add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    function=add,
)


@hookimpl
def ore_configure(config: Any) -> None:
    calls.append(("configure", config))


@hookimpl
def ore_register_interceptors(register: Any) -> None:
    register(PassThrough())


@hookimpl
def ore_register_sinks(register: Any) -> None:
    register(Recorder())


@hookimpl
def ore_register_stores(register: Any) -> None:
    register("ore-test", SectionStore)


@hookimpl
def ore_register_turn_processors(register: Any) -> None:
    register("ore-test-shout", Shout)


@hookimpl
def ore_register_conduits(register: Any) -> None:
    register(QuietConduit)


@hookimpl
def ore_register_artifact_kinds(register: Any) -> None:
    register(Note)


@hookimpl
def ore_register_tools(register: Any) -> None:
    register(ADD)


@hookimpl
def ore_register_commands(cli: click.Group) -> None:
    @cli.command(name="ore-test-hello")
    def hello() -> None:
        """Greet with the `greeting` of [plugins.test] (default: hello)."""
        from ore_core.cli import cli_state

        greeting = cli_state().settings.plugin_config("test").get("greeting", "hello")
        click.echo(f"{greeting} from ore-test-plugin")


@hookimpl
def ore_compact(config: Any) -> None:
    """Offers no summariser: the next plugin's (or the processor's) is used."""


@hookimpl
async def ore_startup(manager: Any) -> None:
    calls.append(("startup", manager))
    if os.environ.get("ORE_TEST_CRASH") == "ingress-ack":
        _crash_the_ingress_ack_loop()


def _crash_the_ingress_ack_loop() -> None:
    from ore_core.bus.ingress.acks import AckBatcher

    async def crashing_ack_loop(self: Any) -> None:
        await self._wakeup.wait()  # the first message handled: an ack to send
        raise RuntimeError("ore-test: injected crash of the ingress ack loop")

    AckBatcher.run = crashing_ack_loop  # type: ignore[method-assign]


@hookimpl
def ore_shutdown(manager: Any) -> None:
    calls.append(("shutdown", manager))
