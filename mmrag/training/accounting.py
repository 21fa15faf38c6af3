"""The rollout ledger: where every started rollout number is, checked against the queue, the stream and the learner.

Each rollout batch has a number (1, 2, ... over the run); the ledger keeps the sink of every
number started so far, in exactly one of

    in_flight -> buffered -> trained | dropped_stale      (or in_flight -> failed)
    failed -> in_flight (a failed batch rolled out once more, same questions and seeds)
    any of them -> abandoned (a learner restore or a resume threw that attempt away)

An abandoned number is rolled out again (same questions, same seeds) when the run reaches it
anew, and moves back to `in_flight`. `check` compares the ledger with the truth after every
step: the numbers are 1..highest without a gap, exactly those above `Rollouts.started` are
abandoned, `in_flight` and `buffered` are the batches the queue holds in those states, and
`trained` is the set of rollout numbers the learner reported training on, each once. A
bookkeeping bug therefore stops the run instead of hiding in a total.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SINKS = ("trained", "dropped_stale", "failed", "abandoned", "in_flight", "buffered")
RESTORE_CAUSES = ("rank_lost", "rank_error", "resume")
"""Why a run went back to a checkpoint: a learner rank's process was lost, a rank's own code raised, a `--resume`."""


class LedgerUnbalanced(RuntimeError):
    """The ledger and the truth disagree: a bug in the trainer's bookkeeping."""


@dataclass
class RolloutLedger:
    sink_of: dict[int, str] = field(default_factory=dict)
    """Rollout number -> the sink its latest attempt is in."""
    failed_attempts: int = 0
    """Rollout attempts that failed (a stage call failed for good), the ones rolled out again included."""
    abandoned_attempts: int = 0
    """Rollout attempts thrown away by restores (a number rolled out again counts once per abandoned attempt)."""
    steps_redone: int = 0
    """Optimiser steps done again after the learner went back to an older checkpoint."""
    restores: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTORE_CAUSES, 0))
    """Returns to a checkpoint, by cause (`RESTORE_CAUSES`)."""

    def started(self, number: int) -> None:
        self._move(number, (None, "abandoned"), "in_flight")

    def finished(self, number: int, failed: bool) -> None:
        self._move(number, ("in_flight",), "failed" if failed else "buffered")
        self.failed_attempts += failed

    def retried(self, number: int) -> None:
        self._move(number, ("failed",), "in_flight")

    def trained_on(self, number: int) -> None:
        self._move(number, ("buffered",), "trained")

    def dropped(self, number: int) -> None:
        self._move(number, ("buffered",), "dropped_stale")

    def rolled_back(self, started: int, steps_redone: int, cause: str) -> None:
        """The run went back to a checkpoint taken when `started` batches had been started and kept: every later
        number's attempt is thrown away (its update, its samples) and will be rolled out again."""
        for number, sink in self.sink_of.items():
            if number > started and sink != "abandoned":
                self.sink_of[number] = "abandoned"
                self.abandoned_attempts += 1
        self.steps_redone += steps_redone
        self.restores[cause] += 1

    def numbers(self, sink: str) -> set[int]:
        return {number for number, where in self.sink_of.items() if where == sink}

    def check(self, started: int, in_flight: set[int], buffered: set[int], learned: list[int]) -> None:
        """Compare with the truth: `Rollouts.started`, the queue's batches rolling out and finished, and the
        rollout numbers the learner reported training on (in order, over the kept steps)."""
        highest = max(self.sink_of, default=0)
        problems = []
        if set(self.sink_of) != set(range(1, highest + 1)):
            problems.append(f"numbers missing: {sorted(set(range(1, highest + 1)) - set(self.sink_of))}")
        above = {n for n in self.sink_of if n > started}
        if self.numbers("abandoned") != above:
            problems.append(f"abandoned {sorted(self.numbers('abandoned'))} but rollouts started {started} "
                            f"(numbers above it: {sorted(above)})")
        for sink, truth in (("in_flight", in_flight), ("buffered", buffered)):
            if self.numbers(sink) != truth:
                problems.append(f"{sink} {sorted(self.numbers(sink))} but the queue holds {sorted(truth)}")
        twice = sorted(n for n, count in Counter(learned).items() if count > 1)
        if twice:
            problems.append(f"the learner trained on rollouts {twice} more than once")
        if self.numbers("trained") != set(learned):
            problems.append(f"trained {sorted(self.numbers('trained'))} but the learner trained on {sorted(learned)}")
        if problems:
            raise LedgerUnbalanced("rollout ledger: " + "; ".join(problems))

    def as_dict(self) -> dict:
        """Rollouts per sink, and the restore history (what a step's record and the run's summary show)."""
        counts = Counter(self.sink_of.values())
        return {**{sink: counts[sink] for sink in SINKS}, "started": len(self.sink_of),
                "failed_attempts": self.failed_attempts, "abandoned_attempts": self.abandoned_attempts,
                "steps_redone": self.steps_redone, "restores": dict(self.restores)}

    def state(self) -> dict:
        """What a checkpoint keeps (`RolloutLedger(**state)` rebuilds it)."""
        return {"sink_of": dict(self.sink_of), "failed_attempts": self.failed_attempts,
                "abandoned_attempts": self.abandoned_attempts,
                "steps_redone": self.steps_redone, "restores": dict(self.restores)}

    def _move(self, number: int, allowed: tuple, sink: str) -> None:
        now = self.sink_of.get(number)
        if now not in allowed:
            raise LedgerUnbalanced(f"rollout {number}: to {sink} from {now or 'not started'} "
                                   f"(only from {' or '.join(a or 'not started' for a in allowed)})")
        self.sink_of[number] = sink
