"""The core side of NATS: `CoreService` (Manager <-> NATS) and the rooms it is built from.

protocol.md is the wire contract; `subjects` spells every subject and header. The
rooms, each a package whose face says what it owns and what it may import
(tests/project/test_layers.py checks it; docs/architecture.md draws the map):

- `ingress/`: messages of `ORE_IN` into the threads' streams, acked once handled;
- `egress/`: output events onto NATS, one stored batch per turn, copies for links;
- `api/`: the control API (threads, links, stored reads, forwarding to the owner);
- `cluster/`: partition ownership (leases), fencing, KV keys;
- `server/`: the server's layout, streams, permissions, migration, the embedded server;
- `store/`: the JetStream store and its plugin;
- `ops/`: metrics, stats, health;
- `service.py`: `CoreService`, which builds the rooms and runs them.

The package imports nothing on its own, so a process that needs one room does not
load the core service: import the modules (`ore_core.bus.service`, ...) directly.
"""
