"""Settings: `ore.toml` plus `ORE_*` environment variables, validated once at start-up.

Precedence, highest first: environment variables (nested with `__`, e.g.
`ORE_NATS__URL`), the config file, the defaults below. The file is the one named
explicitly (`--config`), else `$ORE_CONFIG`, else `ore.toml` in the user's config
directory when it exists. A bad value fails with one line naming the key, where the
value came from and what is allowed (`ConfigError`); `describe_sources()` tells
where every effective value came from, for `ore config`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from ore_core.endpoint import Answer, Direction, Endpoint, EndpointError
from ore_core.errors import SECRET_MASK, OreError, describe_validation_error
from ore_core.files.policy import DEFAULT_ALLOWED_TYPES, DEFAULT_MAX_SIZE
from ore_core.session.policy import DoubleTexting

__all__ = [
    "CONFIG_ENV",
    "ConfigError",
    "CompactionSettings",
    "ConfigValue",
    "FilesSettings",
    "GatewayEndpointSettings",
    "GatewaySettings",
    "LogFormat",
    "LogLevel",
    "LogSettings",
    "NatsSettings",
    "OreSettings",
    "ProcessorSettings",
    "SECRET_MASK",
    "SessionSettings",
    "StoreSettings",
    "default_config_path",
    "load_settings",
    "resolve_config_path",
]

CONFIG_ENV = "ORE_CONFIG"
"""Environment variable naming the config file when `--config` is not given."""

ENV_PREFIX = "ORE_"

_MAX_PAYLOAD_LIMIT = 64 * 1024 * 1024  # nats-server refuses max_payload above max_pending
_SUBJECT_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_NAMESPACE = re.compile(r"[a-z0-9_-]{1,32}")
_NATS_SCHEMES = ("nats", "tls", "ws", "wss")
_SYNC = re.compile(r"always|interval:[1-9][0-9]*(ms|s|m|h)")
# Free-form tables (plugins, store, processor) cannot type their secrets: mask by name.
_SECRET_NAME = re.compile(r"password|passwd|secret|token|api_?key|credential", re.IGNORECASE)
_PATH_NAME = re.compile(r"_(file|path|dir)$")


class ConfigError(OreError):
    """The configuration is unreadable or invalid; the message names the key and source."""


class _Section(BaseModel):
    """A settings table whose unknown keys are errors (they are almost always typos)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class NatsSettings(_Section):
    """How to reach NATS. No `url` means: start a private embedded nats-server."""

    url: Annotated[list[str] | None, NoDecode] = None
    """NATS server URLs (`nats://`, `tls://`, `ws://`, `wss://`); in the environment, a
    comma-separated list. Unset: `ore serve` and `ore chat` start a private nats-server."""
    user: str | None = None
    """User name for user/password authentication."""
    password: SecretStr | None = None
    """Password for user/password authentication (hidden in `ore config`)."""
    token: SecretStr | None = None
    """Token authentication (hidden in `ore config`)."""
    nkey_seed_file: Path | None = None
    """File holding an NKey seed, for NKey authentication."""
    creds_file: Path | None = None
    """A `.creds` file (JWT and NKey seed), for decentralised authentication."""
    tls_cert_file: Path | None = None
    """Client certificate for mutual TLS (with `tls_key_file`)."""
    tls_key_file: Path | None = None
    """Private key of `tls_cert_file`."""
    tls_ca_file: Path | None = None
    """CA certificate that signed the server's certificate."""
    subject_prefix: str = "ore"
    """First token(s) of every subject, stream and bucket name ore uses; lets several
    deployments share one NATS account."""
    namespace: str | None = None
    """A conduit's namespace (default: the conduit's name): the threads it may reach.
    `ore auth` writes it into each conduit's settings file."""
    secret: SecretStr | None = None
    """Secret that keys a conduit's message ids so no other conduit can squat them
    (hidden in `ore config`); written by `ore auth`."""
    partitions: int | None = None
    """Number of ingress partitions (a power of two, 1 to 1024): how many core workers
    can share the threads. Unset: the existing deployment's count, or 8 for a new one;
    `ore migrate --partitions N` changes it."""
    max_payload: ByteSize = ByteSize(1024 * 1024)
    """Largest message ore publishes (e.g. `1MiB`, at most `64MiB`); also the limit of the
    private nats-server."""
    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    """JetStream replicas of every stream ore creates (1, 3 or 5 in a cluster); a change
    on existing streams is made by `ore migrate`, never silently at start."""
    retry_delay: PositiveFloat = 1.0
    """Seconds before a message the store could not save (disk full, read-only, locked) is
    handled again; doubles per failure up to `retry_delay_max`. Such a message, and the
    newer ones of its thread, stay unacknowledged until they are handled."""
    retry_delay_max: PositiveFloat = 30.0
    """Longest delay between two attempts at a message the store could not save."""
    store_probe_interval: PositiveFloat = 5.0
    """Seconds between checks that the store takes writes; `/readyz` answers 503 while it
    does not."""
    sync: str = "always"
    """When the private nats-server writes what it acknowledged to disk: `always` (fsync
    before every acknowledgement) or `interval:DURATION` (e.g. `interval:2m`,
    nats-server's own default: a power loss or OS crash loses what was acknowledged
    since the last fsync). An operator's server (`url`) keeps its own `sync_interval`."""
    lease_ttl: float = 4.0
    """Seconds a worker's partition lease outlives its last renewal: after a worker dies,
    the others take its threads over after about this long (1 to 60)."""

    @field_validator("url", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        # `ORE_NATS__URL=nats://a:4222,nats://b:4222` is the natural way to list a cluster.
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()] or None
        return value

    @field_validator("url")
    @classmethod
    def _check_schemes(cls, urls: list[str] | None) -> list[str] | None:
        for url in urls or ():
            if urlsplit(url).scheme not in _NATS_SCHEMES or not urlsplit(url).hostname:
                raise ValueError(
                    f"{url!r} is not a NATS URL (nats://host:port, tls://, ws://, wss://)"
                )
        return urls

    @field_validator("subject_prefix")
    @classmethod
    def _check_prefix(cls, prefix: str) -> str:
        if not _SUBJECT_PREFIX.fullmatch(prefix):
            raise ValueError("must be dot-separated tokens of letters, digits, _ and - (e.g. ore)")
        return prefix

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, namespace: str | None) -> str | None:
        if namespace is not None and not _NAMESPACE.fullmatch(namespace):
            raise ValueError("must be 1-32 characters from a-z, 0-9, _ and - (e.g. slack)")
        return namespace

    @field_validator("partitions")
    @classmethod
    def _check_partitions(cls, count: int | None) -> int | None:
        # Powers of two let a deployment double its partitions by splitting each in two.
        if count is not None and (count < 1 or count > 1024 or count & (count - 1)):
            raise ValueError("must be a power of two from 1 to 1024 (1, 2, 4, 8, ...)")
        return count

    @field_validator("lease_ttl")
    @classmethod
    def _check_lease_ttl(cls, ttl: float) -> float:
        if not 1.0 <= ttl <= 60.0:
            raise ValueError("must be from 1 to 60 seconds (failover takes about this long)")
        return ttl

    @field_validator("sync")
    @classmethod
    def _check_sync(cls, sync: str) -> str:
        if not _SYNC.fullmatch(sync):
            raise ValueError("must be always or interval:DURATION (e.g. interval:10s, interval:2m)")
        return sync

    @field_validator("max_payload")
    @classmethod
    def _check_max_payload(cls, size: ByteSize) -> ByteSize:
        if not 0 < size <= _MAX_PAYLOAD_LIMIT:
            raise ValueError("must be between 1 byte and 64MiB (e.g. 1MiB)")
        return size


