"""Gateways of `ore.toml` (`[[gateway]]`, `GatewaySettings`) applied at `ore serve` start.

Idempotent: a gateway applied before is found as it is (its thread exists, each
endpoint is linked to it already) and nothing changes. Its thread (`gateway-NAME`
unless named) is created in the first endpoint's namespace when missing. A gateway
that cannot be applied (an endpoint another thread holds, an unknown conduit in the
short form) stops the start with a message naming the gateway and the endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from ore_core.bridge.admin import EndpointBody, LinkAdd, LinkAdmin
from ore_core.config import GatewaySettings
from ore_core.endpoint import Endpoint, KeyForm, parse_endpoint
from ore_core.errors import OreError, ThreadExists
from ore_core.ids import NAMESPACE_KEY
from ore_core.session.manager import Manager

__all__ = ["GatewayError", "apply_gateways", "check_gateways", "gateway_endpoints"]

log = structlog.get_logger("ore.bridge")


class GatewayError(OreError):
    """A `[[gateway]]` of the configuration cannot be applied."""


def check_gateways(
    gateways: Sequence[GatewaySettings],
    conversation_key: Callable[[str], str | None],
    key_form: Callable[[str], KeyForm | None],
) -> None:
    """GatewayError naming the expected form for an endpoint that is no conversation of
    its installed conduit (`ore serve` refuses to start: linked, such an endpoint would
    never be looked up, and each platform would silently get a thread of its own)."""
    for gateway in gateways:
        gateway_endpoints(gateway, conversation_key, key_form)


def gateway_endpoints(
    gateway: GatewaySettings,
    conversation_key: Callable[[str], str | None],
    key_form: Callable[[str], KeyForm | None] = lambda namespace: None,
) -> list[tuple[Endpoint, str]]:
    """The gateway's endpoints (resolved) with their directions; GatewayError if one is
    invalid (not of its conduit's `key_form`) or two are the same endpoint."""
    resolved: list[tuple[Endpoint, str]] = []
    for entry in gateway.endpoints:
        try:
            endpoint = parse_endpoint(f"{entry.conduit}:{entry.key}", conversation_key, key_form)
        except ValueError as exc:
            raise GatewayError(f"gateway {gateway.name!r}: {exc}") from None
        if any(endpoint == other for other, _ in resolved):
            raise GatewayError(f"gateway {gateway.name!r}: endpoint {endpoint} is listed twice")
        resolved.append((endpoint, entry.direction))
    return resolved


async def apply_gateways(
    gateways: Sequence[GatewaySettings],
    admin: LinkAdmin,
    manager: Manager,
    conversation_key: Callable[[str], str | None],
) -> None:
    """Create each gateway's thread if missing and link its endpoints to it."""
    plans = [(gateway, gateway_endpoints(gateway, conversation_key)) for gateway in gateways]
    for gateway, endpoints in plans:
        thread_id = gateway.thread_id
        home = endpoints[0][0].namespace
        try:
            await manager.create_with_id(thread_id, {NAMESPACE_KEY: home})
        except ThreadExists:
            pass
        for endpoint, direction in endpoints:
            body = LinkAdd(
                thread=thread_id,
                endpoint=EndpointBody(**endpoint.as_dict()),
                direction=direction,  # type: ignore[arg-type]
                gateway=gateway.name,
                answer=gateway.answer,
                label=gateway.label,
                reaction_lines=gateway.reaction_lines,
                exist_ok=True,
            )
            try:
                await admin.add(body)
            except OreError as exc:
                raise GatewayError(f"gateway {gateway.name!r}: {exc}") from None
        log.info("gateway applied", gateway=gateway.name, thread_id=thread_id)
