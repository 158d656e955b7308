"""A damaged `threads.db`: named, with what to do, and no "ready" (issue 28, item 9)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ore_core.errors import StoreError
from ore_core.session.stores import SQLiteStore
from tests.ore_process import run_ore, start_serve_until_ready


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A `threads.db` that is not a database (bytes of a torn copy)."""
    path = tmp_path / "threads.db"
    path.write_bytes(b"not an sqlite database " * 2000)
    return path


async def test_a_damaged_file_is_named_with_what_to_do(damaged: Path) -> None:
    store = SQLiteStore(damaged)
    try:
        with pytest.raises(StoreError) as raised:
            await store.check()
    finally:
        await store.close()
    assert str(damaged) in str(raised.value)
    assert f"move {damaged} aside" in str(raised.value)


@pytest.mark.slow
def test_serve_on_a_damaged_store_says_so_in_one_line_and_never_ready(damaged: Path) -> None:
    result = run_ore("serve", "--port", "0", ORE_STORE__PATH=str(damaged))
    assert result.returncode == 1
    assert "ready" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1
    assert f"move {damaged} aside" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_chat_on_a_damaged_store_says_so_in_one_line(damaged: Path) -> None:
    result = run_ore("chat", "hello", ORE_STORE__PATH=str(damaged))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert f"move {damaged} aside" in result.stderr


@pytest.mark.slow
def test_serve_with_the_jetstream_store_starts_without_a_store_error(tmp_path: Path) -> None:
    """Issue 28, item 8: the store probe waited for nothing and failed before the store
    was bound to the core's NATS connection."""
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        process = start_serve_until_ready(stderr, "--store", "jetstream", ORE_LOG__FORMAT="json")
    try:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert '"level":"error"' not in log.read_text()
