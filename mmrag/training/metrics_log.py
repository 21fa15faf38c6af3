"""The metrics log: one JSON line per step in RUN_DIR/metrics.jsonl, mirrored to the experiment trackers.

Both trainers (single-process reference and distributed) write through this class, so
their curves are directly comparable. Every tracker (`mmrag.training.trackers`: TensorBoard,
W&B, MLflow, as `train.loggers` lists them) gets the same scalars: each numeric field under
its own name, nested dicts (e.g. per-stage timings) flattened with "/". At each evaluation
the trackers also get a sample of held-out rollouts, which metrics.jsonl does not keep.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmrag.atomic import atomic_write_text
from mmrag.training.trackers import Tracker


def flatten_scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of `record` by name, nested names joined with "/" (lists and booleans left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_scalars(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class MetricsLog:
    """Append-only metrics.jsonl in the run directory, plus the trackers it fans each record out to.

    `resumed_at`: the step a resumed run continues from; the records of later steps, written by the
    interrupted run before it died and about to be written again, are dropped first, so each step keeps
    one record.
    """

    def __init__(self, run_dir: str | Path, trackers: Sequence[Tracker] = (), resumed_at: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if resumed_at is not None and self.path.is_file():
            kept = [record for record in read_metrics(self.run_dir) if record.get("step", 0) <= resumed_at]
            atomic_write_text(self.path, "".join(json.dumps(record, sort_keys=True) + "\n" for record in kept))
        self._file = self.path.open("a")
        self.trackers = list(trackers)

    def log(self, step: int, record: dict[str, Any]) -> None:
        """Write one step's record (it must be JSON-serialisable)."""
        line = {"step": step, **record}
        self._file.write(json.dumps(line, sort_keys=True) + "\n")
        self._file.flush()
        scalars = flatten_scalars(record)
        for tracker in self.trackers:
            tracker.log_scalars(step, scalars)

    def log_rollouts(self, step: int, rollouts: list[dict[str, Any]]) -> None:
        """Give every tracker a sample of rollouts (rows of `trackers.ROLLOUT_FIELDS`)."""
        for tracker in self.trackers:
            tracker.log_rollouts(step, rollouts)

    def close(self) -> None:
        self._file.close()
        for tracker in self.trackers:
            tracker.close()


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


def step_records(run_dir: str | Path) -> list[dict]:
    """The records the trainer loop wrote for its steps (each with its `ledger` and `step_seconds`), in order: a
    redone step appears once per time it ran; evaluation and summary records are left out."""
    return [record for record in read_metrics(run_dir) if "ledger" in record]