def _default_store_path() -> Path:
    """`threads.db` in the user state directory (platformdirs: `~/.local/state/ore` on Linux)."""
    return Path(platformdirs.user_state_dir("ore")) / "threads.db"


class StoreSettings(BaseModel):
    """Which store keeps threads; extra keys are passed to the store's factory."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    name: str = "sqlite"
    """The registered store that keeps threads (built-in: `memory`, `json`, `journal`,
    `sqlite`); other keys of `[store]` go to its factory."""
    path: Path = Field(default_factory=_default_store_path)
    """Where the store keeps its data (a file or a directory, depending on the store)."""


class ProcessorSettings(BaseModel):
    """Which turn processor answers; extra keys are passed to the processor's factory."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    name: str = "echo"
    """The registered turn processor that answers user messages (built-in: `echo`);
    other keys of `[processor]` go to its factory."""


class SessionSettings(_Section):
    """How threads handle messages: double texting, streaming pace, memory."""

    double_texting: DoubleTexting = DoubleTexting.QUEUE
    """A message arriving during a running turn: `queue` it, `interrupt` the turn,
    `collect` queued messages into one turn, or `reject` it with a notice."""
    idle_timeout: NonNegativeFloat = 600.0
    """Seconds a thread with nothing to do stays loaded; then it is closed (it is in the
    store) and loaded again by its next message. 0 keeps every thread loaded."""
    delta_interval: NonNegativeFloat = 0.1
    """Live text deltas of a thread are sent at most once per this many seconds (the first
    at once); 0 sends every delta as the model produces it."""
    delta_intervals: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    """`delta_interval` per namespace (e.g. `{web = 0.03}`), for the threads of that
    namespace: wins over the pacing a conduit class declares in its capabilities."""
    delta_max_bytes: PositiveInt = 4096
    """Largest live delta message; text beyond it waits for the next interval, and what is
    left when the answer completes arrives with the complete text instead."""

    @field_validator("delta_intervals")
    @classmethod
    def _check_namespaces(cls, intervals: dict[str, float]) -> dict[str, float]:
        wrong = [name for name in intervals if not _NAMESPACE.fullmatch(name)]
        if wrong:
            raise ValueError(
                f"{', '.join(map(repr, wrong))} is not a namespace: use 1-32 characters "
                "from a-z, 0-9, _ and - (e.g. web)"
            )
        return intervals


