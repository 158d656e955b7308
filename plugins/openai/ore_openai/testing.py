"""A real OpenAI-compatible HTTP server on 127.0.0.1 that plays back scripted responses.

Turn processors are tested against it through their real HTTP client: it streams
Server-Sent Events chunk by chunk (optionally with a delay between chunks), sets the
finish reason the way the real API does (`tool_calls` when the answer calls tools),
records every request body, and can fail on purpose: HTTP errors with `Retry-After`,
a stream cut mid-way (connection closed without `[DONE]`), or a hang that sends
nothing until the client gives up, after which the disconnect is recorded.

Responses are served in script order, one per chat completion request; when the
script is exhausted the server asks its `responder` (a function of the request body),
or answers 500 with a message that says so when it has none.

`python -m ore_openai.testing` serves one in its own process for benchmarks (see
`main`): it prints its `base_url` and answers every request alike until stdin closes.

Concurrency: the server runs in background threads; every public method may be
called from the test's thread or event loop.

The `ore_mock_openai` fixture (a running server with an empty script) is there once a
suite opts in: `pytest_plugins = ["ore_openai.testing"]` in its top-level conftest.
"""

from __future__ import annotations

import argparse
import asyncio
import select
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import pytest

from ore_core.jsonutil import dumps, loads

__all__ = [
    "MockOpenAIServer",
    "MockResponse",
    "MockToolCall",
    "MockUsage",
    "RecordedRequest",
    "Scripted",
    "ore_mock_openai",
]

DEFAULT_MODEL = "mock-model"

_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")

_POLL_SECONDS = 0.02
"""How often a hanging handler checks for a client disconnect or a server stop."""


@dataclass(frozen=True, slots=True)
class MockToolCall:
    """A tool call the scripted answer makes; `id` is generated when empty."""

    name: str
    arguments: str = "{}"
    id: str = ""


@dataclass(frozen=True, slots=True)
class MockUsage:
    """Token counts reported in the usage chunk (or the non-streaming `usage`)."""

    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, int]:
        """The wire form, with `total_tokens` derived."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True, slots=True)
class MockResponse:
    """One scripted answer to one chat completion request.

        Streams `reasoning` (as `delta.reasoning_content`), then `text`, each split into
        `chunk_size`-character chunks, then each tool call as a header delta followed by
        argument fragments, then the finish chunk and, when the client asked for it, the
        usage chunk. `finish_reason` None means what the real API sends: `tool_calls`
        when there are tool calls, else `stop`. `usage` None means a rough estimate
        (characters / 4). `delay` seconds pass before each chunk. `stamp` replaces the text
    of each content chunk by its send time (`time.monotonic()`, shared by every process on
    the machine, then ";"), so a benchmark can tell how late each piece reaches a reader.

        Failure modes: `status` != 200 answers with an OpenAI-style error body (and
        `Retry-After` when `retry_after` is set); `cut_after=n` sends n chunks and then
        closes the connection without ending the body; `hang_after=n` sends n chunks
        (0: not even the headers) and then waits silently until the client disconnects.
        A non-streamed answer that is cut sends half its body; one that hangs sends nothing.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[MockToolCall, ...] = ()
    finish_reason: str | None = None
    usage: MockUsage | None = None
    chunk_size: int = 4
    delay: float = 0.0
    status: int = 200
    error: str = ""
    retry_after: float | None = None
    cut_after: int | None = None
    hang_after: int | None = None
    stamp: bool = False

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")

    @classmethod
    def http_error(
        cls, status: int, message: str = "", *, retry_after: float | None = None
    ) -> MockResponse:
        """An error answer, e.g. `http_error(429, retry_after=0.01)` or `http_error(500)`."""
        return cls(status=status, error=message or f"mock error {status}", retry_after=retry_after)

    @classmethod
    def cut(cls, text: str = "", *, after_chunks: int = 1, chunk_size: int = 4) -> MockResponse:
        """A stream that breaks off after `after_chunks` chunks (no `[DONE]`)."""
        return cls(text=text, cut_after=after_chunks, chunk_size=chunk_size)

    @classmethod
    def hang(cls, text: str = "", *, after_chunks: int = 0) -> MockResponse:
        """A response that stops sending after `after_chunks` chunks until the client leaves."""
        return cls(text=text, hang_after=after_chunks)


