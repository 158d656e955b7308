"""sigint_calls: Ctrl-C runs a callback during a reply, and the old handler comes back."""

from __future__ import annotations

import asyncio
import signal

from ore_conduit_stdin.interactive import sigint_calls


async def test_sigint_inside_the_block_calls_the_callback() -> None:
    called = asyncio.Event()
    with sigint_calls(called.set):
        signal.raise_signal(signal.SIGINT)
        await asyncio.wait_for(called.wait(), 30)
    assert called.is_set()


async def test_the_previous_handler_is_back_after_the_block() -> None:
    before = signal.getsignal(signal.SIGINT)
    with sigint_calls(lambda: None):
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
