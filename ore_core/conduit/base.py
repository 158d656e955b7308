"""The conduit contract: how a chat platform is bridged to ore over NATS.

A conduit is a dumb pipe. It maps the platform's conversation to an ore thread
(`client.lookup_or_create` on metadata keys prefixed with its name), sends user
messages with the platform's own message id as the event id (so platform retries
are stored once), renders output events back, and ignores events whose provenance
says they came from elsewhere. It decides nothing: interceptors and processors do.

Packages register conduit classes through the `ore_register_conduits` hook;
`ore conduit NAME` runs one as its own process against the configured NATS.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from ore_core.conduit.capabilities import Capabilities
from ore_core.endpoint import KeyForm
from ore_core.errors import OreError, describe_validation_error

if TYPE_CHECKING:
    from ore_core.conduit.client import ConduitClient

__all__ = ["Conduit", "ConduitConfig", "ConduitConfigError", "OwnSubjects", "StateDir"]


class ConduitConfigError(OreError):
    """A conduit's configuration section is invalid; the message names the key."""


StateDir = Annotated[Path, AfterValidator(Path.expanduser)]
"""A conduit setting naming a directory of its own state (`~` expanded when it loads)."""


class ConduitConfig(BaseModel):
    """Base of every conduit's settings: its `[plugins.<name>]` table in ore.toml.

    A docstring under a field describes it (`ore conduit NAME --help` shows it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    def check_secrets(self) -> None:
        """Raise an OreError (one line) when a token or secret the conduit needs is missing
        or malformed: `ore conduit` calls it before it connects or prints anything, so a
        bad token is said first and never sent anywhere. Default: nothing to check."""


@dataclass(frozen=True, slots=True)
class OwnSubjects:
    """NATS subjects a conduit uses besides ore's: `ore auth` grants them to its user.

    A bridge of plain NATS subjects (the `nats` conduit) subscribes to its public
    subjects and publishes replies; `responses` lets it answer requests (nats-server's
    `allow_responses`: a reply to the inbox of a request it received, nothing else).
    """

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    responses: bool = False


class Conduit(ABC):
    """Base class of conduits.

    Subclasses set `name` (also the provenance of the events they send and the prefix
    of their metadata keys), `description`, `config_model` (a ConduitConfig
    subclass), `capabilities` (what their platform can show) and `conversation_key`
    (how a link names one of its conversations), and implement `run`. A conduit that
    uses NATS subjects of its own overrides `own_subjects`.
    Instances are created with no arguments.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_model: ClassVar[type[ConduitConfig]] = ConduitConfig
    capabilities: ClassVar[Capabilities] = Capabilities()
    conversation_key: ClassVar[str] = ""
    """The metadata key naming a platform conversation (`slack.thread`): a link's
    endpoint is this key's value (`ore link add T slack:-:T0123:C0123:1712.0001`); `id`
    for a conduit whose conversation is the thread id itself; empty (the default): none,
    a link names the key in full (`NS:KEY=VALUE`)."""
    key_form: ClassVar[KeyForm | None] = None
    """How the `conversation_key`'s value is spelt (`ENTERPRISE:TEAM:CHANNEL:THREAD_TS`):
    `ore serve` refuses a gateway, `ore link` an endpoint, of another spelling; the
    help and the docs show it. None: any value."""

    @classmethod
    def load_config(cls, section: Mapping[str, Any]) -> ConduitConfig:
        """Validate the conduit's config section; one clear error naming the bad key."""
        try:
            return cls.config_model.model_validate(dict(section))
        except ValidationError as exc:
            problems = describe_validation_error(exc)
            raise ConduitConfigError(f"invalid [plugins.{cls.name}] settings: {problems}") from exc

    @classmethod
    def own_subjects(cls, config: ConduitConfig) -> OwnSubjects:
        """The NATS subjects it uses besides ore's, with these settings (default: none)."""
        return OwnSubjects()

    @abstractmethod
    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Bridge the platform until cancelled (shutdown), then return cleanly.

        Raise OreError (with a message a user can act on) for a fatal problem.
        """
