"""Identifier helpers shared by the ledger, the stores and the bus.

Thread ids travel in file names, SQL parameters and NATS subject tokens, so ids that
come from outside are checked once here: one NATS token (`[A-Za-z0-9_-]`), bounded.
"""

from __future__ import annotations

import re
import secrets

from ore_core.errors import InvalidThreadId

MAX_THREAD_ID_LENGTH = 128
_THREAD_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_THREAD_ID_LENGTH}}}")


def generate_thread_id() -> str:
    """A new random thread id: 32 lowercase hex characters."""
    return secrets.token_hex(16)


def validate_thread_id(thread_id: str) -> str:
    """Return `thread_id` unchanged if it is safe to use anywhere, else raise InvalidThreadId."""
    if not isinstance(thread_id, str) or _THREAD_ID.fullmatch(thread_id) is None:
        raise InvalidThreadId(
            f"invalid thread id {thread_id!r}: use 1-{MAX_THREAD_ID_LENGTH} characters "
            "from A-Z, a-z, 0-9, '_' and '-'"
        )
    return thread_id


def is_valid_thread_id(thread_id: str) -> bool:
    """True when `validate_thread_id` would accept `thread_id`."""
    return isinstance(thread_id, str) and _THREAD_ID.fullmatch(thread_id) is not None


NAMESPACE_KEY = "ore.namespace"
"""Thread metadata key recording the namespace a thread was created in (never changes)."""
