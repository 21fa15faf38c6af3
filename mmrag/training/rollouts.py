"""The learner's supply of experience: rollout batches started ahead, handed over in order, stale ones dropped.

With `train.max_policy_lag` = L, at most L + 1 batches are rolled out or buffered while the
learner waits, and at most L while it trains: a batch started while the learner holds
version v is trained at version v + L at the latest, so the bound holds by construction
(0: synchronous, nothing is rolled out while the learner trains). Batches are handed over in
the order they were started; one whose oldest sample lags the learner by more than L when
its turn comes (possible after a restart) is dropped and counted. Every batch number is
accounted for in the `RolloutLedger`. `rollback_point` is where a checkpoint must put the run
back to: just before the oldest batch not yet trained (its number and the question cursor
before it drew its questions), so a restore rolls out again every batch started after the
trained ones, with the same questions and seeds.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass

from mmrag.config import Config
from mmrag.rl.rollout import Node, nodes_at
from mmrag.training.accounting import RolloutLedger
from mmrag.training.learner import PendingUpdate
from mmrag.training.run import QuestionCursor, score_trees
from mmrag.training.streaming import RolloutBatch, RolloutStream, assemble_trees

log = logging.getLogger(__name__)


LEARNER_POLL_S = 1.0
"""While the learner trains, how often the driver asks it whether it is done even when nothing else happens
(a rank past its deadline makes `PendingUpdate.done` true without any result arriving)."""


class RolloutFailed(RuntimeError):
    """Rollouts keep failing: a stage that cannot work, not one bad batch."""


@dataclass
class Experience:
    """A scored batch of rollout trees, ready for the learner."""

    roots: list[Node]
    number: int
    """The rollout number (1, 2, ... over the run) that drew it."""
    versions: dict[str, int]
    """The oldest translator and reranker versions among its samples."""
    seconds: float
    """Wall seconds from the start of its rollout to its end."""

    @property
    def oldest_version(self) -> int:
        return min(self.versions.values())


class Rollouts:
    def __init__(self, cfg: Config, stream: RolloutStream, cursor: QuestionCursor, ledger: RolloutLedger,
                 started: int = 0):
        self.cfg, self.stream, self.cursor, self.ledger = cfg, stream, cursor, ledger
        self.max_lag = cfg.train.max_policy_lag
        if self.max_lag < 0:
            raise ValueError(f"train.max_policy_lag: expected >= 0, got {self.max_lag}")
        self.started = started
        """Rollout batches started so far over the run (numbers the batches, seeds their sampling)."""
        self.queue: deque[RolloutBatch] = deque()
        """Started batches not yet handed over, oldest first (rolling out, or finished and buffered)."""
        self.cursor_before: dict[int, tuple[int, int]] = {}
        """Queued batch number -> the question cursor's (epoch, position) before that batch drew its questions."""
        self.shuffle_rng = random.Random(cfg.train.seed)
        self.failed_in_a_row = 0

    def next_experience(self, learner_version: int, steps_left: int | None = None) -> Experience:
        """The oldest fresh batch, scored; rolls out (and drops) what it must to get one, starting no more batches
        ahead than the `steps_left` (this one included) need."""
        while True:
            self._fill(training=False, most=steps_left)
            batch = self.queue[0]
            while batch.finished is None:
                self._pump()
            if batch.failed:
                self._retry_or_skip(batch)
                continue
            self._hand_over_oldest()
            self.failed_in_a_row = 0
            roots = assemble_trees(batch)
            versions = {level: min(n.policy_version for root in roots for n in nodes_at(root, level))
                        for level in ("translator", "reranker")}
            experience = Experience(roots, batch.number, versions, batch.finished - batch.started)
            if learner_version - experience.oldest_version > self.max_lag:
                self.ledger.dropped(batch.number)
                log.warning("stale batch dropped: rollout %d drawn by version %d, the learner at %d (lag %d > "
                            "train.max_policy_lag %d); %.1f s of rollouts lost", batch.number,
                            experience.oldest_version, learner_version, learner_version - experience.oldest_version,
                            self.max_lag, experience.seconds)
                continue
            score_trees(roots, self.cfg, self.shuffle_rng)
            self.ledger.trained_on(batch.number)
            return experience

    def _retry_or_skip(self, batch: RolloutBatch) -> None:
        """The oldest batch failed: roll it out once more (a fault, e.g. a node lost with its calls' inputs, is
        seldom hit twice), or, on its second attempt, skip its questions; raises `RolloutFailed` when too many
        attempts failed in a row (a stage that cannot work)."""
        self.failed_in_a_row += 1
        if self.failed_in_a_row >= self.cfg.pools.max_failed_batches:
            raise RolloutFailed(f"rollouts failed {self.failed_in_a_row} times in a row "
                                f"(pools.max_failed_batches); the last: {batch.error}")
        if batch.second_attempt:
            log.warning("rollouts failed_batch: rollout %d failed again (%s); its questions are skipped",
                        batch.number, batch.error)
            self._hand_over_oldest()
            return
        log.warning("rollouts failed_batch: rollout %d failed (%s); rolled out again with the same questions and "
                    "seeds", batch.number, batch.error)
        self.ledger.retried(batch.number)
        self.queue[0] = self.stream.start(batch.questions, batch.number, second_attempt=True)

    def _hand_over_oldest(self) -> None:
        """Take the oldest batch off the queue (it is no longer the rollback point)."""
        del self.cursor_before[self.queue.popleft().number]

    def overlap(self, pending: PendingUpdate, steps_after: int) -> None:
        """Keep rolling out (within the lag bound, and no more than the `steps_after` this one need) until the
        learner's update is done."""
        while not pending.done():
            self._fill(training=True, most=steps_after)
            self._pump(also=pending.futures, timeout=LEARNER_POLL_S)

    def discard(self) -> None:
        """Stop every started batch (after a learner restore: lost weights drew them; the restore's
        `RolloutLedger.rolled_back` marks their numbers abandoned)."""
        for batch in self.queue:
            self.stream.abandon(batch, "discarded: the learner was restored from a checkpoint")
        self.queue.clear()
        self.cursor_before.clear()

    def rollback_point(self) -> tuple[int, int, int]:
        """(batches started, cursor epoch, cursor position) just before the oldest batch not yet handed over:
        what a checkpoint records, so that a restore rolls every later batch out again."""
        if not self.queue:
            return self.started, self.cursor.epoch, self.cursor.position
        oldest = self.queue[0].number
        return (oldest - 1, *self.cursor_before[oldest])

    def in_flight(self) -> set[int]:
        """Numbers of the queued batches still rolling out."""
        return {b.number for b in self.queue if b.finished is None}

    def buffered(self) -> set[int]:
        """Numbers of the queued batches finished and not failed (a failed one is out of the queue's count
        once its turn comes; until then the ledger has it as failed already)."""
        return {b.number for b in self.queue if b.finished is not None and not b.failed}

    def _fill(self, training: bool, most: int | None = None) -> None:
        limit = self.max_lag + (0 if training else 1)
        while len(self.queue) < (limit if most is None else min(limit, most)):
            self.started += 1
            self.cursor_before[self.started] = (self.cursor.epoch, self.cursor.position)
            questions = self.cursor.next_batch(self.cfg.train.questions_per_step)
            self.ledger.started(self.started)
            self.queue.append(self.stream.start(questions, self.started))

    def _pump(self, also: list = (), timeout: float | None = None) -> None:
        for batch in self.stream.pump(also, timeout):
            self.ledger.finished(batch.number, batch.failed)
