"""Files on a platform that cannot take them all: degraded, never dropped.

A relayed message's files go to the adapter on its last part when the platform takes
them (`Capabilities.takes_file`); each other one is shown in the text instead, as a
line with a signed, expiring link to it where the deployment serves links
(`files.link_base`, `ConduitClient.file_link`), else as a line naming it and its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ore_core.artifacts.attachment import Attachment
from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.client import ConduitClient
from ore_core.conduit.waiting import until_answered
from ore_core.errors import ApiError

__all__ = ["fit_files", "file_line"]


def file_line(attachment: Attachment, url: str | None) -> str:
    """The line that shows a file the platform cannot take: `📎 q3.pdf (application/pdf,
    5.2 MB): https://…`, or `📎 q3.pdf (…) (not shown here)` without a link."""
    if url:
        return f"📎 {attachment.describe()}: {url}"
    return f"📎 {attachment.describe()} (not shown here)"


async def fit_files(
    client: ConduitClient,
    capabilities: Capabilities,
    thread_id: str,
    text: str,
    attachments: Sequence[Attachment],
) -> tuple[str, tuple[Attachment, ...]]:
    """`text` with a line for each file the platform cannot take, and the files it can."""
    taken: list[Attachment] = []
    lines: list[str] = []
    for attachment in attachments:
        if capabilities.takes_file(attachment):
            taken.append(attachment)
            continue
        try:
            url = await until_answered(
                partial(client.file_link, thread_id, attachment),
                "the core did not answer",
                thread_id=thread_id,
            )
        except ApiError:  # the thread was deleted, or the file removed: say so, no link
            url = None
        lines.append(file_line(attachment, url))
    return "\n".join(filter(None, [text, *lines])), tuple(taken)
