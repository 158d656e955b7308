"""`ore link add|list|remove`: an operator links conduit endpoints to threads.

Talks to a running `ore serve` over NATS (`P.admin.links.*`, the operator's
credentials of `[nats]`), so every worker honours a change at once. An endpoint is
`CONDUIT:VALUE` (the installed conduit's `conversation_key` names the key) or
`CONDUIT:KEY=VALUE`. Failures are one `Error: ...` line and exit status 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ore_core.cli.admin_call import admin_request
from ore_core.cli.options import cli_state, table_columns
from ore_core.config import OreSettings
from ore_core.endpoint import ANSWERS, DIRECTIONS, Endpoint, KeyForm, parse_endpoint
from ore_core.plugins.manager import OrePluginManager
from ore_core.plugins.registry import collect_registrations

__all__ = ["conversation_keys", "key_forms", "link", "parse_typed_endpoint"]


def conversation_keys(
    plugins: OrePluginManager, settings: OreSettings
) -> Callable[[str], str | None]:
    """`conversation_key` of each installed conduit, by name (`id` for one whose
    conversations are thread ids); None when no installed conduit of that name
    declares one."""
    classes = collect_registrations(plugins, settings).conduits

    def key_of(namespace: str) -> str | None:
        key = getattr(classes.get(namespace), "conversation_key", None)
        return key if isinstance(key, str) and key else None

    return key_of


def key_forms(plugins: OrePluginManager, settings: OreSettings) -> Callable[[str], KeyForm | None]:
    """`key_form` of each installed conduit, by name; None when it declares none."""
    classes = collect_registrations(plugins, settings).conduits

    def form_of(namespace: str) -> KeyForm | None:
        form = getattr(classes.get(namespace), "key_form", None)
        return form if isinstance(form, KeyForm) else None

    return form_of


def parse_typed_endpoint(text: str, plugins: OrePluginManager, settings: OreSettings) -> Endpoint:
    """An endpoint a person typed, as the installed conduits declare theirs."""
    return parse_endpoint(text, conversation_keys(plugins, settings), key_forms(plugins, settings))


def _endpoint(text: str) -> Endpoint:
    state = cli_state()
    return parse_typed_endpoint(text, state.plugin_manager, state.settings)


def _request(method: str, body: dict[str, Any]) -> dict[str, Any]:
    return admin_request("ore link", method, body)


def _show(links: dict[str, Any], *, deliveries: bool = False) -> list[tuple[str, ...]]:
    return [
        (
            links["thread"],
            f"{e['namespace']}:{e['key']}={e['value']}",
            e["direction"],
            links.get("gateway") or "-",
            links["answer"],
            *((_last_delivery(e.get("last_delivery")),) if deliveries else ()),
        )
        for e in links["endpoints"]
    ]


def _last_delivery(last: dict[str, Any] | None) -> str:
    """`failed [refused_permission]: 403 Forbidden (turn 9a1b2c3d, #12)` (the reason
    from the one list of docs/protocol.md when the conduit gave one), or `-` before any
    report."""
    if not last:
        return "-"
    reason = f" [{last['reason']}]" if last.get("reason") else ""
    detail = f": {last['detail']}" if last.get("detail") else ""
    where = f"(turn {str(last['turn'])[:8]}, #{last['sequence']})"
    return f"{last['status']}{reason}{detail} {where}"


@click.group()
def link() -> None:
    """Link conduit endpoints to threads (bridging: one conversation, several platforms)."""


@link.command("add")
@click.argument("thread")
@click.argument("endpoint")
@click.option("--direction", type=click.Choice(DIRECTIONS), default="inout", show_default=True)
@click.option("--answer", type=click.Choice(ANSWERS), help="Who answers in the thread.")
@click.option("--label", help='Label of relayed messages (default "{name} ({conduit})").')
@click.option(
    "--reaction-lines/--no-reaction-lines",
    default=None,
    help="Show reactions as short lines where a platform has none (default: off).",
)
def add_command(
    thread: str,
    endpoint: str,
    direction: str,
    answer: str | None,
    label: str | None,
    reaction_lines: bool | None,
) -> None:
    """Link ENDPOINT (CONDUIT:VALUE or CONDUIT:KEY=VALUE) to THREAD (an id or a
    unique prefix of one, as `ore threads list` shows them)."""
    body: dict[str, Any] = {
        "thread": thread,
        "endpoint": _endpoint(endpoint).as_dict(),
        "direction": direction,
    }
    if answer is not None:
        body["answer"] = answer
    if label is not None:
        body["label"] = label
    if reaction_lines is not None:
        body["reaction_lines"] = reaction_lines
    links = _request("links.add", body)
    click.echo(f"linked {endpoint} to thread {links['thread']} ({direction})")
    header = ("THREAD", "ENDPOINT", "DIR", "GATEWAY", "ANSWER")
    click.echo("\n".join(table_columns([header, *_show(links)])))


@link.command("list")
@click.option("--thread", help="Only this thread's links (an id or a unique prefix).")
@click.option("--conduit", "namespace", help="Only threads linked to this conduit namespace.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(thread: str | None, namespace: str | None, as_json: bool) -> None:
    """Every linked thread and its endpoints, with each endpoint's last delivery status
    (what its conduit last reported of a copy: delivered, retrying or failed)."""
    body = {k: v for k, v in (("thread", thread), ("namespace", namespace)) if v is not None}
    found = _request("links.list", body)["links"]
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("No links.")
        return
    rows: list[tuple[str, ...]] = [
        ("THREAD", "ENDPOINT", "DIR", "GATEWAY", "ANSWER", "LAST DELIVERY")
    ]
    for links in found:
        rows += _show(links, deliveries=True)
    click.echo("\n".join(table_columns(rows)))


@link.command("remove")
@click.argument("endpoint")
def remove_command(endpoint: str) -> None:
    """Unlink ENDPOINT from its thread."""
    removed = _request("links.remove", {"endpoint": _endpoint(endpoint).as_dict()})
    click.echo(f"unlinked {endpoint} from thread {removed['thread']}")
