"""`--processor FILE.py:NAME`: a turn processor from a plain Python file, before packaging.

For a first experiment (docs/writing-a-turn-processor.md): `ore serve --processor
./mine.py:Shout` and `ore chat --processor ./mine.py:Shout` answer with `Shout` of
`mine.py`, with no distribution, entry point or install. `NAME` is a class whose
instances are processors (`async def __call__(self, ctx)`, made with no arguments) or
an `async def NAME(ctx)` function. The file is loaded once, under a module name of its
own (nothing of `sys.modules` or `sys.path` is changed for anyone else), and every
way it can fail (no such file, an error while it runs, no such name, not a processor)
is one line that says what to fix, before anything starts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import pluggy

from ore_core.errors import OreError
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import TurnProcessor

__all__ = [
    "ProcessorFile",
    "ProcessorFileError",
    "load_processor_file",
    "processor_option",
    "use_processor_file",
]

_FORM = "FILE.py:NAME, e.g. ./mine.py:Shout"


class ProcessorFileError(OreError):
    """`--processor FILE.py:NAME` names nothing that can answer; the message says why."""


class ProcessorFile:
    """A plugin that registers the processor of one file under `name` (`mine.py:Shout`)."""

    def __init__(self, name: str, processor: TurnProcessor) -> None:
        self.name = name
        self.processor = processor

    @hookimpl
    def ore_register_turn_processors(
        self, register: Callable[[str, Callable[[Mapping[str, Any]], TurnProcessor]], None]
    ) -> None:
        register(self.name, lambda section: self.processor)


def load_processor_file(spec: str) -> ProcessorFile:
    """The processor `spec` (`FILE.py:NAME`) names, ready to register; else one-line error."""
    where, colon, attribute = spec.rpartition(":")
    if not colon or not where or not attribute.isidentifier():
        raise ProcessorFileError(f"--processor {spec}: name the file and the processor, {_FORM}")
    path = Path(where).expanduser()
    if not path.is_file():
        raise ProcessorFileError(f"--processor {spec}: no file {where}")
    module = _run(path, spec)
    found = getattr(module, attribute, None)
    if found is None:
        defined = sorted(name for name in vars(module) if not name.startswith("_"))
        raise ProcessorFileError(
            f"--processor {spec}: {where} defines no {attribute} "
            f"(it defines: {', '.join(defined) or 'nothing'})"
        )
    return ProcessorFile(f"{path.name}:{attribute}", _processor_of(found, spec))


def _run(path: Path, spec: str) -> Any:
    """Execute the file as a module of its own name (unique per path), so two files named
    alike or a module of the same name elsewhere never meet."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(f"_ore_processor_{digest}", path)
    if module_spec is None or module_spec.loader is None:
        raise ProcessorFileError(f"--processor {spec}: {path} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: whatever it raises is said in one line
        raise ProcessorFileError(
            f"--processor {spec}: {path} failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def _processor_of(found: object, spec: str) -> TurnProcessor:
    """`found` itself (an async function or callable object), or an instance of the class."""
    name = getattr(found, "__name__", type(found).__name__)
    if inspect.isclass(found):
        if not _awaits(_inherited_call(found)):
            raise _not_a_processor(spec, name)
        try:
            found = found()
        except Exception as exc:
            raise ProcessorFileError(
                f"--processor {spec}: {name}() failed: {type(exc).__name__}: {exc} "
                "(the class is made with no arguments)"
            ) from exc
    elif not (_awaits(found) or _awaits(_inherited_call(type(found)))):
        raise _not_a_processor(spec, name)
    processor: TurnProcessor = found  # type: ignore[assignment]
    return processor


def _inherited_call(cls: type) -> object:
    """The `__call__` its instances have (from the class or a base; not `type`'s own)."""
    for base in cls.__mro__:
        if "__call__" in vars(base) and base is not object:
            return vars(base)["__call__"]
    return None


def _awaits(function: object) -> bool:
    return inspect.iscoroutinefunction(function)


def _not_a_processor(spec: str, name: str) -> ProcessorFileError:
    return ProcessorFileError(
        f"--processor {spec}: {name} is not a turn processor: use a class with "
        f"`async def __call__(self, ctx)` or an `async def {name}(ctx)` function"
    )


def processor_option(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The `--processor FILE.py:NAME` option of `command` (parameter `processor_spec`)."""
    return click.option(
        "--processor",
        "processor_spec",
        metavar="FILE.py:NAME",
        help=f"Answer with NAME of a plain Python file (a processor class or async function) "
        f"instead of processor.name: a first experiment before packaging it, e.g. `ore "
        f"{command} --processor ./mine.py:Shout`.",
    )


def use_processor_file(spec: str, plugins: pluggy.PluginManager) -> str:
    """Load `spec`, register its processor with `plugins`; the name it answers as."""
    plugin = load_processor_file(spec)
    plugins.register(plugin, name=f"processor-file:{plugin.name}")
    return plugin.name
