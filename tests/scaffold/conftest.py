"""Fixtures of the `ore new` tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for one rendered package; its modules are forgotten after
    (only its own: a module of ore first imported meanwhile stays the one module)."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name, module in list(sys.modules.items()):
        if Path(getattr(module, "__file__", None) or "/").is_relative_to(tmp_path):
            del sys.modules[name]
