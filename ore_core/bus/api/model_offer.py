"""ModelOffer: what the worker's turn processor answers with and which models it offers.

The control API's `models` method answers from it, so a conduit (the web page's model
picker) learns what `ore models` prints without building a processor of its own. A
processor offers models with `async models() -> list[str]` (the openai processor asks
its server's `GET /models`) and names its configured one with `default_model`; echo and
a processor without `models()` offer none. The list is kept for `ttl` seconds: a page
load should not cost a request to the model server each time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["DEFAULT_TTL", "ModelOffer"]

DEFAULT_TTL = 60.0
"""Seconds a listed set of models is answered from memory."""
ASK_TIMEOUT = 10.0
"""Seconds the processor may take to list its models."""


class ModelOffer:
    """`processor`'s name (`name`), its configured model and the models it offers."""

    def __init__(
        self,
        processor: object,
        name: str,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._processor = processor
        self._name = name
        self._ttl = ttl
        self._clock = clock
        self._listed: tuple[float, list[str]] | None = None
        self._lock = asyncio.Lock()

    async def describe(self) -> dict[str, Any]:
        """`{"processor": name, "model": configured or None, "models": [...]}`; a processor
        that could not be asked adds `"error"` (a sentence) and offers no models."""
        configured = getattr(self._processor, "default_model", None)
        body: dict[str, Any] = {"processor": self._name, "model": configured or None}
        try:
            body["models"] = await self._models()
        except Exception as exc:  # the model server's trouble, told to the caller
            body["models"] = []
            body["error"] = f"{self._name} could not list its models: {exc}"
        return body

    async def _models(self) -> list[str]:
        ask: Callable[[], Coroutine[Any, Any, list[str]]] | None = getattr(
            self._processor, "models", None
        )
        if ask is None:
            return []
        async with self._lock:  # one request for many pages asking at once
            if self._listed is not None and self._clock() - self._listed[0] < self._ttl:
                return list(self._listed[1])
            async with asyncio.timeout(ASK_TIMEOUT):
                models = list(await ask())
            self._listed = (self._clock(), models)
            return list(models)
