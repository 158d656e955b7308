"""The docs a new user follows say what works: install paths, imports, files, variables."""

from __future__ import annotations

import re

from tests.paths import ROOT


def read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


def test_the_interceptor_guide_names_imports_that_work() -> None:
    guide = read("docs/writing-an-interceptor.md")
    block = re.search(r"```python\n(from ore_core import \(.*?\))\n```", guide, re.DOTALL)
    assert block is not None, "the guide must show where InterceptResult and the events live"
    namespace: dict[str, object] = {}
    exec(block.group(1), namespace)
    assert {"InterceptResult", "UserMessageEvent", "Notice", "Severity"} <= set(namespace)


def test_no_doc_installs_a_package_that_is_not_on_pypi_by_name() -> None:
    for doc in [*ROOT.glob("docs/*.md"), *ROOT.glob("*/*/README.md"), ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        assert not re.search(r"ore install ore-", text), f"{doc}: install from ./path instead"


def test_the_nats_conduit_readme_says_where_the_nats_cli_comes_from() -> None:
    readme = read("conduits/nats/README.md")
    assert "nats req" in readme
    assert "github.com/nats-io/natscli" in readme


def test_the_readme_documents_the_files_and_variables_ore_reads() -> None:
    readme = read("README.md")
    for needed in ("ore.toml", "ORE_CONFIG", "chat.log", "ORE_TRACE_PLUGINS", "ORE_DEBUG"):
        assert needed in readme, needed


def test_the_readme_gives_the_test_time_as_a_range_and_the_quick_subset() -> None:
    readme = " ".join(read("README.md").split())
    assert "Everything takes 15-20 minutes on two CPUs (more on a loaded machine);" in readme
    assert '`tox -- -m "not slow"` skips the tests that start processes' in readme
