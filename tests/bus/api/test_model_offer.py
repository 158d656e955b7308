"""ModelOffer (the control API's `models`): a model server that cannot be asked is said,
never a failure, so a page still shows which model answers."""

from __future__ import annotations

import socket

from ore_core.bus.api.model_offer import ModelOffer
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # closed again when the socket is: nothing listens there


async def test_a_model_server_that_cannot_be_asked_offers_nothing_and_says_why() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    config = OpenAIConfig(base_url=url, model="big-2", max_retries=0)
    async with OpenAIProcessor(config) as processor:
        offer = await ModelOffer(processor, "openai").describe()
    assert (offer["processor"], offer["model"], offer["models"]) == ("openai", "big-2", [])
    assert offer["error"].startswith(f"openai could not list its models: openai at {url}: ")