class CompactionSettings(_Section):
    """When a long thread's older turns are summarised (compaction, docs/sessions.md)."""

    enabled: bool = True
    """Summarise older turns automatically when a thread nears the model's context window
    (needs a summariser: the `openai` processor, or a plugin's `ore_compact`)."""
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8
    """Share of the context window the thread (with the new message) may fill before it is
    compacted."""
    warn_at: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """Share of the context window at which the thread is told, once, that it will soon
    be compacted (below `threshold`); 0: no warning."""
    context_window: NonNegativeInt = 0
    """Tokens the model accepts; 0 asks the processor (a table of known models, else
    128000)."""
    keep_last: NonNegativeInt = 6
    """Turns before the new message kept verbatim after the summary (more when a tool
    call and its result would be cut apart)."""
    pin_first: bool = True
    """Keep the thread's first exchange (first message and its answer) verbatim."""
    model: str = ""
    """Model that writes the summary (e.g. a cheaper one); empty: the thread's model."""
    retry_after: PositiveInt = 10
    """After a failed compaction, messages that pass before it is tried again (a failing
    summariser is not called on every message)."""

    @field_validator("warn_at")
    @classmethod
    def _warn_before_compacting(cls, warn_at: float, info: ValidationInfo) -> float:
        threshold = info.data.get("threshold", 0.8)
        if warn_at >= threshold:
            raise ValueError(
                f"must be below compaction.threshold ({threshold}), or 0 for no warning"
            )
        return warn_at


_GATEWAY_NAME = re.compile(r"[a-z0-9_-]{1,64}")


class GatewayEndpointSettings(_Section):
    """One endpoint of a gateway: a conduit's conversation and which way it flows."""

    conduit: str
    """The conduit's namespace (its name unless configured otherwise), e.g. `slack`."""
    key: str
    """The conversation, spelt as the installed conduit declares it (its `key_form`,
    checked at start: `-:T0123:C0123:1712.0001` for Slack, `-1001234567890:0:0` for
    Telegram, `room` for NATS), or `KEY=VALUE` in full (`slack.thread=-:T0123:...`;
    `id=THREAD` for the terminal)."""
    direction: Direction = "inout"
    """`in` (its messages reach the thread), `out` (it is shown the thread) or `inout`."""

    @field_validator("conduit")
    @classmethod
    def _namespace(cls, value: str) -> str:
        try:
            Endpoint(value, "id", "x")
        except EndpointError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the endpoint's key is empty")
        return value


