"""`ore new conduit`: a conduit of the engine's shape, a NAME it can run under, and the
guide that goes on from the generated files (issue 43). The generated package's own
tests (the conformance kit against its fake) run in tests/test_new.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

from ore_core.cli import main
from ore_core.conduit import Edit, Message, PlatformConduit
from ore_core.scaffold import PluginNames, plan, write
from tests.scaffold.guides import diff_of, patched


def render(directory: Path, name: str) -> None:
    write(plan("conduit", PluginNames.of(name)), directory, force=True)


@pytest.mark.parametrize("name", ["chat_room", "a" * 33])
def test_a_name_no_conduit_can_run_under_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    result = CliRunner().invoke(main, ["new", "conduit", name, str(tmp_path / "out"), "--yes"])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {name!r} is not a conduit name: at most 32")
    assert result.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_generated_conduit_is_a_platform_conduit_running_its_adapter(
    generated: Path,
) -> None:
    render(generated, "shape-check")
    from ore_shape_check.conduit import ShapeCheckConduit  # type: ignore[import-not-found]

    assert issubclass(ShapeCheckConduit, PlatformConduit)
    assert "run" not in vars(ShapeCheckConduit)  # the engine's run, not one of its own
    config = ShapeCheckConduit.load_config({"api_url": "http://127.0.0.1:1", "token": "t"})
    adapter = ShapeCheckConduit().platform(config, None)  # type: ignore[arg-type]
    assert type(adapter).__name__ == "ShapeCheckPlatform"
    assert type(adapter).capabilities == ShapeCheckConduit.capabilities


async def test_the_conduit_guides_edit_applies_to_the_generated_adapter_and_yields_edits(
    generated: Path,
) -> None:
    render(generated, "room")
    platform_py = generated / "ore_room" / "platform.py"
    platform_py.write_text(patched(platform_py.read_text(), diff_of("writing-a-conduit.md")))
    from ore_room.platform import RoomPlatform  # type: ignore[import-not-found]
    from ore_room.testing import FakeRoom  # type: ignore[import-not-found]

    fake = await FakeRoom().start()
    adapter = RoomPlatform(fake.url, fake.token, poll_timeout=5.0)
    try:
        await adapter.connect()
        said = await fake.user_says("general", "helo")
        await fake.user_edits("general", said, "hello")
        events = adapter.events()
        async with asyncio.timeout(10):  # the skeleton's adapter would skip the edit
            first, second = [await anext(events) for _ in range(2)]
        await events.aclose()
    finally:
        await adapter.close()
        await fake.close()
    assert isinstance(first, Message)
    assert isinstance(second, Edit)
    assert (second.target, second.text) == (said, "hello")
    assert RoomPlatform.capabilities.edits_arrive
