"""The version of ore-core (pyproject.toml's `version`), on the bottom floor.

Anything may import it (the core service reports it) without loading more of ore.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
