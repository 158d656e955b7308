"""OpenAIProcessor: answers user messages with any OpenAI-compatible chat completions API.

One call of the processor is one ReAct loop: stream the model's answer into the
thread (`ctx.step`), run the tool calls it asked for, record their results as a
`tool` turn, and ask again, until the model answers without tool calls or
`max_iterations` model calls were made. Every request is built afresh from the
persistent conversation, so per-call additions (the system prompt) are sent once
per request and never pile up across round trips.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Self, cast
from urllib.parse import urlsplit

import openai
import structlog
from openai import AsyncStream
from openai.types.chat import ChatCompletion

from ore_core import (
    Artifact,
    Role,
    Severity,
    Tool,
    ToolCall,
    ToolResult,
    Turn,
    TurnContext,
    tracing,
)
from ore_core.jsonutil import dumps
from ore_openai import summary
from ore_openai.chunks import Chunk, chunk_artifacts
from ore_openai.config import ENV_API_KEY, ENV_BASE_URL, OpenAIConfig
from ore_openai.errors import ModelCallFailed, OpenAIConfigError
from ore_openai.files import FileParts
from ore_openai.request import request_body
from ore_openai.retry import RetryPolicy, is_retryable, retry_after_seconds
from ore_openai.tool_runner import run_tool_calls

__all__ = ["CHECK_TIMEOUT", "ITERATION_CAP_RESULT", "OpenAIProcessor"]

log = structlog.get_logger("ore.openai")

ITERATION_CAP_RESULT = "error: not run, this turn reached its limit of model calls (max_iterations)"
"""The result recorded for tool calls made by the last allowed model call."""

CHECK_TIMEOUT = 5.0
"""Seconds `check()` waits for the model server's list of models."""

_KEYED_HOSTS = frozenset({"api.openai.com"})
"""Servers that refuse every request without an API key (local servers need none)."""

_HINTS = {
    401: f"check api_key in the [processor] section or {ENV_API_KEY}",
    403: f"check api_key in the [processor] section or {ENV_API_KEY}",
    404: f"check the model name and base_url (or {ENV_BASE_URL})",
}


