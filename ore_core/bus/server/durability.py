"""What a deployment's bus keeps through a crash: the fsync policy and what it means.

nats-server acknowledges a JetStream write once it is in the OS's page cache and, by
default, fsyncs every two minutes: a power loss or OS crash of a single node loses what
was acknowledged since (Jepsen's NATS 2.12.1 analysis, nats-server#7564). ore's private
(embedded) server follows `nats.sync` instead: `always` (the default) fsyncs before every
acknowledgement, as the SQLite store does before a turn counts as kept. An operator's
server keeps its own `sync_interval`, which a client cannot read: the lines here say what
its setting and ore's stream replicas (`nats.replicas`) mean instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SyncPolicy", "operator_durability"]

ALWAYS = "always"
_INTERVAL = "interval:"


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """The embedded server's fsync policy, from a validated `nats.sync` setting."""

    setting: str

    @property
    def always(self) -> bool:
        """Every acknowledged write is on disk first."""
        return self.setting == ALWAYS

    @property
    def interval(self) -> str:
        """The nats-server duration between fsyncs (`2m`); `always` for every write."""
        return self.setting.removeprefix(_INTERVAL)

    def server_config(self) -> str:
        """The nats-server config block that sets it (`sync_interval` of `jetstream`)."""
        value = ALWAYS if self.always else f'"{self.interval}"'
        return f"jetstream {{\n  sync_interval: {value}\n}}\n"

    def describe(self) -> str:
        """One line for `ore serve` and `ore doctor`: what survives a crash."""
        if self.always:
            return (
                "embedded nats-server, one node, fsync before every acknowledgement "
                "(nats.sync = always): an acknowledged message survives a crash or power "
                "loss of this machine"
            )
        return (
            f"embedded nats-server, one node, fsync every {self.interval} "
            f"(nats.sync = {self.setting}): a power loss or OS crash loses what was "
            f"acknowledged in the last {self.interval} (a crash of the process alone does not)"
        )


def operator_durability(replicas: int) -> str:
    """One line for an operator's server: what `nats.replicas` and its sync setting mean."""
    if replicas == 1:
        return (
            "operator's nats-server, ore's streams R1: an acknowledged message survives a "
            "power loss only if that server runs with `sync_interval: always` (its default "
            "fsyncs every 2 min); nats.sync applies only to the embedded server"
        )
    return (
        f"operator's nats-server cluster, ore's streams R{replicas}: an acknowledged "
        f"message is on {replicas // 2 + 1} of {replicas} nodes, so it survives losing a "
        "minority of them; a power loss of all of them loses the last sync_interval "
        "(default 2 min) unless the servers run with `sync_interval: always`; nats.sync "
        "applies only to the embedded server"
    )
