"""Helpers for the tests that run the examples in docs/ (docs must not drift)."""

from __future__ import annotations

import re
import sys
import types

from tests.paths import DOCS

_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The ```python code blocks of a Markdown text, in order."""
    return _PYTHON_BLOCK.findall(text)


def page_blocks(page: str) -> list[str]:
    """The ```python code blocks of `docs/<page>`."""
    return python_blocks((DOCS / page).read_text())


def load_module(name: str, code: str) -> types.ModuleType:
    """Run `code` as the module `name` (importable by that name afterwards)."""
    module = types.ModuleType(name)
    module.__file__ = f"<docs example {name}>"
    sys.modules[name] = module
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    return module
