"""Doorbell: wakes one background thread for rounds of work after writes.

The journal's group commit (`FileRepository`, fsync policy `batch`) and the SQLite
store's WAL checkpointer work the same way: writers ring cheaply from any thread, a
daemon thread started by the first ring does one round for a burst of rings, rests
between rounds, and ends when the owner stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Doorbell"]


class Doorbell:
    """Starts `target` in a daemon thread named `name` on the first `ring`.

    `target` loops on `wait()` (True: rung since the last look, the ring taken; False:
    stopped, return) and `rest(seconds)` between rounds. `ring` may be called from any
    thread; `rung` reads the flag without the lock, so a writer can skip ringing a bell
    that is already ringing. After `stop` a ring starts nothing.
    """

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self._name = name
        self._target = target
        self._condition = threading.Condition()
        self.rung = False  # rung since the thread last took a ring
        self._stopping = False
        self._thread: threading.Thread | None = None

    def ring(self) -> None:
        """Note work to do: the thread takes it at its next `wait`."""
        with self._condition:
            if self._stopping:
                return
            self.rung = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._target, name=self._name, daemon=True)
                self._thread.start()
            self._condition.notify()

    def wait(self) -> bool:
        """(In the thread.) Block until rung or stopped: True and the ring taken, or False."""
        with self._condition:
            self._condition.wait_for(lambda: self.rung or self._stopping)
            if self._stopping:
                return False
            self.rung = False
            return True

    def rest(self, seconds: float) -> None:
        """(In the thread.) Sleep `seconds` between rounds; `stop` cuts it short."""
        with self._condition:
            self._condition.wait_for(lambda: self._stopping, timeout=seconds)

    def stop(self) -> None:
        """End the thread after its round in progress, if any, and wait for it. Idempotent."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
