"""The one JSON codec of the ledger and the stores (orjson: measured fastest here).

`dumps` returns compact UTF-8 bytes; `loads` accepts bytes or str. Both raise
`ValueError` subclasses on bad input so callers catch one thing.
"""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def dumps(value: Any) -> bytes:
    """Compact JSON bytes for `value` (dict key order kept)."""
    return orjson.dumps(value)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises `JSONDecodeError` (a ValueError) on garbage."""
    return orjson.loads(data)
