"""`ore serve` rough edges (issue 28, item 13)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts ore serve

ORE = Path(sys.executable).with_name("ore")


def test_a_taken_port_is_one_short_line_quoting_the_servers_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(ORE), "serve", "--port", str(port)],
            env={**os.environ, "ORE_LOAD_PLUGINS": ""},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "another process holds one of its ports" in line
    assert f'127.0.0.1:{port}: bind: address already in use"' in line
    assert "JETSTREAM" not in line  # nats-server's start-up banner
    assert len(line) < 500
