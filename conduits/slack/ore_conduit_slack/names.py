"""Slack users' display names (`users.info`), cached: the label other endpoints of a
linked thread show for a Slack message (`Ana (slack): ...`), never the user id."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import structlog

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError

__all__ = ["UserNames"]

log = structlog.get_logger("ore.conduit.slack")

_CACHED = 5_000  # users remembered (the least recently asked go first)


class UserNames:
    """`name(team, user)`: the user's display name, asked once per user and run."""

    def __init__(self, api: SlackApi) -> None:
        self._api = api
        self._names: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def name(self, team: str, user: str) -> str:
        """The display name (else the real name, else the handle); the user id itself
        when Slack cannot tell (a bot, a user of another workspace, Slack away)."""
        if not user:
            return ""
        key = (team, user)
        cached = self._names.get(key)
        if cached is not None:
            self._names.move_to_end(key)
            return cached
        try:
            answer = await self._api.call("users.info", team, user=user)
        except (SlackError, Ambiguous) as exc:
            log.info("users.info failed: labelled with the user id", user=user, error=str(exc))
            return user  # not cached: asked again next time
        name = _display_name(answer.get("user")) or user
        self._names[key] = name
        if len(self._names) > _CACHED:
            self._names.popitem(last=False)
        return name


def _display_name(user: Any) -> str:
    if not isinstance(user, dict):
        return ""
    found = user.get("profile")
    profile: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(name, str) and name.strip():
            return name.strip()
    return ""
