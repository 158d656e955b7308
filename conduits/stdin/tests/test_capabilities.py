"""What the terminal declares about itself."""

from __future__ import annotations

from ore_conduit_stdin.conduit import StdinConduit


def test_the_terminal_asks_for_deltas_every_30_ms() -> None:
    # A terminal shows text as it comes; the core's default 100 ms suits rate-limited APIs.
    assert StdinConduit.capabilities.delta_interval == 0.03
