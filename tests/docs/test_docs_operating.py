"""docs/operating.md and its Grafana dashboard name only the metrics the code has."""

from __future__ import annotations

import json
import re

from ore_core.bus.ops.metrics import reference_table
from tests.paths import DOCS


def documented() -> set[str]:
    return set(re.findall(r"^\| `(ore_\w+)`", reference_table(), re.MULTILINE))


def test_the_metrics_reference_in_operating_md_matches_the_registries() -> None:
    text = (DOCS / "operating.md").read_text()
    table = text.split("<!-- metrics:begin -->\n")[1].split("<!-- metrics:end -->")[0]
    assert table == reference_table()


def test_the_grafana_dashboard_uses_only_documented_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana-ore.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name.removesuffix("_bucket") for e in exprs for name in re.findall(r"\bore_\w+", e)}
    assert used - documented() == set()


def test_the_alerts_in_operating_md_use_only_documented_metrics() -> None:
    text = (DOCS / "operating.md").read_text()
    alerts = text.split("## Alerts worth setting")[1].split("## Dashboard")[0]
    used = {name.removesuffix("_bucket") for name in re.findall(r"\bore_\w+", alerts)}
    assert used - documented() == set()
