"""The HTTP API and the page: FastAPI routes over `WebThreads`, `LiveHub` and `Tokens`.

Every `/api` route needs a token (`Authorization: Bearer ...`, or the cookie the
signed-in URL sets); `/openapi.json`, the page and its assets do not. Errors are JSON,
`{"error": {"code": word, "message": text}}`, with the matching status: 400 bad input,
401 no or wrong token, 404 unknown thread (another user's too), 409 busy, 413 too
large, 415 a file type not allowed, 502 the core failed, 503 the core is unreachable.
"""

import re
from importlib import resources
from importlib.util import find_spec
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ore_conduit_web.config import WebConfig
from ore_conduit_web.files import (
    Upload,
    Uploads,
    check_file,
    disposition,
    media_type_of,
    read_upload,
    refuse,
)
from ore_conduit_web.live import LiveHub, Position, event_stream, parse_position
from ore_conduit_web.threads import ThreadSummary, WebError, WebThreads
from ore_conduit_web.tokens import Tokens
from ore_conduit_web.tree import ThreadTree
from ore_core.artifacts.attachment import MAX_FILE_NAME
from ore_core.conduit import ApiError, BusError, ConduitClient
from ore_core.events import MAX_ATTACHMENTS, MAX_EMOJI_LENGTH
from ore_core.files import FileCorrupt, FileMissing

__all__ = ["COOKIE", "create_app"]

COOKIE = "ore_web_token"
_ID = r"^[A-Za-z0-9_-]{1,128}$"
_TURN = r"^[A-Za-z0-9_-]{0,128}$"
UPLOADS = "/files"
"""The upload route under `/api` (`/files/link/...` at the root serves signed links)."""
_LINK_TOKEN = r"^[A-Za-z0-9_-]{1,2000}\.[A-Za-z0-9_-]{43}$"
_BEARER = re.compile(r"Bearer\s+(\S+)", re.IGNORECASE)


class ErrorDetail(BaseModel):
    """What went wrong: a word for programs, a sentence for people."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


class ThreadList(BaseModel):
    """The signed-in user's threads, last written first."""

    threads: list[ThreadSummary]


class NewThread(BaseModel):
    """A thread to create; the title defaults to the first message."""

    title: str = Field(default="", max_length=200)


class Rename(BaseModel):
    """A new title."""

    title: str = Field(max_length=200)


class NewMessage(BaseModel):
    """A user message. `parent_id` edits: the message goes after that turn (a branch;
    `""` before the first turn), and `edit_of` names the message it replaces (endpoints
    linked to the thread update their copy). `answer` false saves it without asking the
    model (an edit kept as it is). `client_id` makes a retried request count once.
    `files`: ids of the user's uploads (`POST /api/files`) sent with it; `text` may be
    empty when there are files."""

    text: str = ""
    answer: bool = True
    parent_id: str | None = Field(default=None, pattern=_TURN)
    edit_of: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    client_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,64}$")
    files: list[Annotated[str, Field(pattern=_ID)]] = Field(
        default_factory=list, max_length=MAX_ATTACHMENTS
    )

    @model_validator(mode="after")
    def _says_something(self) -> "NewMessage":
        if not self.text and not self.files:
            raise ValueError("a message needs text or files")
        if self.files and self.edit_of is not None:
            raise ValueError("an edit changes the text only: send files in a new message")
        return self


class Reaction(BaseModel):
    """An emoji to add to a message, or (`remove`) to take back."""

    emoji: str = Field(min_length=1, max_length=MAX_EMOJI_LENGTH, pattern=r"\S")
    remove: bool = False


class FileLimits(BaseModel):
    """The operator's `[files]`: the largest file in bytes and the media types taken
    (`type/subtype` or `type/*`); the page checks a file before uploading it."""

    max_size: int
    allowed_types: list[str]


class TurnRef(BaseModel):
    """A turn of the thread."""

    turn_id: str = Field(pattern=_TURN)


class Sent(BaseModel):
    """A message the core has accepted; its answer arrives on the thread's events."""

    event_id: str


