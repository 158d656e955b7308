"""ore's NATS transport: the one package that knows nats-py's private internals.

The core (`bus/`) and the conduit SDK (`conduit/`) both connect, publish and receive
through these modules; nothing else in ore touches nats-py's private names. An empty
face: import the module you need (`ore_core._nats.connection`, `.wire`, `.codec`, ...).
"""
