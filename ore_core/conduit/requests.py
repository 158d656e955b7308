"""One request to the control API and its reply: a JSON object, or the error it names.

The conduit's client (`P.api.NS.*`) and the operator's (`P.admin.*`) both ask through
it, so a missing core, a slow one, a refused subject and an error reply read the same
whichever client met them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER

from ore_core import jsonutil
from ore_core._nats.connection import PermissionWatch
from ore_core.errors import ApiError, BusError

__all__ = ["ApiRequests", "decode_reply"]


class ApiRequests:
    """Requests on `nc` to a core using subject prefix `prefix`, each answered within
    `timeout` seconds; `permissions` turns a refused subject into `PermissionDenied`."""

    __slots__ = ("_nc", "_permissions", "_prefix", "_timeout")

    def __init__(
        self, nc: NatsClient, permissions: PermissionWatch, prefix: str, timeout: float
    ) -> None:
        self._nc = nc
        self._permissions = permissions
        self._prefix = prefix
        self._timeout = timeout

    async def __call__(self, subject: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The reply to `body` on `subject`; `ApiError` for an error reply, `BusError`
        when nothing (or nothing in time) answers."""
        request = self._nc.request(subject, jsonutil.dumps(body), timeout=self._timeout)
        try:
            reply = await self._permissions.guard(subject, request)
        except NoRespondersError as exc:
            raise BusError(
                f"nothing answers {subject}: is `ore serve` running with prefix {self._prefix!r}?"
            ) from exc
        except NatsTimeoutError as exc:
            raise BusError(
                f"no reply from {subject} within {self._timeout}s: the core is "
                "overloaded or unreachable"
            ) from exc
        except NatsError as exc:
            raise BusError(f"request to {subject} failed: {exc}") from exc
        return decode_reply(subject, reply)


def decode_reply(subject: str, reply: Msg) -> dict[str, Any]:
    """The JSON object of `reply`, or the `ApiError` its micro error headers name."""
    headers = reply.headers or {}
    status = headers.get(ERROR_CODE_HEADER)
    try:
        body = jsonutil.loads(reply.data) if reply.data else {}
    except ValueError:
        body = {}
    if status is not None:
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        raise ApiError(
            int(status) if status.isdigit() else 500,
            str(error.get("code") or "error"),
            str(error.get("message") or headers.get(ERROR_HEADER, "")),
            subject=subject,
        )
    if not isinstance(body, dict):
        raise BusError(f"reply from {subject} is not a JSON object: {reply.data[:200]!r}")
    return body
