"""The core side of NATS: `CoreService` (Manager <-> NATS) and what it is built from.

protocol.md is the wire contract; `subjects` spells every subject and header. The
package imports nothing on its own, so a conduit that needs `bus.subjects` does not
load the core service: import the modules (`ore_core.bus.service`, ...) directly.
"""