class GatewaySettings(_Section):
    """A `[[gateway]]`: several endpoints that are one conversation (issue 29)."""

    name: str
    """The gateway's name (1-64 of a-z, 0-9, `_`, `-`); its thread is `gateway-NAME`
    unless `thread` names one."""
    thread: str | None = None
    """An existing thread the endpoints join (default: `gateway-NAME`, created in the
    first endpoint's namespace)."""
    answer: Answer = "origin"
    """Who answers: `origin` (the agent answers where the message came from, the others
    see it), `all` (shown everywhere) or `none` (a pure human relay: no model call)."""
    label: str = "{name} ({conduit})"
    """How a relayed message is labelled on the other endpoints (`{name}`: the sender's
    display name, `{conduit}`: where it came from)."""
    reaction_lines: bool = False
    """Show a reaction made on another endpoint as a short line (`Ana reacted 👍 to
    "…"`) on a platform that has no reactions (where it has, the bot reacts on the
    message's copy whatever this says)."""
    endpoints: list[GatewayEndpointSettings]
    """The endpoints, at least two, one per conduit namespace, none listed twice."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if _GATEWAY_NAME.fullmatch(value) is None:
            raise ValueError("use 1-64 characters from a-z, 0-9, '_' and '-'")
        return value

    @field_validator("thread")
    @classmethod
    def _thread(cls, value: str | None) -> str | None:
        if value is not None:
            Endpoint("x", "id", value)  # the thread-id check, with its message
        return value

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, value: list[GatewayEndpointSettings]) -> list[GatewayEndpointSettings]:
        if len(value) < 2:
            raise ValueError("a gateway joins at least two endpoints")
        seen: set[str] = set()
        for endpoint in value:
            if endpoint.conduit in seen:
                raise ValueError(
                    f"conduit {endpoint.conduit!r} is listed twice: a gateway has one "
                    "endpoint per conduit namespace (an endpoint listed twice would loop)"
                )
            seen.add(endpoint.conduit)
        return value

    @property
    def thread_id(self) -> str:
        """The gateway's thread."""
        return self.thread or f"gateway-{self.name}"


class FilesSettings(_Section):
    """Attachments: which files are taken and how large (docs/protocol.md, "Files")."""

    max_size: ByteSize = ByteSize(DEFAULT_MAX_SIZE)
    """Largest file a conduit uploads or the core accepts in a message (e.g. `25MiB`); a
    larger one is refused with a notice and the message's text still goes."""
    allowed_types: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOWED_TYPES))
    """Media types a file may have (`type/subtype`, or `type/*` for all of a type); any
    other is refused with a notice and the message's text still goes."""
    bucket_max_bytes: ByteSize = ByteSize(0)
    """Size limit of the object store bucket that holds the files (`ORE_FILES`); 0: no
    limit beyond the server's. A full bucket refuses new files, never drops stored ones."""
    retention: NonNegativeFloat = 7 * 24 * 3600.0
    """Seconds a stored file that no thread refers to any more (its threads deleted, or
    uploaded and never sent) is kept before the sweep removes it. It also keeps a file
    uploaded for a message not yet stored: keep it well above a turn's length."""
    sweep_every: NonNegativeFloat = 3600.0
    """Seconds between the sweeps `ore serve` runs by itself (on one worker of a cluster:
    the owner of partition 0), removing the files no thread refers to that are older
    than `retention`; 0: never (run `ore files sweep` from cron instead)."""
    link_base: str = ""
    """Public URL of a route that serves files to signed links (the web conduit's
    `https://HOST/files/link`); a platform that cannot take a file then shows a link to
    it. Empty: no links, such a file shows as a line with its name and size."""
    link_secret: SecretStr | None = None
    """Key that signs file links (hidden in `ore config`); unset: the core generates one
    and keeps it in its KV bucket `ORE_LINKS`, the same for every worker."""
    link_ttl: PositiveFloat = 3 * 24 * 3600.0
    """Seconds a file link is valid after it is made (three days: over a weekend)."""

    @field_validator("allowed_types")
    @classmethod
    def _check_types(cls, types: list[str]) -> list[str]:
        wrong = [item for item in types if not _MEDIA_PATTERN.fullmatch(item)]
        if wrong:
            raise ValueError(
                f"{', '.join(map(repr, wrong))}: use type/subtype or type/* (e.g. image/*)"
            )
        return types


