"""What building one model request costs for a long thread, against serialising its turns.

Run: `python bench/request_build.py [--turns 200] [--repeat 200]`.

In one process, for a thread of `--turns` turns (user and assistant alternating, ~200
characters of text each), per request:

  serialise   the turns' JSON once (`turn_to_dict` + `jsonutil.dumps`, what a save
              writes): the yardstick;
  path        `Thread.turns()` (the active path the processor reads);
  body        `request_body` (the turns -> the chat completion request's JSON body);
  encode      that body encoded once (`jsonutil.dumps`);
  build       path + body + encode: what ore does with the turns for every model call;
  sdk         `OpenAIProcessor.post` of those bytes: the openai SDK and httpx up to the
              request (a transport in this process answers `[DONE]` at once, so no
              network is measured), a cost per call that does not grow with the turns.

The goal is build <= 2x serialise; `build_ratio` is what bench/model_path.py prints.
(Before, the processor called `chat.completions.create`, whose per-field transform of
every message cost ~44 ms for 200 turns: ~200x serialise.)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "openai"))


def make_thread(turns: int) -> Any:
    from ore_core import Role, Text
    from ore_core.ledger.thread import Thread

    thread = Thread()
    for index in range(turns):
        role = Role.USER if index % 2 == 0 else Role.ASSISTANT
        thread.append(role, Text(f"turn {index}: " + "some words of a conversation " * 7))
    return thread


def best_per_call(func: Callable[[], object], repeat: int) -> float:
    """The best of five rounds of `repeat` calls, in seconds per call."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            func()
        best = min(best, (time.perf_counter() - started) / repeat)
    return best


def measure(turns: int, repeat: int) -> dict[str, float]:
    """Seconds per call of each part (see the module docstring)."""
    import httpx2 as httpx
    import openai

    from ore_core import ModelSpec
    from ore_core.jsonutil import dumps
    from ore_core.turn import turn_to_dict
    from ore_openai.config import OpenAIConfig
    from ore_openai.processor import OpenAIProcessor
    from ore_openai.request import request_body

    thread = make_thread(turns)
    path = thread.turns()
    config = OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key="bench")
    spec = ModelSpec()
    prepared = request_body(config, spec, path)
    body = dumps(prepared)

    def done(request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, content=b"data: [DONE]\n\n")

    loop = asyncio.new_event_loop()
    processor = OpenAIProcessor(config)
    # The processor's own client, on a transport that answers in this process.
    processor._client = openai.AsyncOpenAI(
        base_url=config.base_url,
        api_key="bench",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(done)),
    )

    async def post() -> None:
        stream = await processor.post(body)
        await stream.close()

    try:
        return {
            "serialise": best_per_call(lambda: dumps([turn_to_dict(t) for t in path]), repeat),
            "path": best_per_call(thread.turns, repeat),
            "body": best_per_call(lambda: request_body(config, spec, path), repeat),
            "encode": best_per_call(lambda: dumps(prepared), repeat),
            "sdk": best_per_call(lambda: loop.run_until_complete(post()), repeat),
        }
    finally:
        loop.run_until_complete(processor.aclose())
        loop.close()


def build(parts: dict[str, float]) -> float:
    """What one model call costs ore with the turns (see the module docstring)."""
    return parts["path"] + parts["body"] + parts["encode"]


def build_ratio(turns: int, repeat: int = 50) -> float:
    """build / serialise for a thread of `turns` turns."""
    parts = measure(turns, repeat)
    return build(parts) / parts["serialise"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    parts = measure(args.turns, args.repeat)
    total = build(parts)
    print(f"| part ({args.turns} turns) | µs per request | / serialise |")
    print("|---|---|---|")
    for name, seconds in [*parts.items(), ("build", total)]:
        print(f"| {name} | {seconds * 1e6:,.1f} | {seconds / parts['serialise']:.2f}x |")


if __name__ == "__main__":
    main()
