"""A plugin whose import fails: ore must report it by name and load the others."""

raise RuntimeError("ore-broken-plugin fails on import on purpose")
