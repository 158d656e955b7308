"""A damaged `threads.db`: named, with what to do, and no "ready" (issue 28, item 9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ore_core.errors import StoreError
from ore_core.session.stores import SQLiteStore

ORE = Path(sys.executable).with_name("ore")


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
    result = subprocess.run(
        [str(ORE), "serve", "--port", "0"],
        env={**os.environ, "ORE_LOAD_PLUGINS": "", "ORE_STORE__PATH": str(damaged)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "ready" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1
    assert f"move {damaged} aside" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_chat_on_a_damaged_store_says_so_in_one_line(damaged: Path) -> None:
    result = subprocess.run(
        [str(ORE), "chat", "hello"],
        env={**os.environ, "ORE_LOAD_PLUGINS": "", "ORE_STORE__PATH": str(damaged)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
        process = subprocess.Popen(
            [str(ORE), "serve", "--port", "0", "--store", "jetstream"],
            env={**os.environ, "ORE_LOAD_PLUGINS": "", "ORE_LOG__FORMAT": "json"},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("ore core ready"):
                break
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert '"level":"error"' not in log.read_text()
