"""`ore serve` rough edges (issue 28, item 13)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.ore_process import ORE, run_ore

pytestmark = pytest.mark.slow  # starts ore serve


def test_a_taken_port_is_one_short_line_quoting_the_servers_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_ore("serve", "--port", str(port))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "another process holds one of its ports" in line
    assert f'127.0.0.1:{port}: bind: address already in use"' in line
    assert "JETSTREAM" not in line  # nats-server's start-up banner
    assert len(re.sub(r"\(store [^)]*\)", "", line)) < 500  # the store's path is the test's


INTERRUPT_WHILE_IMPORTING = """
import sys

class CtrlC:
    '''Ctrl-C pressed while `ore` imports its command line (deterministically).'''

    def find_spec(self, name, path, target=None):
        if name == "ore_core.cli.main":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["ore", "serve"]
from ore_core.cli_entry import run
run()
"""


def test_ctrl_c_while_ore_is_still_importing_exits_130_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_IMPORTING],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 130
    assert result.stderr == "\n"


def test_the_ore_script_runs_the_guarded_entry_point() -> None:
    assert "from ore_core.cli_entry import run" in ORE.read_text(encoding="utf-8")
