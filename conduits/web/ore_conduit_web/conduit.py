"""The web conduit: a chat page and an HTTP API, served by the conduit's own process.

`run` loads the tokens, starts the live hub (the namespace's output, fanned out to the
open pages), binds the address and prints the URL that opens the page signed in.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import ClassVar
from urllib.parse import quote

from ore_conduit_web.api import create_app
from ore_conduit_web.config import WebConfig
from ore_conduit_web.live import LiveHub
from ore_conduit_web.server import bind, serve, url_of
from ore_conduit_web.threads import CONVERSATION, WebThreads
from ore_conduit_web.tokens import Tokens
from ore_core.conduit import Capabilities, Conduit, ConduitClient, ConduitConfig
from ore_core.endpoint import KeyForm

__all__ = ["WebConduit"]


class WebConduit(Conduit):
    """Chat with ore in a browser; threads belong to the user whose token made them."""

    name = "web"
    description = "A chat page in the browser and an HTTP API with resumable events."
    config_model = WebConfig
    conversation_key = CONVERSATION
    """An endpoint `web:ID` is the web thread ID (its `web.thread` metadata)."""
    key_form = KeyForm("WEB_THREAD", "w-1")
    capabilities = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        markup="markdown",
        max_message_length=32_000,
        edits_arrive=True,
        deletes_arrive=False,
        delta_interval=0.03,
        reactions=True,  # the page shows them and sets them
        file_max_bytes=None,  # the page shows any file: images inline, others as downloads
    )
    on_ready: ClassVar[Callable[[str], None] | None] = None
    """Called with the signed-in URL once the server listens (tests use it)."""

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Serve the page and the API until cancelled."""
        assert isinstance(config, WebConfig)
        tokens = Tokens.load(config.state_dir, config.user, config.users)
        hub = LiveHub(client)
        threads = WebThreads(client, hub, config.user)
        app = create_app(threads, hub, tokens, config)
        # A port the user set is kept or refused; only the default one falls back.
        sock, note = bind(config.host, config.port, fallback="port" not in config.model_fields_set)
        base = url_of(sock)
        url = f"{base}/?token={quote(tokens.token_of(config.user))}" if config.auth else base + "/"
        async with asyncio.TaskGroup() as tasks:
            live = tasks.create_task(hub.run(), name="web-live")
            await hub.ready.wait()
            if note:
                print(f"ore web: {note}", file=sys.stderr, flush=True)
            print(f"ore web: open {url}", flush=True)
            callback = type(self).on_ready
            if callback is not None:
                callback(url)
            try:
                await serve(app, sock)
            finally:
                hub.close()
                live.cancel()
