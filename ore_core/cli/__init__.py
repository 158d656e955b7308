"""The `ore` command line.

`main` is the click group (`ore = ore_core.cli:main`); each core command is a module
of this package (`serve`, `chat`, `conduit`, `threads`), imported only when used;
`options` holds what several commands share. Plugin commands (registered with
`ore_register_commands`) reach the invocation's settings through `cli_state()`.
"""

from ore_core.cli.main import main
from ore_core.cli.options import CliState, cli_state

__all__ = ["CliState", "cli_state", "main"]
