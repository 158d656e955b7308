"""What every control API endpoint shares: strict request bodies, the reply types and the
error a handler raises to answer with a code (see `control_api`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from ore_core.ids import validate_thread_id

__all__ = ["ApiFailure", "RawReply", "Reply", "RequestBody", "ThreadId"]


@dataclass(frozen=True, slots=True)
class RawReply:
    """An events.read reply: stored payloads spliced in as they are, never re-encoded."""

    entries: list[bytes]
    next: int | None

    def encode(self) -> bytes:
        following = b"null" if self.next is None else str(self.next).encode()
        return b'{"events":[' + b",".join(self.entries) + b'],"next":' + following + b"}"


Reply = dict[str, Any] | RawReply


class RequestBody(BaseModel):
    """Requests are strict: unknown fields are typos and answered with 400."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


ThreadId = Annotated[str, AfterValidator(validate_thread_id)]


class ApiFailure(Exception):
    """An error reply: the numeric code, a one-line message and, where the status's
    word says too little, a code of its own (e.g. `corrupt_thread`)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
