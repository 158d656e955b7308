"""A plugin with a misspelt hook name: ore must leave it out and say which hook."""

from ore_core import hookimpl


@hookimpl
def ore_register_sink(register):  # the hook is ore_register_sinks
    raise AssertionError("a hook that does not exist is never called")
