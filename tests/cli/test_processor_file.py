"""`--processor FILE.py:NAME`: a processor from a plain Python file (issue 41, item 8).

The example file of docs/writing-a-turn-processor.md answers through the real `ore chat`
and `ore serve`; every way a file can fail to give a processor is one line.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner

from ore_core.cli import main
from tests.cli.test_cli_serve import Served, read_until, start_serve  # noqa: F401 (fixture)
from tests.docs.support import page_blocks
from tests.ore_process import ORE

TIMEOUT = 120.0
(FIRST_EXPERIMENT, _PLUGIN) = page_blocks("writing-a-turn-processor.md")


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-conduit-stdin")


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    """The page's `mine.py`, saved as the page says."""
    path = tmp_path / "mine.py"
    path.write_text(FIRST_EXPERIMENT)
    return path


def chat_env(tmp_path: Path) -> dict[str, str]:
    """An `ore chat` process of its own: its own directories, only the stdin conduit."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ORE_", "OPENAI_"))}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {
        **env,
        "XDG_STATE_HOME": str(tmp_path / "chat" / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "chat" / "config"),
        "TMPDIR": str(tmp_path / "tmp"),
        "ORE_LOAD_PLUGINS": "ore-conduit-stdin",
    }


def run_chat(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORE), "chat", *args],
        input="",
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=TIMEOUT,
        check=False,
    )


def error_line(*args: str) -> str:
    """The one line `ore chat ARGS` fails with (through the real command line)."""
    result = CliRunner().invoke(main, ["chat", *args], input="")
    structlog.reset_defaults()  # the CLI configures logging process-wide
    assert result.exit_code == 1, result.output
    (line,) = result.output.splitlines()
    return line


@pytest.mark.slow
def test_the_pages_example_file_answers_ore_chat(tmp_path: Path, mine: Path) -> None:
    chat = run_chat(tmp_path, "--processor", f"{mine}:Shout", "hello there")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "HELLO THERE\n"
    assert chat.stderr == "answering with mine.py:Shout\n"


@pytest.mark.slow
async def test_the_pages_example_file_answers_every_conduit_of_ore_serve(
    start_serve: Callable[..., Served],  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    mine: Path,
) -> None:
    served = start_serve("--processor", f"{mine}:Shout")
    lines = await read_until(served, "ore core ready")
    assert "answering with mine.py:Shout" in lines
    (url,) = re.findall(r"NATS (nats://\S+)", lines[-1])
    chat = run_chat(tmp_path, "--nats", url, "hello there")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "HELLO THERE\n"
    assert await served.terminate() == 0


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    spec = f"{tmp_path}/nowhere.py:Shout"
    assert error_line("--processor", spec, "hi") == (
        f"Error: --processor {spec}: no file {tmp_path}/nowhere.py"
    )


def test_a_spec_without_a_name_says_the_form(mine: Path) -> None:
    assert error_line("--processor", str(mine), "hi") == (
        f"Error: --processor {mine}: name the file and the processor, "
        "FILE.py:NAME, e.g. ./mine.py:Shout"
    )


def test_a_name_the_file_does_not_define_is_one_line_listing_what_it_does(mine: Path) -> None:
    assert error_line("--processor", f"{mine}:Whisper", "hi") == (
        f"Error: --processor {mine}:Whisper: {mine} defines no Whisper "
        "(it defines: Artifact, AsyncIterator, Shout, TextDelta, TurnContext)"
    )


def test_something_that_is_not_a_processor_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plain.py"
    path.write_text("class Plain:\n    def __call__(self, ctx):\n        return None\n")
    assert error_line("--processor", f"{path}:Plain", "hi") == (
        f"Error: --processor {path}:Plain: Plain is not a turn processor: use a class with "
        "`async def __call__(self, ctx)` or an `async def Plain(ctx)` function"
    )


def test_a_file_that_fails_while_loading_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import no_such_module_anywhere\n")
    assert error_line("--processor", f"{path}:Shout", "hi") == (
        f"Error: --processor {path}:Shout: {path} failed to load: "
        "ModuleNotFoundError: No module named 'no_such_module_anywhere'"
    )


def test_an_async_function_is_a_processor_too(tmp_path: Path) -> None:
    from ore_core.cli.processor_file import load_processor_file

    path = tmp_path / "function.py"
    path.write_text("async def answer(ctx):\n    pass\n")
    assert load_processor_file(f"{path}:answer").name == "function.py:answer"


def test_processor_with_a_core_elsewhere_is_refused() -> None:
    result = CliRunner().invoke(
        main, ["chat", "--processor", "mine.py:Shout", "--nats", "nats://127.0.0.1:1", "hi"]
    )
    structlog.reset_defaults()
    assert result.exit_code == 2
    assert "--processor chooses how the core `ore chat` starts answers" in " ".join(
        result.output.split()
    )
