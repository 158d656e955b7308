"""`ore auth`: the NATS users of a deployment, each limited to what it needs.

Writes into one directory (files readable by the owner only):

- `nats-auth.conf`: a nats-server `authorization` block: the core's user (everything),
  an admin user (the whole control API, operators' tools) and one user per conduit,
  limited to its namespace (see `ore_core.bus.server.permissions`). Include it in the
  server's configuration, or run `ore serve --auth nats-auth.conf`.
- `core.toml`, `admin.toml`: the `[nats]` settings of `ore serve` and of operators'
  tools (the admin user may call `P.admin.*` and every `P.api.NS.*`, e.g. with the
  `nats` CLI: `nats --user admin --password ... req ore.admin.threads.list '{}'`).
- `conduit-NAME.toml`: the `[nats]` settings of conduit NAME: user and password (or an
  nkey seed file `conduit-NAME.nk` with `--nkey`), its namespace, and the secret that
  keys its message ids. `ore --config conduit-NAME.toml conduit NAME` runs it.

Passwords, seeds and secrets are fresh random values on every run: rerunning the
command rotates every credential (restart the server and the processes after it).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from ore_core.bus.server.permissions import (
    NatsUser,
    admin_permissions,
    authorization_block,
    conduit_permissions,
)
from ore_core.cli.options import CliState, cli_state
from ore_core.conduit.base import OwnSubjects
from ore_core.plugins.registry import collect_registrations
from ore_core.subjects import Subjects, is_valid_namespace

__all__ = ["AuthFiles", "auth", "write_auth"]

CORE_USER = "ore"
ADMIN_USER = "admin"
AUTH_CONFIG = "nats-auth.conf"
_RESERVED = {CORE_USER, ADMIN_USER}


@dataclass(frozen=True, slots=True)
class AuthFiles:
    """What `write_auth` wrote: the server fragment and each role's settings file."""

    server_config: Path
    core: Path
    admin: Path
    conduits: dict[str, Path]


def _parse_conduit(spec: str) -> tuple[str, str]:
    name, _, namespace = spec.partition(":")
    namespace = namespace or name
    if not is_valid_namespace(name) or not is_valid_namespace(namespace):
        raise click.BadParameter(
            f"{spec!r}: use NAME or NAME:NAMESPACE, each 1-32 characters from a-z, 0-9, "
            "'_' and '-'",
            param_hint="--conduit",
        )
    if name in _RESERVED:
        raise click.BadParameter(
            f"{name!r} is the {name} user's name; pick another conduit name",
            param_hint="--conduit",
        )
    return name, namespace


def _toml(values: dict[str, str | list[str]]) -> str:
    lines = ["[nats]"]
    for key, value in values.items():
        if isinstance(value, list):
            lines.append(f"{key} = [{', '.join(_quote(item) for item in value)}]")
        else:
            lines.append(f"{key} = {_quote(value)}")
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, readable and writable by the owner only."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def _new_nkey() -> tuple[str, str]:
    """(seed, public key) of a fresh user nkey; needs the `nkeys` package."""
    try:
        import nkeys  # type: ignore[import-untyped]  # nats-py[nkeys]
    except ImportError as exc:  # pragma: no cover - nkeys is a dependency of ore-core
        raise click.ClickException("--nkey needs the 'nkeys' package (pip install nkeys)") from exc
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key
    return str(seed.decode()), str(public.decode())


