"""An export's export.json (layout: `mmrag.training.export`), read without the model stack: `mmrag serve`'s driver
states the policy version it serves before any replica has loaded a model, and it never imports torch."""

from __future__ import annotations

import json
from pathlib import Path


def export_meta(export_dir: str | Path) -> dict:
    """export.json of an export (FileNotFoundError naming the file if it is not one)."""
    meta_path = Path(export_dir) / "export.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: not an exported checkpoint (expected RUN_DIR/export from `mmrag train`)")
    return json.loads(meta_path.read_text())
