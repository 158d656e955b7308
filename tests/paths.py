"""Where the repository's own files are, for the tests that read them (docs, recipes)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