_MEDIA_PATTERN = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)")


LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LogFormat = Literal["auto", "console", "json"]


class LogSettings(_Section):
    """Log level and format (`auto`: console on a terminal, JSON lines otherwise)."""

    level: LogLevel = "info"
    """Lowest level logged (`ore --log-level` overrides it)."""
    format: LogFormat = "auto"
    """`console` (human-readable), `json` (one object per line) or `auto` (console on a
    terminal, JSON otherwise)."""

    @field_validator("level", "format", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """One effective setting: dotted key, value (secrets masked), and where it came from."""

    key: str
    value: Any
    source: str


class OreSettings(BaseSettings):
    """Every setting of ore. Build it with `load_settings()`; it is immutable.

    `OreSettings()` alone reads only the environment and defaults (no file).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    nats: NatsSettings = NatsSettings()
    """How to reach NATS."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """Where threads are kept."""
    processor: ProcessorSettings = ProcessorSettings()
    """What answers user messages."""
    session: SessionSettings = SessionSettings()
    """How a thread handles messages."""
    compaction: CompactionSettings = CompactionSettings()
    """Summarising the older turns of long threads."""
    files: FilesSettings = FilesSettings()
    """Attachments: size limit and allowed media types."""
    log: LogSettings = LogSettings()
    """Logging."""
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """One table per plugin, `[plugins.<name>]`, handed to the plugin as it is (the plugin
    validates it; see `OreSettings.plugin_config`)."""
    gateway: list[GatewaySettings] = Field(default_factory=list)
    """Bridges, `[[gateway]]`: endpoints of several conduits joined into one conversation,
    applied by `ore serve` at start (docs/bridging.md)."""

    @field_validator("gateway")
    @classmethod
    def _gateways_apart(cls, value: list[GatewaySettings]) -> list[GatewaySettings]:
        """Refuse an endpoint (or a thread) in two gateways: it would loop or be taken."""
        owners: dict[tuple[str, str], str] = {}
        threads: dict[str, str] = {}
        for gateway in value:
            if gateway.name in threads.values():
                raise ValueError(f"gateway {gateway.name!r} is declared twice")
            other = threads.setdefault(gateway.thread_id, gateway.name)
            if other != gateway.name:
                raise ValueError(
                    f"gateways {other!r} and {gateway.name!r} both use thread {gateway.thread_id}"
                )
            for endpoint in gateway.endpoints:
                holder = owners.setdefault((endpoint.conduit, endpoint.key), gateway.name)
                if holder != gateway.name:
                    raise ValueError(
                        f"endpoint {endpoint.conduit}:{endpoint.key} is in gateways "
                        f"{holder!r} and {gateway.name!r}: an endpoint belongs to one gateway"
                    )
        return value

    # Where explicitly set values came from: key path -> file path or env var name.
    _origins: dict[tuple[str, ...], str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env or secrets-dir magic: the file layer is ore.toml, read by load_settings.
        return init_settings, env_settings

    def plugin_config(self, name: str) -> dict[str, Any]:
        """The `[plugins.<name>]` table (a copy; empty when absent)."""
        return dict(self.plugins.get(name, {}))

    def describe_sources(self) -> list[ConfigValue]:
        """Every effective value with its source: `default`, the file path or the env var."""
        return [
            ConfigValue(".".join(path), _display(path, value), _origin_of(self._origins, path))
            for path, value in _leaves(self)
        ]


def default_config_path() -> Path:
    """`ore.toml` in the user's config directory (it may not exist)."""
    return Path(platformdirs.user_config_dir("ore")) / "ore.toml"


def resolve_config_path(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read: `path`, else `$ORE_CONFIG`, else the default if it exists.

    A file named explicitly or by `$ORE_CONFIG` must exist (`ConfigError` otherwise).
    """
    if path is not None:
        return _existing(Path(path), "")
    if named := os.environ.get(CONFIG_ENV):
        return _existing(Path(named), f" (named by {CONFIG_ENV})")
    default = default_config_path()
    return default if default.is_file() else None


def load_settings(path: str | os.PathLike[str] | None = None) -> OreSettings:
    """Read the config file (see `resolve_config_path`) and `ORE_*`, validate, return settings."""
    config_file = resolve_config_path(path)
    file_values = _read_toml(config_file) if config_file else {}
    try:
        env_values = EnvSettingsSource(OreSettings)()
    except SettingsError as exc:
        raise ConfigError(f"invalid environment variable: {exc}") from None
    origins = {leaf: str(config_file) for leaf, _ in _dict_leaves(file_values)}
    origins.update({leaf: _env_var_name(leaf) for leaf, _ in _dict_leaves(env_values)})
    try:
        settings = OreSettings(**_merge(file_values, env_values))
    except ValidationError as exc:
        raise ConfigError(_describe_errors(exc, origins)) from None
    settings._origins = origins
    return settings


def _existing(path: Path, why: str) -> Path:
    if not path.is_file():
        raise ConfigError(f"config file {path}{why} does not exist; create it or fix the path")
    return path


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: tables merge key by key, any other value in `override` wins."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _dict_leaves(
    values: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            yield from _dict_leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _leaves(model: BaseModel) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Effective leaf values of the settings, sections and free-form tables flattened."""
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    fields.update(model.model_extra or {})
    for name, value in fields.items():
        if isinstance(value, BaseModel):
            yield from (((name, *path), leaf) for path, leaf in _leaves(value))
        elif isinstance(value, Mapping) and value:
            yield from (((name, *path), leaf) for path, leaf in _dict_leaves(value))
        else:
            yield (name,), value


def _env_var_name(path: tuple[str, ...]) -> str:
    """The variable that set `path`: the longest `ORE_A__B` prefix present in the environment."""
    present = {name.upper(): name for name in os.environ}
    for end in range(len(path), 0, -1):
        candidate = (ENV_PREFIX + "__".join(path[:end])).upper()
        if candidate in present:
            return present[candidate]
    return (ENV_PREFIX + "__".join(path)).upper()


def _origin_of(origins: Mapping[tuple[str, ...], str], path: tuple[str, ...]) -> str:
    """Where `path` was set: its own or closest ancestor's source, else a descendant's."""
    for end in range(len(path), 0, -1):
        if path[:end] in origins:
            return origins[path[:end]]
    # A whole table can be wrong (an unknown section): its leaves carry the source.
    return next((src for key, src in origins.items() if key[: len(path)] == path), "default")


def _known_keys(path: tuple[str, ...]) -> list[str]:
    """The keys allowed in the table that holds `path`, for "unknown key" errors."""
    model: type[BaseModel] = OreSettings
    for part in path[:-1]:
        field = model.model_fields.get(part)
        if field is None or not isinstance(field.annotation, type):
            return []
        if not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return list(model.model_fields)


def _is_secret(path: tuple[str, ...], value: Any) -> bool:
    name = str(path[-1]) if path else ""
    return isinstance(value, SecretStr) or (
        bool(_SECRET_NAME.search(name)) and not _PATH_NAME.search(name)
    )


def _display(path: tuple[str, ...], value: Any) -> Any:
    """A JSON-friendly value for display; secrets become `SECRET_MASK`."""
    if value is None:
        return None
    if _is_secret(path, value):
        return SECRET_MASK
    if isinstance(value, Path):
        return str(value)
    return value


def _describe_errors(exc: ValidationError, origins: Mapping[tuple[str, ...], str]) -> str:
    """One line for all errors: `key = value (from SOURCE): what is allowed`."""
    problems = describe_validation_error(
        exc,
        show_input=True,
        origin=lambda path: f"from {_origin_of(origins, path)}",
        known_keys=_known_keys,
        secret=_is_secret,
    )
    return "invalid configuration: " + problems