class Tip(BaseModel):
    """The thread's tip after a fork."""

    current_tip: str


class Me(BaseModel):
    """Who the token signs in, the longest message accepted (the page counts), and the
    files accepted."""

    user: str
    reactor: str
    """How the core names this user among those reacting (`namespace:user`)."""
    max_message_length: int
    files: FileLimits


class Models(BaseModel):
    """Which turn processor answers, its configured model (null: it has none, as echo)
    and the models a thread may pick (empty: nothing to pick); `error` says why the
    processor could not be asked."""

    processor: str
    model: str | None
    models: list[str]
    error: str | None = None


class ChosenModel(BaseModel):
    """The model a thread answers with; `""` goes back to the processor's configured one."""

    model: str = Field(max_length=200)


_EVENT_FRAME: dict[str, Any] = {
    "description": "One server-sent event (OpenAPI 3.1: the schema of each event)",
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"enum": ["stored", "live", "partial", "pending", "changed"]},
        "data": {"type": "string", "description": "a JSON object"},
        "id": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$", "description": "stored only"},
    },
}

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "Bad input",
        401: "No token, or a wrong one",
        404: "Unknown thread or turn",
        409: "The thread is busy",
        413: "Too large",
        415: "A file of a type not allowed",
        502: "The core failed (refused unexpectedly, or sent a file that is not the one asked)",
        503: "The core cannot be reached",
    }.items()
}


