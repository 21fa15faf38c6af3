"""The rollout ledger: where every rolled-out question went.

A batch's questions count as `rolled_out` when its rollout ends (scored, or failed for good).
From then on each question is in exactly one place:

    rolled_out = trained + dropped_stale + failed + buffered + lost_on_resume + lost_to_learner_failure

`buffered`: rolled out, not yet handed to the learner. `dropped_stale`: drawn by a policy more
than `train.max_policy_lag` versions behind the learner when its turn came. `lost_on_resume`:
buffered when the checkpoint a run resumed from was written. `lost_to_learner_failure`: trained
after the checkpoint a failed learner was restored from (their updates are gone; the steps are
redone), or buffered at that moment. The trainer checks the balance after every step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SINKS = ("trained", "dropped_stale", "failed", "buffered", "lost_on_resume", "lost_to_learner_failure")


class LedgerUnbalanced(RuntimeError):
    """Questions rolled out that the ledger cannot place: a bug in the trainer's bookkeeping."""


@dataclass
class RolloutLedger:
    rolled_out: int = 0
    trained: int = 0
    dropped_stale: int = 0
    failed: int = 0
    buffered: int = 0
    lost_on_resume: int = 0
    lost_to_learner_failure: int = 0
    steps_redone: int = 0
    """Optimiser steps done again after a learner was restored from an older checkpoint."""

    def finished(self, questions: int, failed: bool) -> None:
        self.rolled_out += questions
        if failed:
            self.failed += questions
        else:
            self.buffered += questions

    def trained_on(self, questions: int) -> None:
        self._take_buffered(questions)
        self.trained += questions

    def dropped(self, questions: int) -> None:
        self._take_buffered(questions)
        self.dropped_stale += questions

    def resumed(self) -> None:
        """The buffered batches of the checkpoint this run resumes from are gone."""
        self.lost_on_resume += self.buffered
        self.buffered = 0

    def learner_restored(self, trained_at_checkpoint: int, steps_redone: int) -> None:
        """The learner went back to a checkpoint: later updates and everything buffered are lost."""
        undone = self.trained - trained_at_checkpoint
        self.trained -= undone
        self.lost_to_learner_failure += undone + self.buffered
        self.buffered = 0
        self.steps_redone += steps_redone

    def check(self) -> None:
        placed = sum(getattr(self, sink) for sink in SINKS)
        if placed != self.rolled_out or min(getattr(self, sink) for sink in SINKS) < 0:
            raise LedgerUnbalanced(f"rolled_out {self.rolled_out} != placed {placed}: {self.as_dict()}")

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def _take_buffered(self, questions: int) -> None:
        if questions > self.buffered:
            raise LedgerUnbalanced(f"{questions} questions leave the buffer, which holds {self.buffered}")
        self.buffered -= questions