def write_auth(
    directory: Path,
    conduits: list[tuple[str, str]],
    *,
    subjects: Subjects,
    urls: list[str],
    nkey: bool = False,
    own_subjects: Mapping[str, OwnSubjects] | None = None,
) -> AuthFiles:
    """Generate the users of a deployment into `directory` (see the module docstring).

    `own_subjects` (by conduit name) are granted to those conduits' users too.
    """
    directory.mkdir(parents=True, exist_ok=True)
    common: dict[str, str | list[str]] = {"subject_prefix": subjects.prefix}
    if urls:
        common["url"] = urls
    core_password = secrets.token_urlsafe(24)
    admin_password = secrets.token_urlsafe(24)
    users = [
        NatsUser(CORE_USER, core_password, comment="ore serve: everything"),
        NatsUser(
            ADMIN_USER,
            admin_password,
            permissions=admin_permissions(subjects),
            comment="operators: the whole control API, every namespace, the JetStream API",
        ),
    ]
    conduit_files: dict[str, Path] = {}
    for name, namespace in conduits:
        settings: dict[str, str | list[str]] = {**common, "namespace": namespace}
        own = (own_subjects or {}).get(name, OwnSubjects())
        permissions = conduit_permissions(
            subjects, namespace, publish=own.publish, subscribe=own.subscribe
        )
        comment = f"conduit {name}: namespace {namespace} only"
        if own.publish or own.subscribe:
            comment += f", and its own {', '.join(dict.fromkeys(own.subscribe + own.publish))}"
        responses = own.responses
        if nkey:
            seed, public = _new_nkey()
            seed_file = _write_private(directory / f"conduit-{name}.nk", seed + "\n")
            users.append(
                NatsUser(
                    nkey=public,
                    permissions=permissions,
                    comment=comment,
                    allow_responses=responses,
                )
            )
            settings["nkey_seed_file"] = str(seed_file.resolve())
        else:
            password = secrets.token_urlsafe(24)
            users.append(
                NatsUser(
                    name,
                    password,
                    permissions=permissions,
                    comment=comment,
                    allow_responses=responses,
                )
            )
            settings["user"] = name
            settings["password"] = password
        settings["secret"] = secrets.token_hex(32)
        conduit_files[name] = _write_private(directory / f"conduit-{name}.toml", _toml(settings))
    server_config = _write_private(directory / AUTH_CONFIG, authorization_block(users))
    core = _write_private(
        directory / "core.toml",
        _toml({**common, "user": CORE_USER, "password": core_password}),
    )
    admin = _write_private(
        directory / "admin.toml",
        _toml({**common, "user": ADMIN_USER, "password": admin_password}),
    )
    return AuthFiles(server_config, core, admin, conduit_files)


@click.command()
@click.option(
    "--conduit",
    "conduit_specs",
    multiple=True,
    metavar="NAME[:NAMESPACE]",
    help="A conduit user; its namespace defaults to its name. Repeat for each conduit.",
)
@click.option(
    "--out",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("ore-auth"),
    show_default=True,
    help="Directory to write the files into.",
)
@click.option(
    "--url",
    "urls",
    multiple=True,
    metavar="URL",
    help="The NATS URL the settings files name (default: nats.url; none: `ore serve --auth` "
    "runs an embedded server, pass its URL to the conduits with --nats).",
)
@click.option("--nkey", is_flag=True, help="Conduits authenticate with nkeys, not passwords.")
def auth(
    conduit_specs: tuple[str, ...], directory: Path, urls: tuple[str, ...], nkey: bool
) -> None:
    """Generate NATS users and permissions: the core, an admin and each conduit."""
    state = cli_state()
    nats = state.settings.nats
    conduits = [_parse_conduit(spec) for spec in conduit_specs]
    names = [name for name, _ in conduits]
    if len(set(names)) != len(names):
        raise click.BadParameter("each conduit name once", param_hint="--conduit")
    urls = tuple(urls) or tuple(nats.url or [])
    files = write_auth(
        directory,
        conduits,
        subjects=Subjects(nats.subject_prefix),
        urls=list(urls),
        nkey=nkey,
        own_subjects=_own_subjects(state, names),
    )
    click.echo(f"nats-server authorization: {files.server_config}")
    if urls:  # the server at those URLs has its own configuration
        click.echo("  (include it in your server's configuration and restart the server)")
        click.echo(f"ore serve:  ore --config {files.core} serve")
    else:  # `ore serve` runs the server: it must be given the users
        click.echo(f"ore serve:  ore --config {files.core} serve --auth {files.server_config}")
    click.echo(f"operators:  the admin user in {files.admin} (ore.admin.* control API)")
    for name, path in files.conduits.items():
        click.echo(f"conduit {name}: ore --config {path} conduit {name}")


def _own_subjects(state: CliState, names: list[str]) -> dict[str, OwnSubjects]:
    """The subjects of their own that the installed conduits among `names` use, with the
    settings of this invocation (`[plugins.NAME]`, e.g. the nats bridge's prefix)."""
    if not names:
        return {}
    classes = collect_registrations(state.plugin_manager, state.settings).conduits
    return {
        name: classes[name].own_subjects(
            classes[name].load_config(state.settings.plugin_config(name))
        )
        for name in names
        if name in classes
    }
