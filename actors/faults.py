"""Faults made visible: each one a pool or the learner group absorbed is one WARNING line (where, which replica or
rank, the cause, the seconds), a count per kind (the trainer puts them in metrics.jsonl, step by step), and the Ray
metric `mmrag_faults` (tags `kind` and `where`), which the Ray dashboard and Prometheus show.

Kinds: `outage` (a replica noticed gone: died, hung or slow), `kill` (a hung replica killed so that Ray restarts
it), `restart` (a replica answering again after its outage), `hedge` (a slow call sent to a second replica),
`resend` (a lost call sent again), `promotion` (a standby serving in a lost replica's place), `unfit` (a replica
whose own state failed a check, e.g. the weight-sync probe: replaced), `learner_fault` (a learner rank died, raised
or hung: the group is restored). The driver's own faults, `learner_restore`, `stale_batch_dropped` and
`failed_batch`, log their lines where they happen (`mmrag.training`, Ray-free) and reach the Ray metric through
`count_driver_faults`.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter

import ray
from ray.util import metrics

log = logging.getLogger(__name__)

FAULT_KINDS = ("outage", "kill", "restart", "hedge", "resend", "promotion", "unfit", "learner_fault")
DRIVER_FAULTS = {"learner_restore": "learner group", "stale_batch_dropped": "rollouts", "failed_batch": "rollouts"}
"""The driver's fault kinds, each with where the Ray metric says it happened."""


@functools.cache
def _fault_metric() -> metrics.Counter:
    return metrics.Counter("mmrag_faults", description="Faults the mmrag trainer absorbed, by kind and pool or rank",
                           tag_keys=("kind", "where"))


def report_fault(where: str, kind: str, message: str) -> None:
    """One WARNING line `where kind: message`, and the Ray metric counted (when Ray is up)."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind: expected one of {', '.join(FAULT_KINDS)}, got {kind!r}")
    log.warning("%s %s: %s", where, kind, message)
    if ray.is_initialized():
        _fault_metric().inc(tags={"kind": kind, "where": where})


def count_driver_faults(counts: dict[str, int]) -> None:
    """Add the driver's new faults (kind -> how many, `DRIVER_FAULTS`) to the Ray metric."""
    for kind, count in counts.items():
        if kind not in DRIVER_FAULTS:
            raise ValueError(f"driver fault kind: expected one of {', '.join(DRIVER_FAULTS)}, got {kind!r}")
        if count and ray.is_initialized():
            _fault_metric().inc(count, tags={"kind": kind, "where": DRIVER_FAULTS[kind]})


class FaultLog:
    """The faults of one pool (or the learner group), counted by kind."""

    def __init__(self, where: str):
        self.where = where
        self.counts: Counter[str] = Counter()

    def record(self, kind: str, message: str) -> None:
        report_fault(self.where, kind, message)
        self.counts[kind] += 1
