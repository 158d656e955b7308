"""Files: what a Slack message shares goes into ore, what another endpoint sends goes up.

Inbound, each file of a `file_share` message is checked against the operator's `[files]`
policy by the size and type Slack states, then downloaded from its
`url_private_download` with the bot token (the `files:read` scope) and uploaded to ore
(`ConduitClient.upload`, stored once by content); the message carries the references.
A file refused, cut short, or not handed over (a wrong token or a missing scope: Slack
answers with its sign-in page) is one notice in the thread, and the message's text and
its other files still go.

Outbound, a file is fetched from ore and posted the current way
(`files.getUploadURLExternal`, the bytes POSTed to the URL it gives,
`files.completeUploadExternal` into the channel and thread). The bot token is never
logged: errors name the file, not the URL's headers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_core import OreError
from ore_core.conduit.media import fetch_files
from ore_core.files import FileCorrupt, FileRefused, guess_media_type

if TYPE_CHECKING:
    from ore_conduit_slack.ids import SlackThread
    from ore_core.artifacts import Attachment
    from ore_core.conduit.engine import PlatformContext

__all__ = ["SLACK_FILE_LIMIT", "SlackFiles", "Taken"]

log = structlog.get_logger("ore.conduit.slack")

SLACK_FILE_LIMIT = 1024**3
"""The largest file Slack takes (1 GB)."""
_TIMEOUT = aiohttp.ClientTimeout(total=300)


class _NotFetched(OreError):
    """A file Slack did not hand over whole."""


@dataclass
class Taken:
    """The files of one message that reached ore, and a notice for each that did not."""

    attachments: list[Attachment] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


class SlackFiles:
    """Files between Slack and ore for one conduit (see the module docstring)."""

    def __init__(self, api: SlackApi, context: PlatformContext | None, token: str) -> None:
        self.api = api
        self._context = context
        self._token = token
        self._session: aiohttp.ClientSession | None = None

    @property
    def context(self) -> PlatformContext:
        assert self._context is not None, "files move only for a platform of an engine"
        return self._context

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=_TIMEOUT)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # -- in -----------------------------------------------------------------------

    async def take(self, files: Sequence[Mapping[str, Any]]) -> Taken:
        """Each file into ore, or a notice saying why not."""
        taken = Taken()
        for described in files:
            name = str(described.get("name") or described.get("title") or "file")
            try:
                taken.attachments.append(await self._take(described, name))
            except (FileRefused, FileCorrupt) as exc:
                taken.notices.append(f"{exc}; the message went without it.")
            except _NotFetched as exc:
                log.warning("a slack file was not downloaded", file=name, error=str(exc))
                taken.notices.append(
                    f"I could not download {name} from Slack ({exc}); the message went without it."
                )
        return taken

    async def _take(self, described: Mapping[str, Any], name: str) -> Attachment:
        media_type = str(described.get("mimetype") or guess_media_type(name)).lower()
        size = described.get("size")
        policy = self.context.client.files.policy
        policy.check(name, media_type, size if isinstance(size, int) else 0)
        url = str(described.get("url_private_download") or described.get("url_private") or "")
        if not url:
            raise _NotFetched("Slack gave no URL for it")
        data = await self._download(url, media_type, policy.max_size)
        return await self.context.client.upload(data, name, media_type)

    async def _download(self, url: str, media_type: str, limit: int) -> bytes:
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._http().get(url, headers=headers) as response:
                if response.status != 200:
                    raise _NotFetched(f"HTTP {response.status}")
                page = response.content_type == "text/html" and media_type != "text/html"
                if page:  # Slack's sign-in page: the token is wrong or lacks files:read
                    raise _NotFetched("Slack refused the bot's token; is files:read granted?")
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > limit:
                        raise FileRefused(f"the file is over the files.max_size of {limit} bytes")
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _NotFetched(f"the download broke off: {type(exc).__name__}") from None

    # -- out ----------------------------------------------------------------------

    async def post(self, thread: SlackThread, conversation: str, attachment: Attachment) -> None:
        """Upload `attachment` (from ore) into the Slack thread; a line saying so when
        ore cannot hand it over."""
        context = self.context
        fetched, lines = await fetch_files(
            context.client, context.conversations, conversation, [attachment]
        )
        if lines:
            await self.api.once(
                "chat.postMessage",
                thread.team,
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                text=lines[0],
            )
            return
        ((_, data),) = fetched
        slot = await self.api.once(
            "files.getUploadURLExternal", thread.team, filename=attachment.name, length=len(data)
        )
        await self._send(str(slot["upload_url"]), data)
        files = [{"id": str(slot["file_id"]), "title": attachment.name}]
        await self.api.once(
            "files.completeUploadExternal",
            thread.team,
            files=files,
            channel_id=thread.channel,
            thread_ts=thread.thread_ts,
        )

    async def _send(self, url: str, data: bytes) -> None:
        try:
            async with self._http().post(url, data=data) as response:
                status = response.status
            if status >= 500:
                raise Ambiguous("file upload", f"HTTP {status}")
            if status != 200:
                raise SlackError(
                    "file upload", "file_too_large" if status == 413 else f"http_{status}"
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Ambiguous("file upload", type(exc).__name__) from None