async def _linked_file(client: ConduitClient, token: str) -> Response:
    """The bytes a file link names, as a download (an image shown inline): never
    rendered as a page of this origin, whatever its type."""
    try:
        attachment, data = await client.fetch_link(token)
    except ApiError as exc:
        if exc.status == 403:
            return _error(403, exc.code, exc.message)
        raise
    except FileMissing as exc:
        return _error(404, "file_missing", str(exc))
    except FileCorrupt as exc:
        return _error(502, "file_corrupt", str(exc))
    inline = attachment.media_type.startswith("image/") and "svg" not in attachment.media_type
    disposition = "inline" if inline else "attachment"
    headers = {
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(attachment.name)}",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, max-age=3600",
    }
    return Response(data, media_type=attachment.media_type, headers=headers)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413, before they are parsed; the
    `own_limit` paths (uploads, checked against the file policy) are left to their route."""

    def __init__(self, app: ASGIApp, limit: int, own_limit: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.own_limit = own_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.own_limit:
            await self.app(scope, receive, send)
            return
        too_large = _error(
            413, "too_large", f"the request body is over {self.limit} bytes; send less"
        )
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await too_large(scope, receive, send)
                return
        received = 0
        started = False

        async def counting() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise _TooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting, sending)
        except _TooLarge:
            if not started:
                await too_large(scope, receive, send)


def _swagger_files() -> str:
    """Where swagger-ui-py keeps Swagger UI's files (found, not imported: only the files
    are used)."""
    spec = find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is missing: pip install swagger-ui-py")
    return f"{spec.submodule_search_locations[0]}/static"


def _serve_docs(app: FastAPI) -> None:
    """`/docs`: Swagger UI over `/openapi.json`, from files of this installation (no CDN)."""
    app.mount("/docs-files", StaticFiles(directory=_swagger_files()), name="docs-files")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="ore web conduit: API",
            swagger_js_url="/docs-files/swagger-ui-bundle.js",
            swagger_css_url="/docs-files/swagger-ui.css",
            swagger_favicon_url="/docs-files/favicon-32x32.png",
        )


def create_app(threads: WebThreads, hub: LiveHub, tokens: Tokens, config: WebConfig) -> FastAPI:
    """The FastAPI application of one conduit process."""
    app = FastAPI(
        title="ore web conduit",
        docs_url=None,  # FastAPI's own loads Swagger UI from a CDN: /docs is served below
        redoc_url=None,
        version="1",
        description="Threads, messages and live events of ore, for the chat page and "
        "for programs. Send `Authorization: Bearer <token>` (the token `ore conduit web` "
        "prints) on every /api route.",
    )
    static = resources.files("ore_conduit_web") / "static"
    uploads = Uploads()

    async def signed_in(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> str:
        if not config.auth:
            return config.user
        token = None
        if authorization:
            match = _BEARER.fullmatch(authorization.strip())
            token = match.group(1) if match else None
        token = token or request.cookies.get(COOKIE)
        user = tokens.user_of(token) if token else None
        if user is None:
            said = "a wrong token" if token else "no token"
            raise WebError(
                401,
                "unauthorized",
                f"{said}: open the URL `ore conduit web` printed, or send "
                "`Authorization: Bearer <token>`",
            )
        return user

    User = Annotated[str, Depends(signed_in)]
    ThreadId = Annotated[str, Path(pattern=_ID, description="a thread id")]

    async def owned_thread(user: User, thread_id: ThreadId) -> str:
        await threads.owned(user, thread_id)
        return thread_id

    Owned = Annotated[str, Depends(owned_thread)]

    async def resume_at(
        after: Annotated[str | None, Query(max_length=40)] = None,
        last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    ) -> Position | None:
        try:
            return parse_position(last_event_id or after)
        except ValueError as exc:
            raise WebError(400, "bad_request", str(exc)) from None

    @app.exception_handler(WebError)
    async def web_error(request: Request, exc: WebError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.code, exc.message, headers)

    @app.exception_handler(RequestValidationError)
    async def bad_input(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()
        )
        return _error(400, "bad_request", problems or "bad request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, "http_error", str(exc.detail))

    @app.exception_handler(ApiError)
    async def core_refused(request: Request, exc: ApiError) -> Response:
        status = exc.status if exc.status in (400, 404, 409, 413) else 502
        return _error(status, exc.code, exc.message)

    @app.exception_handler(BusError)
    async def core_away(request: Request, exc: BusError) -> Response:
        return _error(503, "unavailable", f"the ore core cannot be reached: {exc}")

    # -- the page ---------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    async def page(token: str | None = None) -> Response:
        if token is not None:
            response: Response = RedirectResponse("/", status_code=303)
            if tokens.user_of(token) is not None:
                response.set_cookie(
                    COOKIE, token, httponly=True, samesite="strict", max_age=400 * 86400
                )
            return response
        return FileResponse(str(static / "index.html"), media_type="text/html")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    _serve_docs(app)

    @app.get("/healthz", include_in_schema=False)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/files/link/{token}", include_in_schema=False)
    async def file_by_link(token: Annotated[str, Path(pattern=_LINK_TOKEN)]) -> Response:
        """A file by its signed link (`files.link_base`): the token is the credential,
        checked by the core (403 when forged or expired)."""
        return await _linked_file(threads.client, token)

    @app.get("/readyz", include_in_schema=False)
    async def ready() -> Response:
        """Ready when the live feed runs and a core answers (503 says which is missing)."""
        if not hub.ready.is_set():
            return _error(503, "starting", "the live event feed is not running yet")
        try:
            await threads.client.health()
        except (ApiError, BusError) as exc:
            return _error(503, "unavailable", f"no ore core answers: {exc}")
        return JSONResponse({"status": "ready"})

    # -- the API ----------------------------------------------------------------

    api = APIRouter(prefix="/api", responses=_ERRORS)

    @api.get("/me", summary="Who the token signs in, and the messages and files accepted")
    async def me(user: User) -> Me:
        policy = threads.client.files.policy
        limits = FileLimits(max_size=policy.max_size, allowed_types=list(policy.allowed_types))
        return Me(
            user=user,
            reactor=f"{threads.client.namespace}:{user}",
            max_message_length=config.max_message_length,
            files=limits,
        )

    @api.post(
        UPLOADS,
        status_code=201,
        summary="Upload a file (the body is its bytes), to send with a message",
        description="The file's media type is the request's `Content-Type` (or, when that "
        "is absent or `application/octet-stream`, the one its `name` suggests). The "
        "operator's `[files]` settings are checked first: over `max_size`: 413, a type "
        "`allowed_types` does not list: 415; a body cut short stores nothing (400). The "
        "answer's `id` goes in a message's `files`.",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
    )
    async def upload(
        user: User,
        request: Request,
        name: Annotated[str, Query(min_length=1, max_length=MAX_FILE_NAME)],
        content_type: Annotated[str | None, Header(max_length=200)] = None,
    ) -> Upload:
        # Content-Length is HTTP's own, not a documented parameter: the server refuses
        # a malformed one before the app sees it.
        length = request.headers.get("content-length", "")
        content_length = int(length) if length.isdigit() else None
        policy = threads.client.files.policy
        media_type = media_type_of(name, content_type)
        check_file(name, media_type)
        refuse(policy, name, media_type, content_length or 0)
        try:
            data = await read_upload(request.stream(), policy, name, content_length)
        except ClientDisconnect:
            raise WebError(400, "truncated", f"{name}: the upload was cut short") from None
        return uploads.add(user, await threads.client.upload(data, name, media_type))

    @api.get(
        "/threads/{thread_id}/files/{sha256}",
        summary="A file of one of the thread's messages",
        description="Served with its media type and name (`Content-Disposition`: inline "
        "for the images the page shows, else a download).",
        response_class=Response,
        responses={
            200: {
                "description": "The file's bytes",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
    )
    async def file(
        user: User,
        thread_id: Owned,
        sha256: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the file's sha256")],
    ) -> Response:
        attachment = await threads.attachment(user, thread_id, sha256)
        try:
            data = await threads.client.fetch(thread_id, attachment)
        except FileMissing as exc:
            raise WebError(404, "not_found", str(exc)) from None
        except FileCorrupt as exc:
            raise WebError(502, "corrupt", str(exc)) from None
        headers = {
            "Content-Disposition": disposition(attachment),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, max-age=86400, immutable",
        }
        return Response(data, media_type=attachment.media_type, headers=headers)

    @api.get("/models", summary="Which processor answers and the models it offers")
    async def models(user: User) -> Models:
        return Models.model_validate(await threads.client.models())

    @api.get("/threads", summary="List threads (search by title and text with q)")
    async def list_threads(user: User, q: Annotated[str, Query(max_length=200)] = "") -> ThreadList:
        return ThreadList(threads=await threads.find(user, q))

    @api.post("/threads", status_code=201, summary="Create a thread")
    async def create_thread(user: User, body: NewThread) -> ThreadSummary:
        return await threads.create(user, body.title)

    @api.get("/threads/{thread_id}", summary="A thread's turns, active path and siblings")
    async def get_thread(user: User, thread_id: Owned) -> ThreadTree:
        return await threads.tree(user, thread_id)

    @api.patch("/threads/{thread_id}", summary="Rename a thread")
    async def rename_thread(user: User, thread_id: Owned, body: Rename) -> ThreadSummary:
        return await threads.rename(user, thread_id, body.title)

    @api.put("/threads/{thread_id}/model", summary="Choose the model that answers the thread")
    async def choose_model(user: User, thread_id: Owned, body: ChosenModel) -> ChosenModel:
        return ChosenModel(model=await threads.choose_model(user, thread_id, body.model))

    @api.delete("/threads/{thread_id}", status_code=204, summary="Delete a thread")
    async def delete_thread(user: User, thread_id: Owned) -> Response:
        await threads.delete(user, thread_id)
        return Response(status_code=204)

    @api.post("/threads/{thread_id}/messages", status_code=202, summary="Send (or edit)")
    async def send(user: User, thread_id: Owned, body: NewMessage) -> Sent:
        if len(body.text) > config.max_message_length:
            raise WebError(
                413,
                "too_large",
                f"the message has {len(body.text)} characters; at most "
                f"{config.max_message_length} are accepted",
            )
        event_id = await threads.send(
            user,
            thread_id,
            body.text,
            parent_id=body.parent_id,
            edit_of=body.edit_of,
            client_id=body.client_id,
            answer=body.answer,
            attachments=uploads.take(user, body.files),
        )
        return Sent(event_id=event_id)

    @api.post(
        "/threads/{thread_id}/turns/{turn_id}/reactions",
        status_code=202,
        summary="React to a message (or take the reaction back)",
        description="One core `react`: the thread's pages and linked endpoints are told (a "
        "stored `reaction` event on the event stream); it never starts an answer. A "
        "turn the core does not know gets an `error` event.",
    )
    async def react(
        user: User,
        thread_id: Owned,
        turn_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,128}$")],
        body: Reaction,
    ) -> Sent:
        event_id = await threads.react(user, thread_id, turn_id, body.emoji, remove=body.remove)
        return Sent(event_id=event_id)

    @api.post("/threads/{thread_id}/regenerate", status_code=202, summary="Answer again")
    async def regenerate(user: User, thread_id: Owned, body: TurnRef) -> Sent:
        return Sent(event_id=await threads.regenerate(user, thread_id, body.turn_id))

    @api.delete("/threads/{thread_id}/turns/{turn_id}", status_code=204, summary="Delete a message")
    async def delete_message(
        user: User, thread_id: Owned, turn_id: Annotated[str, Path(pattern=_TURN)]
    ) -> Response:
        await threads.delete_message(user, thread_id, turn_id)
        return Response(status_code=204)

    @api.post("/threads/{thread_id}/select", summary="Show the branch through a turn")
    async def select(user: User, thread_id: Owned, body: TurnRef) -> ThreadTree:
        return await threads.select(user, thread_id, body.turn_id)

    @api.post("/threads/{thread_id}/fork", summary="Branch from a turn")
    async def fork(user: User, thread_id: Owned, body: TurnRef) -> Tip:
        return Tip(current_tip=await threads.fork(user, thread_id, body.turn_id))

    @api.post(
        "/threads/{thread_id}/interrupt",
        status_code=202,
        summary="Stop the answer",
        response_class=Response,
        responses={202: {"description": "The core was asked to stop; no body", "content": {}}},
    )
    async def interrupt(user: User, thread_id: Owned) -> Response:
        await threads.interrupt(user, thread_id)
        return Response(status_code=202)

    @api.get(
        "/threads/{thread_id}/export",
        summary="Export as Markdown or JSON",
        response_class=Response,
        responses={
            200: {
                "content": {"text/markdown": {"schema": {"type": "string"}}, "application/json": {}}
            }
        },
    )
    async def export(
        user: User,
        thread_id: Owned,
        format: Annotated[str, Query(pattern="^(markdown|json)$")] = "markdown",
    ) -> Response:
        media, text = await threads.export(user, thread_id, format)
        name = f"thread-{thread_id}.{'md' if format == 'markdown' else 'json'}"
        disposition = f'attachment; filename="{name}"'
        return Response(text, media_type=media, headers={"Content-Disposition": disposition})

    @api.get(
        "/threads/{thread_id}/events",
        response_class=Response,
        responses={
            200: {
                "description": "An endless event stream",
                "content": {"text/event-stream": {"schema": _EVENT_FRAME}},
            }
        },
        summary="The thread's events, live (server-sent events)",
        description="Stored events carry the id `SEQUENCE.INDEX`; reconnect with "
        "`Last-Event-ID` (or `after`) to resume exactly there. Frames: `stored` (an ore "
        "output event), `live` (a delta or a notice), `partial` (the answer so far, "
        "first, and again when a message ended without being stored), "
        "`pending` (a message sent), `changed` (title, branch or model). On a thread linked to "
        "other endpoints (bridging), a stored `turn_complete`, `turn_deleted` or "
        "`delivery` event, and every event of another endpoint, carries `relay` (a "
        "RelayView: `action`, `origin`, `sender`, `label`, `edit_of`, `reply_to`); "
        "deltas of answers the gateway's `answer` setting hides are not sent.",
    )
    async def events(
        user: User, thread_id: Owned, position: Annotated[Position | None, Depends(resume_at)]
    ) -> EventSourceResponse:
        frames = event_stream(hub, threads.client, thread_id, position)
        return EventSourceResponse(frames, headers={"Cache-Control": "no-cache"})

    app.include_router(api)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes, own_limit=("/api" + UPLOADS,))
    return app