Scripted = MockResponse | str
"""A scripted response; a plain string is a text answer."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received (chat completions and model listings).

    Header names are lower-cased; `received_at` is `time.monotonic()` on arrival.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    received_at: float = field(default_factory=time.monotonic)


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def _estimate_usage(request: dict[str, Any], response: MockResponse) -> MockUsage:
    produced = response.text + response.reasoning
    produced += "".join(call.name + call.arguments for call in response.tool_calls)
    prompt = len(dumps(request.get("messages", [])))
    return MockUsage(
        prompt_tokens=max(1, prompt // 4), completion_tokens=max(1, len(produced) // 4)
    )


def _call_ids(response: MockResponse, serial: int) -> list[str]:
    return [call.id or f"call_{serial}_{i}" for i, call in enumerate(response.tool_calls)]


def _finish_reason(response: MockResponse) -> str:
    if response.finish_reason is not None:
        return response.finish_reason
    return "tool_calls" if response.tool_calls else "stop"


def _stream_deltas(response: MockResponse, serial: int) -> list[dict[str, Any]]:
    """The `delta` objects of every content chunk, in streaming order."""
    size = response.chunk_size
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"reasoning_content": piece} for piece in _pieces(response.reasoning, size)]
    deltas += [{"content": piece} for piece in _pieces(response.text, size)]
    for index, (call, call_id) in enumerate(
        zip(response.tool_calls, _call_ids(response, serial), strict=True)
    ):
        header = {"name": call.name, "arguments": ""}
        deltas.append(
            {
                "tool_calls": [
                    {"index": index, "id": call_id, "type": "function", "function": header}
                ]
            }
        )
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in _pieces(call.arguments, size)
        ]
    return deltas


def _stream_chunks(
    response: MockResponse, request: dict[str, Any], serial: int
) -> list[dict[str, Any]]:
    """Every `chat.completion.chunk` object of a streamed answer, usage chunk included."""
    base = {
        "id": f"chatcmpl-mock-{serial}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.get("model") or DEFAULT_MODEL,
    }
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in _stream_deltas(response, serial)
    ]
    finish = {"index": 0, "delta": {}, "finish_reason": _finish_reason(response)}
    chunks.append({**base, "choices": [finish]})
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = response.usage or _estimate_usage(request, response)
        chunks.append({**base, "choices": [], "usage": usage.to_dict()})
    return chunks


def _stamped(chunk: dict[str, Any]) -> dict[str, Any]:
    """`chunk` with its content (if any) replaced by the send time."""
    choices = chunk["choices"]
    if not choices or not choices[0]["delta"].get("content"):
        return chunk
    delta = {**choices[0]["delta"], "content": f"{time.monotonic():.6f};"}
    return {**chunk, "choices": [{**choices[0], "delta": delta}]}


def _completion(response: MockResponse, request: dict[str, Any], serial: int) -> dict[str, Any]:
    """The non-streaming `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
    if response.reasoning:
        message["reasoning_content"] = response.reasoning
    if response.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call, call_id in zip(response.tool_calls, _call_ids(response, serial), strict=True)
        ]
    usage = response.usage or _estimate_usage(request, response)
    return {
        "id": f"chatcmpl-mock-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or DEFAULT_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(response)}],
        "usage": usage.to_dict(),
    }


def _error_body(response: MockResponse) -> dict[str, Any]:
    kind = "rate_limit_exceeded" if response.status == 429 else "mock_error"
    return {"error": {"message": response.error, "type": kind, "code": kind}}


class _ClientGone(Exception):
    """The client closed the connection before the response was complete."""


class _ServerStopping(Exception):
    """The server is shutting down; the response is abandoned by us, not the client."""


class _Handler(BaseHTTPRequestHandler):
    """Serves one connection; every response closes it (no keep-alive to track)."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request stderr logging."""

    def _refused_key(self) -> bool:
        """401 for a request without the server's API key (when it has one)."""
        key = self.server.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._send_json(401, {"error": {"message": "Incorrect API key provided"}})
        return True

    def do_GET(self) -> None:
        if self._refused_key():
            return
        path = self.path.rstrip("/")
        if path in _CHAT_PATHS:
            self._not_allowed()
            return
        if path not in ("/v1/models", "/models"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        self.server.owner._record(RecordedRequest("GET", self.path, self._headers()))
        models = [
            {"id": name, "object": "model", "created": 0, "owned_by": "ore-mock"}
            for name in self.server.owner.models
        ]
        self._send_json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        if self._refused_key():
            return
        if self.path.rstrip("/") not in _CHAT_PATHS:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = loads(self.rfile.read(length))
        except ValueError as exc:
            self._send_json(400, {"error": {"message": f"request body is not JSON: {exc}"}})
            return
        owner = self.server.owner
        serial = owner._record(RecordedRequest("POST", self.path, self._headers(), body))
        response = owner._next_response(serial, body)
        try:
            self._answer(response, body, serial)
        except (_ClientGone, ConnectionError):
            owner._record_disconnect()
        except _ServerStopping:
            self.close_connection = True

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _not_allowed(self) -> None:
        self._send_json(405, {"error": {"message": f"method {self.command} not allowed"}})

    do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _answer(self, response: MockResponse, body: dict[str, Any], serial: int) -> None:
        if response.hang_after == 0:
            self._hang()
        if response.status != 200:
            headers = {}
            if response.retry_after is not None:
                headers["Retry-After"] = f"{response.retry_after:g}"
            self._send_json(response.status, _error_body(response), headers)
        elif body.get("stream"):
            self._stream(response, body, serial)
        else:
            self._complete(response, body, serial)

    def _stream(self, response: MockResponse, body: dict[str, Any], serial: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        chunks = _stream_chunks(response, body, serial)
        for position in range(len(chunks) + 1):
            if position == response.cut_after:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if position == response.hang_after:
                self._hang()
            if position == len(chunks):
                break
            self._pause(response.delay)
            chunk = _stamped(chunks[position]) if response.stamp else chunks[position]
            self._write_chunk(b"data: " + dumps(chunk) + b"\n\n")
        self._write_chunk(b"data: [DONE]\n\n")
        try:
            # The answer is complete at [DONE]; a client that leaves now has not abandoned it.
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def _complete(self, response: MockResponse, body: dict[str, Any], serial: int) -> None:
        if response.hang_after is not None:
            self._hang()
        payload = dumps(_completion(response, body, serial))
        if response.cut_after is None:
            self._send_json(200, payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload[: len(payload) // 2])
        self.connection.shutdown(socket.SHUT_RDWR)

    def _send_json(
        self, status: int, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None
    ) -> None:
        data = payload if isinstance(payload, bytes) else dumps(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        """Write one HTTP/1.1 chunk, first checking that the client is still there."""
        if self._client_gone(0):
            raise _ClientGone
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _pause(self, seconds: float) -> None:
        """Wait between chunks; a disconnect or server stop during the wait ends the reply."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._client_gone(min(left, _POLL_SECONDS)):
                raise _ClientGone
            if self.server.owner._stopping.is_set():
                raise _ServerStopping

    def _hang(self) -> None:
        """Send nothing until the client disconnects (recorded) or the server stops."""
        owner = self.server.owner
        while not owner._stopping.is_set():
            if self._client_gone(_POLL_SECONDS):
                raise _ClientGone
        raise _ServerStopping

    def _client_gone(self, timeout: float) -> bool:
        """True when the peer has closed its end (EOF or reset) within `timeout` seconds."""
        readable, _, _ = select.select([self.connection], [], [], timeout)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True


class _HTTPServer(ThreadingHTTPServer):
    """Joins its handler threads on close and can unblock them by shutting their sockets."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 1024  # socketserver's 5 resets connections of a busy benchmark

    def __init__(self, owner: MockOpenAIServer) -> None:
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def abort_connections(self) -> None:
        """Wake handlers blocked on a read so that `server_close` can join them."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.owner._record_error(traceback.format_exc())


class MockOpenAIServer:
    """A scripted OpenAI-compatible chat completions server on a free loopback port.

    Use it as a context manager (sync or async) or call `start()`/`stop()`. Point an
    OpenAI client at `base_url`. `requests` holds every chat completion body received;
    `disconnects` counts responses the client abandoned before they were complete.
    `responder(body)` answers requests once the script is empty (a benchmark's endless
    model); `record=False` keeps no requests (a long benchmark's memory).
    With `api_key` set, a request without `Authorization: Bearer <api_key>` gets 401,
    as from OpenAI.
    """

    def __init__(
        self,
        responses: Sequence[Scripted] = (),
        *,
        models: Sequence[str] = (DEFAULT_MODEL,),
        responder: Callable[[dict[str, Any]], MockResponse] | None = None,
        record: bool = True,
        api_key: str | None = None,
    ) -> None:
        self.record = record
        self.models = tuple(models)
        self.responder = responder
        self.api_key = api_key
        self._script: deque[MockResponse] = deque()
        self._recorded: list[RecordedRequest] = []
        self._serial = 0
        self._disconnects = 0
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._listeners: set[Callable[[], None]] = set()
        self._stopping = threading.Event()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.enqueue(*responses)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("MockOpenAIServer is already running")
        self._stopping.clear()
        self._server = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="mock-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end hanging responses and join every thread. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        server.abort_connections()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- addresses ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (only while running)."""
        if self._server is None:
            raise RuntimeError("MockOpenAIServer is not running: call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as an OpenAI client's `base_url` (ends in `/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- the script ---------------------------------------------------------------------

    def script(self, *responses: Scripted) -> None:
        """Replace the responses still to be served."""
        with self._lock:
            self._script.clear()
        self.enqueue(*responses)

    def enqueue(self, *responses: Scripted) -> None:
        """Append responses to the script (strings are text answers)."""
        converted = [MockResponse(text=r) if isinstance(r, str) else r for r in responses]
        with self._lock:
            self._script.extend(converted)

    @property
    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        with self._lock:
            return len(self._script)

    # -- what happened --------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON body of every chat completion request so far, in arrival order."""
        with self._lock:
            return [r.body for r in self._recorded if r.method == "POST"]

    @property
    def recorded(self) -> list[RecordedRequest]:
        """Every request so far (method, path, headers, body), in arrival order."""
        with self._lock:
            return list(self._recorded)

    @property
    def disconnects(self) -> int:
        """How many responses the client abandoned (closed the connection) mid-way."""
        with self._lock:
            return self._disconnects

    @property
    def errors(self) -> list[str]:
        """Tracebacks of unexpected failures inside the server (should stay empty)."""
        with self._lock:
            return list(self._errors)

    async def wait_for_requests(self, count: int = 1) -> None:
        """Wait until `count` chat completion requests have arrived (bound it with a timeout)."""
        await self._wait_until(lambda: len(self.requests) >= count)

    async def wait_for_disconnects(self, count: int = 1) -> None:
        """Wait until `count` responses were abandoned by the client (bound it with a timeout)."""
        await self._wait_until(lambda: self.disconnects >= count)

    async def _wait_until(self, predicate: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(changed.set)

        with self._lock:
            self._listeners.add(wake)
        try:
            while True:
                changed.clear()
                if predicate():
                    return
                await changed.wait()
        finally:
            with self._lock:
                self._listeners.discard(wake)

    # -- called by handler threads -----------------------------------------------------

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._serial += 1
            serial = self._serial
            if self.record:
                self._recorded.append(request)
        self._notify()
        return serial

    def _next_response(self, serial: int, body: dict[str, Any]) -> MockResponse:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return MockResponse.http_error(
            500, f"MockOpenAIServer: no scripted response left for request #{serial}"
        )

    def _record_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1
        self._notify()

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)


