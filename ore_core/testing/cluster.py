"""A loopback JetStream cluster of embedded nats-servers, for replication tests.

Built from `ore_core.bus.server.embedded.EmbeddedNatsServer` nodes; it lives in the testing
kit because nothing but tests runs a cluster on one machine (`ore serve` runs one
server). The `ore_nats_cluster` fixture (`ore_core.testing.nats`) starts one per test.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

# The cluster drives its nodes through the server's own start-up steps.
from ore_core.bus.server.embedded import (
    _POLL_INTERVAL,
    LOOPBACK,
    EmbeddedNatsServer,
    NatsPortInUse,
    NatsServerError,
    _get_json,
    _Lifecycle,
)

__all__ = ["EmbeddedNatsCluster"]

_PORT_RETRIES = 3


def _free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (the caller retries)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class EmbeddedNatsCluster(_Lifecycle):
    """A JetStream cluster of `size` nats-servers on loopback, for replication tests.

    Each node is an `EmbeddedNatsServer` (`nodes`, so a test can stop or restart one)
    with its own store dir `<base_dir>/n<i>`, free client and monitoring ports and a
    pre-chosen free cluster port (routes need every peer's port up front; if another
    process grabs one first, the whole start is retried on new ports). `start()` returns
    once every node agrees on a JetStream meta leader. Without `base_dir` the data goes
    to a temporary directory that `stop()` removes.
    """

    def __init__(
        self,
        size: int = 3,
        base_dir: str | Path | None = None,
        *,
        name: str = "ore",
        config: str | None = None,
        binary: str | Path | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        if size < 2:
            raise NatsServerError(
                f"a cluster needs at least 2 nodes, got {size}: use EmbeddedNatsServer"
            )
        self._size = size
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._temp_dir: Path | None = None
        self._name = name
        self._config = config
        self._binary = binary
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._nodes: list[EmbeddedNatsServer] = []

    @property
    def nodes(self) -> list[EmbeddedNatsServer]:
        """The node servers, in order `n1`, `n2`, ..."""
        return list(self._nodes)

    @property
    def urls(self) -> list[str]:
        """Every node's client URL: pass them all to `nats.connect(servers=...)`."""
        return [node.url for node in self._nodes]

    def start(self) -> None:
        """Start every node and return once they agree on a JetStream meta leader."""
        if self._nodes:
            raise NatsServerError("the cluster is already running; stop() it first")
        base = self._base_dir
        if base is None:
            base = self._temp_dir = Path(tempfile.mkdtemp(prefix="ore-nats-cluster-"))
        node_dirs = [base / f"n{index}" for index in range(1, self._size + 1)]
        new_dirs = [node_dir for node_dir in node_dirs if not node_dir.exists()]
        try:
            for attempt in range(1, _PORT_RETRIES + 1):
                try:
                    self._start_nodes(node_dirs)
                    return
                except NatsPortInUse:
                    self._stop_nodes()
                    if attempt == _PORT_RETRIES:
                        raise
                    # A node restarted on its own meta state waits ~5 s for an election;
                    # one that bootstraps afresh is ready in well under a second.
                    for node_dir in new_dirs:
                        shutil.rmtree(node_dir, ignore_errors=True)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (and remove the temporary base dir, if this cluster made it)."""
        self._stop_nodes()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _start_nodes(self, node_dirs: list[Path]) -> None:
        cluster_ports = _free_ports(self._size)
        routes = ", ".join(f'"nats-route://{LOOPBACK}:{port}"' for port in cluster_ports)
        self._nodes = [
            EmbeddedNatsServer(
                node_dir,
                config=self._node_config(node_dir.name, port, routes),
                binary=self._binary,
                start_timeout=self._start_timeout,
                stop_timeout=self._stop_timeout,
            )
            for node_dir, port in zip(node_dirs, cluster_ports, strict=True)
        ]
        deadline = time.monotonic() + self._start_timeout
        for node in self._nodes:
            node._launch()
        for node in self._nodes:
            node._wait_ready(deadline)
        self._wait_meta_leader(deadline)

    def _stop_nodes(self) -> None:
        nodes, self._nodes = self._nodes, []
        for node in nodes:
            node.stop()

    def _node_config(self, server_name: str, cluster_port: int, routes: str) -> str:
        node = (
            f"server_name: {server_name}\n"
            f"cluster {{\n"
            f"  name: {self._name}\n"
            f'  listen: "{LOOPBACK}:{cluster_port}"\n'
            f"  routes: [{routes}]\n"
            f"}}\n"
        )
        return node + (self._config or "")

    def _wait_meta_leader(self, deadline: float) -> None:
        while True:
            if self._meta_leader() is not None:
                return
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"the {self._size}-node nats cluster in {self._nodes[0].store_dir.parent} "
                    f"elected no JetStream meta leader within {self._start_timeout:g} s; see "
                    "the nats-server.log of each node"
                )
            time.sleep(_POLL_INTERVAL)

    def _meta_leader(self) -> str | None:
        """The meta leader every node knows, with every peer in the meta group and seen
        online and current by the leader; else None.

        A leader alone is not enough: until it has heard from every peer, an R3 stream
        create fails with "no suitable peers for placement" (error 10005).
        """
        metas: dict[str, dict[str, Any]] = {}  # server name -> its view of the meta group
        for node in self._nodes:
            meta = (_get_json(f"{node.monitor_url}/jsz") or {}).get("meta_cluster") or {}
            if meta.get("cluster_size") != self._size or not meta.get("leader"):
                return None
            metas[node.store_dir.name] = meta  # the node's directory is its server name
        leaders = {str(meta["leader"]) for meta in metas.values()}
        leader = leaders.pop()
        if leaders or leader not in metas:
            return None
        followers = metas[leader].get("replicas") or []
        if len(followers) != self._size - 1:
            return None
        if not all(f.get("current") and not f.get("offline") for f in followers):
            return None
        return leader
