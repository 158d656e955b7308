"""Bridging: links that let several conduit endpoints reach one thread (issue 29).

A face, not a loader: import the modules you need (`ore_core.bridge.endpoint`,
`.records`, `.links`, `.cache`, `.gateways`, `.routes`). docs/design/bridging.md is
the design; docs/protocol.md "Links" the wire.
"""
