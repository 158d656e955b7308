"""Fixtures of the `ore new` tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for one rendered package; its modules are forgotten after."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in set(sys.modules) - before:
        del sys.modules[name]
