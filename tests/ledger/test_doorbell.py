"""Doorbell: the wake-up shared by the journal's group commit and the WAL checkpointer."""

from __future__ import annotations

import threading

from ore_core.ledger.doorbell import Doorbell

TIMEOUT = 30.0  # a bound for a wait that should end at once, never a measured duration


class Rounds:
    """A target that counts its rounds; it starts looking only once the test lets it."""

    def __init__(self) -> None:
        self.rounds = 0
        self.started = threading.Event()
        self.go = threading.Event()
        self.done = threading.Semaphore(0)
        self.bell = Doorbell("test-doorbell", self.serve)

    def serve(self) -> None:
        self.started.set()
        self.go.wait()
        while self.bell.wait():
            self.rounds += 1
            self.done.release()


def test_no_thread_starts_before_the_first_ring() -> None:
    rounds = Rounds()
    rounds.bell.stop()
    assert not rounds.started.is_set()


def test_the_first_ring_starts_the_thread_which_takes_the_ring() -> None:
    rounds = Rounds()
    rounds.bell.ring()
    assert rounds.started.wait(TIMEOUT)
    assert rounds.bell.rung
    rounds.go.set()
    assert rounds.done.acquire(timeout=TIMEOUT)
    assert not rounds.bell.rung
    rounds.bell.stop()
    assert rounds.rounds == 1


def test_a_burst_of_rings_makes_one_round() -> None:
    rounds = Rounds()
    for _ in range(5):
        rounds.bell.ring()
    rounds.go.set()
    assert rounds.done.acquire(timeout=TIMEOUT)
    rounds.bell.stop()
    assert rounds.rounds == 1


def test_stop_ends_the_thread_and_waits_for_it() -> None:
    rounds = Rounds()
    rounds.bell.ring()
    rounds.go.set()
    assert rounds.done.acquire(timeout=TIMEOUT)
    rounds.bell.stop()
    assert [t for t in threading.enumerate() if t.name == "test-doorbell"] == []


def test_a_ring_after_stop_starts_nothing() -> None:
    rounds = Rounds()
    rounds.bell.stop()
    rounds.bell.ring()
    assert not rounds.bell.rung
    assert not rounds.started.is_set()


def test_stop_cuts_a_rest_short() -> None:
    resting = threading.Event()

    def serve() -> None:
        while bell.wait():
            resting.set()
            bell.rest(24 * 3600)

    bell = Doorbell("test-doorbell-rest", serve)
    bell.ring()
    assert resting.wait(TIMEOUT)
    bell.stop()  # returns only once the thread has ended its day-long rest
    assert [t for t in threading.enumerate() if t.name == "test-doorbell-rest"] == []
