"""Bridging: links that let several conduit endpoints reach one thread (issue 29).

A face, not a loader: import the modules you need (`.records`, `.links`, `.cache`,
`.admin`, `.gateways`; endpoints are vocabulary: `ore_core.endpoint`). docs/design/bridging.md is
the design; docs/protocol.md "Links" the wire.
"""