class OpenAIProcessor:
    """A `TurnProcessor` for OpenAI, Ollama, vLLM, llama.cpp and other compatible servers.

    `tools` are the tools registered through `ore_register_tools` (a mapping by name
    or an iterable); `config.tools`, when set, picks the ones offered to the model.
    The HTTP client is created on first use and reused across turns; `aclose()` (or
    `async with`) releases it. Cancellation closes the HTTP stream at once.
    Failures raise `ModelCallFailed`; nothing of a failed model call is recorded.
    """

    def __init__(
        self,
        config: OpenAIConfig | None = None,
        tools: Mapping[str, Tool] | Iterable[Tool] = (),
    ) -> None:
        self.config = config if config is not None else OpenAIConfig.load()
        self.tools = _select_tools(tools, self.config.tools)
        self.retry = RetryPolicy(
            self.config.max_retries, self.config.retry_backoff, self.config.retry_max_wait
        )
        self._client: openai.AsyncOpenAI | None = None
        self._files = FileParts(self.config.max_text_file_bytes, self.config.max_image_file_bytes)

    @property
    def default_model(self) -> str:
        """The model of a thread that chose none with `/model`."""
        return self.config.model

    def describe(self) -> str:
        """What answers, for the line `ore serve` and `ore chat` print at start."""
        return f"openai model {self.config.model} at {self.config.base_url}"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (a later turn opens a new one). Idempotent."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The HTTP client; retries are ours (see `retry`), so the SDK's are off."""
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.config.base_url,
                api_key=self.config.effective_api_key,
                max_retries=0,
                timeout=self.config.timeout,
            )
        return self._client

    async def check(self) -> None:
        """Raise `ModelCallFailed` unless a chat could work now: `GET /models` answers.

        `ore doctor` calls it, so that a missing or wrong API key, an unreachable
        base_url and a model the server does not have are found before a chat fails on
        them. One short request, no retries. A server without a model list (404)
        passes: it answered, and the chat will say what else is wrong.
        """
        where = f"openai at {self.config.base_url}"
        if not self.config.api_key and urlsplit(self.config.base_url).hostname in _KEYED_HOSTS:
            raise ModelCallFailed(
                f"{where}: no API key; set {ENV_API_KEY} or api_key in the [processor] section"
            )
        served = await self.models()
        if served and self.config.model not in served:
            shown = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
            raise ModelCallFailed(
                f"{where}: model {self.config.model!r} is not served there (it serves: "
                f"{shown}); set model in the [processor] section or ORE_PROCESSOR__MODEL "
                "(with Ollama: `ollama pull MODEL` first)"
            )

    async def models(self) -> list[str]:
        """The models the server offers (`GET /models`, sorted; empty for a server without
        a model list): what `ore models` prints. One short request, no retries;
        `ModelCallFailed` says why it could not be asked."""
        where = f"openai at {self.config.base_url}"
        try:
            page = await self.client.with_options(timeout=CHECK_TIMEOUT).models.list()
        except openai.NotFoundError:
            return []
        except openai.APIError as exc:
            raise _call_failed(where, exc, attempts=1) from exc
        return sorted(model.id for model in page.data)

    def context_window(self, model: str) -> int:
        """Tokens `model` accepts (what compaction measures a thread against)."""
        return summary.context_window(model or self.config.model)

    async def summarise(self, turns: Sequence[Turn], prompt: str, model: str) -> str:
        """The compaction summary of `turns` (see `ore_openai.summary`); no retries."""
        return await summary.summarise(self, turns, prompt, model)

    async def __call__(self, ctx: TurnContext) -> None:
        """Answer `ctx.event`, running tools until the model is done or the cap is hit."""
        limit = self.config.max_iterations
        calls: list[ToolCall] = []
        for iteration in range(1, limit + 1):
            async with aclosing(self._answer(ctx)) as source:
                turn = await ctx.step(source)
            calls = [a for a in turn.artifacts if isinstance(a, ToolCall)]
            if not calls:
                return
            if iteration == limit:
                break
            await ctx.append(Role.TOOL, *await run_tool_calls(self.tools, calls))
        # The calls of the last answer still need results, or the next request is invalid.
        await ctx.append(
            Role.TOOL, *(ToolResult(c.id, ITERATION_CAP_RESULT, is_error=True) for c in calls)
        )
        await ctx.notice(
            f"openai: stopped after {limit} model calls in one turn (max_iterations); "
            "the last tool calls were not run. Raise max_iterations if the task needs more.",
            Severity.WARN,
        )

    async def _answer(self, ctx: TurnContext) -> AsyncGenerator[Artifact, None]:
        """One model call: the request is rebuilt from the thread each time."""
        turns = ctx.view()
        files = await self._files.of(turns)
        body = request_body(self.config, ctx.spec, turns, self.tools.values(), files)
        where = f"openai model {body['model']!r} at {self.config.base_url}"
        with tracing.span("ore.model.call", _span_attributes(body, self.config.base_url)):
            stream = await self._open(ctx, dumps(body), where)
            try:
                async for artifact in chunk_artifacts(cast(AsyncIterable[Chunk], stream)):
                    yield artifact
            except (openai.APIError, ModelCallFailed) as exc:
                problem = _cause(exc)
                raise ModelCallFailed(
                    f"{where}: the answer broke off ({problem}); nothing was recorded, "
                    "send it again"
                ) from exc
            finally:
                await stream.close()

    async def post(self, body: bytes) -> AsyncStream[object]:
        """One streamed call, no retries: `body` is an encoded `request_body`. The chunks
        come as decoded JSON objects (see `ore_openai.chunks`), errors as the SDK's."""
        return await self.client.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            content=body,
            stream=True,
            stream_cls=AsyncStream[object],
        )

    async def _open(self, ctx: TurnContext, body: bytes, where: str) -> AsyncStream[object]:
        """Start the streamed call (the body encoded once, see `request`), retrying
        failures that may pass."""
        retry = 0
        while True:
            try:
                return await self.post(body)
            except openai.APIError as exc:
                failure = exc
            retry_after = (
                retry_after_seconds(failure.response.headers)
                if isinstance(failure, openai.APIStatusError)
                else None
            )
            delay = self.retry.delay(retry, retry_after) if is_retryable(failure) else None
            if delay is None:
                raise _call_failed(where, failure, attempts=retry + 1) from failure
            retry += 1
            problem = _describe(failure)
            log.warning("model call failed, retrying", where=where, problem=problem, delay=delay)
            await ctx.notice(
                f"{where}: {problem}; retrying in {delay:.1f}s "
                f"(retry {retry} of {self.retry.max_retries})",
                Severity.WARN,
            )
            await asyncio.sleep(delay)


def _span_attributes(body: Mapping[str, object], base_url: str) -> dict[str, str]:
    """The model call's span attributes (OpenTelemetry's gen_ai names; never the content)."""
    return {
        "gen_ai.system": "openai",
        "gen_ai.request.model": str(body["model"]),
        "server.address": urlsplit(base_url).hostname or "",
    }


def _select_tools(
    tools: Mapping[str, Tool] | Iterable[Tool], wanted: Iterable[str] | None
) -> dict[str, Tool]:
    by_name = dict(tools) if isinstance(tools, Mapping) else {tool.name: tool for tool in tools}
    if wanted is None:
        return by_name
    missing = [name for name in wanted if name not in by_name]
    if missing:
        known = ", ".join(sorted(by_name)) or "none"
        raise OpenAIConfigError(
            f"openai processor: tools {', '.join(missing)} are not registered "
            f"(registered: {known}); fix `tools` in the [processor] section"
        )
    return {name: by_name[name] for name in wanted}


def _describe(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        detail = exc.body.get("message") if isinstance(exc.body, dict) else None
        return f"HTTP {exc.status_code} {detail or exc.message}"
    return f"connection failed ({_cause(exc)})"


def _cause(exc: BaseException) -> str:
    """The transport's own message: the SDK's connection errors just say "Connection error."."""
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def _call_failed(where: str, exc: openai.APIError, *, attempts: int) -> ModelCallFailed:
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    if status is None:
        hint = f"check base_url (or {ENV_BASE_URL}) and that the server is running"
    elif status in _HINTS:
        hint = _HINTS[status]
    elif is_retryable(exc):
        hint = "the server is busy or failing: try again later or raise max_retries"
    else:
        hint = "the server refused the request"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return ModelCallFailed(f"{where}: {_describe(exc)}{tries}; {hint}", status=status)
