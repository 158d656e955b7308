"""Test helpers for the Matrix conduit, reusable by anyone testing against Matrix
offline: `FakeMatrix` is a local homeserver (client-server API) on 127.0.0.1."""

from ore_conduit_matrix.testing.fake import ALICE, BOT, PASSWORD, SERVER, FakeMatrix
from ore_conduit_matrix.testing.kit import MatrixKit
from ore_conduit_matrix.testing.rooms import Shown

__all__ = ["ALICE", "BOT", "PASSWORD", "SERVER", "FakeMatrix", "MatrixKit", "Shown"]
