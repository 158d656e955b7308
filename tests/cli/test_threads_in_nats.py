"""`ore threads` and `ore doctor` on a deployment whose store lives in NATS (issue 28,
item 8): they go through the running `ore serve`'s control API."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ore_process import run_ore, start_serve_until_ready

pytestmark = pytest.mark.slow  # starts ore serve


def ore(*args: str) -> subprocess.CompletedProcess[str]:
    return run_ore(*args, plugins="ore-conduit-stdin")


@pytest.fixture
def jetstream_serve(tmp_path: Path) -> Iterator[None]:
    """`ore serve --store jetstream`, ready, with one conversation; stopped after the test."""
    with (tmp_path / "serve.log").open("w") as log:
        process = start_serve_until_ready(log, "--store", "jetstream")
    try:
        chat = ore("chat", "--nats", "auto", "hello from the test")
        assert chat.returncode == 0, chat.stderr
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        if process.stdout is not None:
            process.stdout.close()


def test_threads_lists_and_shows_the_threads_of_the_jetstream_store(
    jetstream_serve: None,
) -> None:
    listed = ore("threads", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (summary,) = json.loads(listed.stdout)
    assert summary["title"] == "hello from the test"
    shown = ore("threads", "show", summary["id"][:8])
    assert shown.returncode == 0, shown.stderr
    assert "through ore serve at nats://127.0.0.1:" in shown.stdout.splitlines()[0]
    assert "  hello from the test" in shown.stdout.splitlines()


def test_doctor_reads_the_jetstream_store_through_the_running_serve(
    jetstream_serve: None,
) -> None:
    doctor = ore("doctor", "--json")
    checks = {check["part"]: check for check in json.loads(doctor.stdout)}
    assert checks["store"]["status"] == "ok"
    assert checks["store"]["found"].startswith("jetstream (through ore serve at")
    assert checks["store"]["found"].endswith(": 1 thread(s) readable")
