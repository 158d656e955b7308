"""The pytest plugin for ore plugin authors (registered under `pytest11` as `ore`).

Fixtures and conformance suites live in the submodules of this package; importing
this module from a plain `pytest` run must stay cheap and side-effect free.
"""
