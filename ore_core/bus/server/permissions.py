"""Who may use which subject: the NATS permissions of the core, an admin and a conduit.

One place states the model that protocol.md "Permissions" documents and `ore auth`
writes into a nats-server `authorization` block:

- the core (`ore serve`) may do everything: it owns the streams, the KV buckets and
  the control API, and publishes every thread's output;
- an admin may call the whole control API (`P.admin.>` and every namespace's
  `P.api.>`), send into any namespace, watch every output and the dead letters, and
  use the JetStream API (operators inspect and repair streams with the `nats` CLI);
- a conduit of namespace NS may publish only `P.in.NS.>` (its messages) and
  `P.api.NS.>` (its threads, its catch-up reads, its durable cursors) and subscribe
  only to `P.out.NS.>` (its output) and `_INBOX_NS.>` (its replies and JetStream
  publish acks). Its only `$` subjects are the writes of an upload to the files
  bucket (`file_permissions`); reading stored events goes through the core's
  `events.read`, which only reads `P.ev.NS.*`, and reading files through `files.read`.
  Everything else is denied because it is not allowed: other namespaces, `_INBOX.>`,
  `P.admin.>`, every `$JS.API` call (streams, consumers, listing, purges, deletes), `$SRV.>`.

The identity a conduit's message carries is the NS of the subject it was allowed to
publish on: that is why the namespace is in every subject.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ore_core.subjects import Subjects, validate_namespace

__all__ = [
    "NatsUser",
    "admin_permissions",
    "authorization_block",
    "conduit_permissions",
    "file_permissions",
]


def conduit_permissions(
    subjects: Subjects,
    namespace: str,
    *,
    publish: Sequence[str] = (),
    subscribe: Sequence[str] = (),
) -> dict[str, dict[str, list[str]]]:
    """The nats-server `permissions` of a conduit of `namespace`, plus the subjects of
    its own it names (a bridge's public subjects, `Conduit.own_subjects`)."""
    ns = validate_namespace(namespace)
    prefix = subjects.prefix
    return {
        "publish": {
            "allow": [
                f"{prefix}.in.{ns}.>",
                subjects.api_namespace_wildcard(ns),
                *file_permissions(subjects.files_bucket),
                *publish,
            ]
        },
        "subscribe": {"allow": [f"{prefix}.out.{ns}.>", f"{subjects.inbox(ns)}.>", *subscribe]},
    }


def file_permissions(bucket: str) -> list[str]:
    """What a conduit publishes to upload files into bucket `bucket` with the object
    store's API: chunks and descriptions. Nothing of the bucket is readable directly
    (a permission cannot pin a read to one object: a `*` in it also matches a literal
    `>`); reads go through the core's `files.stat` and `files.read`, which check that
    the file reached the namespace (docs/protocol.md, "Files")."""
    return [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]


def admin_permissions(subjects: Subjects) -> dict[str, dict[str, list[str]]]:
    """The nats-server `permissions` of an operator: the whole control API and streams."""
    prefix = subjects.prefix
    return {
        "publish": {
            "allow": [
                subjects.admin_wildcard,
                subjects.api_wildcard,
                f"{prefix}.in.>",
                "$SRV.>",
                "$JS.API.>",
                "$JS.ACK.>",
            ]
        },
        "subscribe": {"allow": ["_INBOX.>", f"{prefix}.out.>", f"{prefix}.dlq.>", "$SRV.>"]},
    }


@dataclass(frozen=True, slots=True)
class NatsUser:
    """One entry of the `users` list: a user/password or an nkey, with permissions.

    `permissions` None means everything (the core). `allow_responses` lets it reply to
    the requests it receives. `comment` is written above it.
    """

    user: str | None = None
    password: str | None = None
    nkey: str | None = None
    permissions: dict[str, dict[str, list[str]]] | None = None
    comment: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    allow_responses: bool = False

    def render(self) -> str:
        parts: list[str] = []
        if self.nkey is not None:
            parts.append(f"nkey: {json.dumps(self.nkey)}")
        else:
            parts.append(f"user: {json.dumps(self.user)}")
            parts.append(f"password: {json.dumps(self.password)}")
        text = "    {" + ", ".join(parts)
        if self.permissions is None:
            return text + "}"
        lines = [text + ", permissions: {"]
        for action in ("publish", "subscribe"):
            rule = self.permissions.get(action)
            if rule is None:
                continue
            allow = ", ".join(json.dumps(subject) for subject in rule["allow"])
            lines.append(f"      {action}: {{allow: [{allow}]}}")
        if self.allow_responses:
            lines.append("      allow_responses: true")
        lines.append("    }}")
        return "\n".join(lines)


def authorization_block(users: list[NatsUser]) -> str:
    """A nats-server `authorization { users = [...] }` block for `users`."""
    lines = ["authorization {", "  users = ["]
    for user in users:
        if user.comment:
            lines.append(f"    # {user.comment}")
        lines.append(user.render())
    lines += ["  ]", "}", ""]
    return "\n".join(lines)
