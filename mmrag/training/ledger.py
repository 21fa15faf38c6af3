"""The run ledger: one JSON line per step in RUN_DIR/metrics.jsonl, mirrored to TensorBoard.

Both trainers (single-process reference and distributed) write through this class, so
their curves are directly comparable. Numeric fields become TensorBoard scalars under
their own name; nested dicts (e.g. per-stage timings) are flattened with "/".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter


def _flatten(record: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class MetricsLedger:
    """Append-only metrics.jsonl plus TensorBoard event files in the run directory."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = self.path.open("a")
        self._writer = None
        if tensorboard:
            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    def log(self, step: int, record: dict[str, Any]) -> None:
        """Write one step's record (it must be JSON-serialisable)."""
        line = {"step": step, **record}
        self._file.write(json.dumps(line, sort_keys=True) + "\n")
        self._file.flush()
        if self._writer is not None:
            for name, value in _flatten(record).items():
                self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: str | Path) -> list[dict]:
    """All records of a run's metrics.jsonl, in order; a corrupt line is reported by number."""
    path = Path(run_dir) / "metrics.jsonl"
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON record ({exc.msg})") from None
    return records
