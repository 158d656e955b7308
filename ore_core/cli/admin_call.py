"""One call of the core's operator API from a command (`ore link`, `ore files`).

The configured NATS (`[nats]`, an operator's credentials), else the running `ore
serve`'s; one connection without reconnecting, so a wrong URL or a core that is not
running is the command's one error line at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ore_core._nats.connection import NatsCredentials
from ore_core.cli.options import cli_state, nats_settings
from ore_core.cli.running import find_running
from ore_core.conduit.control import ControlClient
from ore_core.errors import ApiError, BusError, OreError

__all__ = ["admin_request"]

_TIMEOUT = 10.0


def admin_request(command: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """The reply of `P.admin.<method>` to `body`; `OreError("<command>: ...")` else."""
    settings = cli_state().settings
    nats_config = settings.nats
    if not nats_config.url:
        running = find_running()
        if running is None:
            raise OreError(
                f"{command}: no NATS server configured and no running `ore serve` recorded; "
                "start `ore serve`, or set nats.url (ORE_NATS__URL)"
            )
        nats_config = nats_settings(nats_config, [running.nats_url])

    async def call() -> dict[str, Any]:
        try:
            async with await ControlClient.connect(
                nats_config.url or [],
                name=command.replace(" ", "-"),
                prefix=nats_config.subject_prefix,
                credentials=NatsCredentials.from_settings(nats_config),
                request_timeout=_TIMEOUT,
                connect_timeout=_TIMEOUT,
                reconnect=False,
            ) as control:
                return await control.call(method, body)
        except ApiError as exc:
            raise OreError(f"{command}: {exc.message}") from None
        except BusError as exc:
            raise OreError(f"{command}: {exc}") from None

    return asyncio.run(call())