@pytest.fixture
def ore_mock_openai() -> Iterator[MockOpenAIServer]:
    """A running `MockOpenAIServer` with an empty script, stopped after the test."""
    with MockOpenAIServer() as server:
        yield server


def _bench_responder(args: argparse.Namespace) -> Callable[[dict[str, Any]], MockResponse]:
    """The endless model of `main`: what to answer depends on the last message."""
    text = "x" * (args.chunks * args.chunk_size)
    answer = MockResponse(text=text, chunk_size=args.chunk_size, delay=args.delay, stamp=True)
    call = MockResponse(tool_calls=(MockToolCall("lookup", '{"q": "x"}'),), delay=args.delay)
    filler = MockResponse(text="ok " * 60, chunk_size=64)

    def respond(body: dict[str, Any]) -> MockResponse:
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        said = content if last.get("role") == "user" and isinstance(content, str) else ""
        if said.startswith("fill"):
            return filler
        if said.startswith("tool"):
            return call
        return answer

    return respond


def main(argv: Sequence[str] | None = None) -> None:
    """Serve an endless model in this process: `python -m ore_openai.testing`.

    Every answer is `--chunks` stamped content chunks of `--chunk-size` characters with
    `--delay` seconds before each, except that a user message starting with `tool` is
    answered with a call of the tool `lookup` first (the text comes once the request
    carries its result), and one starting with `fill` with a short text at once (to
    build a long history fast). Prints the `base_url` on stdout and serves until stdin
    closes. Requests are not recorded.
    """
    parser = argparse.ArgumentParser(prog="python -m ore_openai.testing")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-size", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args(argv)
    with MockOpenAIServer(responder=_bench_responder(args), record=False) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
