"""Configuration of the OpenAI-compatible processor: the `[processor]` section plus env.

Precedence for each field: the config section, then the environment
(`ORE_OPENAI_BASE_URL`, `OPENAI_API_KEY`), then the default. The model and sampling
fields are defaults only: a thread's `ModelSpec` (`/model ...`) wins per turn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ore_core import describe_validation_error
from ore_openai.errors import OpenAIConfigError

__all__ = ["ENV_API_KEY", "ENV_BASE_URL", "NO_API_KEY", "OpenAIConfig"]

ENV_BASE_URL = "ORE_OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"

NO_API_KEY = "ore-no-api-key"
"""Sent when no key is configured: local servers (Ollama, llama.cpp) need none, but
the client library refuses to start without one."""

_IGNORED_KEYS = frozenset({"name"})
"""Keys of the `[processor]` table that select the processor rather than configure it."""


class OpenAIConfig(BaseModel):
    """Validated settings of one `OpenAIProcessor`.

    `max_iterations` caps the model calls per user message (the ReAct tool loop).
    Retries cover HTTP 408/409/429/5xx and connection failures before the first chunk:
    waits follow `Retry-After` when the server sends it, else `retry_backoff` doubled
    per attempt; no wait is longer than `retry_max_wait`. `timeout` bounds each request
    and each silence between streamed chunks. `tools` names the registered tools to
    offer (None: all of them). `max_tokens_param` is the request field carrying the
    output limit (`max_tokens` for older servers). A message's text-like file (text/*,
    JSON, XML, YAML) up to `max_text_file_bytes` is sent to the model as text, an image
    up to `max_image_file_bytes` as an image part, any other file as a line naming it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://api.openai.com/v1"
    api_key: str = ""
    model: str = "gpt-4o-mini"
    temperature: float | None = Field(default=None, ge=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    system_prompt: str = ""
    max_iterations: int = Field(default=8, ge=1)
    max_retries: int = Field(default=3, ge=0)
    retry_backoff: float = Field(default=0.5, ge=0)
    retry_max_wait: float = Field(default=60.0, ge=0)
    timeout: float = Field(default=120.0, gt=0)
    tools: tuple[str, ...] | None = None
    max_text_file_bytes: int = Field(default=100_000, ge=0)
    max_image_file_bytes: int = Field(default=20 * 1024 * 1024, ge=0)

    @classmethod
    def load(
        cls, section: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> OpenAIConfig:
        """Build from a config section and the environment; raise `OpenAIConfigError`."""
        env = os.environ if environ is None else environ
        values = {k: v for k, v in (section or {}).items() if k not in _IGNORED_KEYS}
        for field, variable in (("base_url", ENV_BASE_URL), ("api_key", ENV_API_KEY)):
            if field not in values and env.get(variable):
                values[field] = env[variable]
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="section")
            raise OpenAIConfigError(
                f"openai processor config is invalid: {problems} (fix the [processor] section)"
            ) from exc

    @property
    def effective_api_key(self) -> str:
        """The key to send: the configured one or a harmless placeholder."""
        return self.api_key or NO_API_KEY
