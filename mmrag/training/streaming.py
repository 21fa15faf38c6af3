"""Streaming rollout: a step's questions as micro-batches flowing through the stage pools.

Each micro-batch goes translate -> retrieve -> rerank -> answer -> score. Stage calls run on
`StagePools`: in one process each call runs at once (`InlinePools`); on Ray each call is a
future on one replica of that stage's pool (`mmrag.actors.stage_pools.ActorPools`), each replica keeping
a bounded number of calls in flight. `RolloutStream.pump` submits every call whose inputs are
ready while its pool has room, latest stage first (finishing work frees memory and feeds
the learner sooner), then waits for any call to finish; so the translator works on
micro-batch k+1 while the generator answers k. A finished batch becomes rollout trees
(`assemble_trees`), in question order whatever order its micro-batches finished in.

The stream reads of each call only what the trees need: queries, selections, answers, rewards, and
of retrieval the doc ids (`RetrievedRows`). The retrieved hits (passage texts, KB images) go on to
the reranker and the generator as whatever handle the pools gave (on Ray an object reference), and
the generator builds each leaf's evidence from them (`leaf_evidence`), so on Ray they never reach
the driver; the trees carry each query row's hits by the same handle (`HitsRow`) to the learner.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

from mmrag.data.dataset import Question
from mmrag.retrieval.retrieved_rows import RetrievedRows, leaf_evidence
from mmrag.rl.rollout import Node
from mmrag.training.reward_guard import REWARD_POOL, RewardGuard
from mmrag.training.seeding import call_seed
from mmrag.training.stages import QuestionTable, SampledQueries, SampledSelections, Stages

STAGES = ("translate", "retrieve", "rerank", "answer", "score")
SYNC_FIGURES = {"translate": "max_logprob_diff", "rerank": "max_score_diff"}
"""The weight-sync probe's figure each policy stage reports (metrics.jsonl `sync/...`, `mmrag.training.sync_probe`)."""


class StageFailed(RuntimeError):
    """A stage call that failed for good (after any re-dispatch the pools do); its micro-batch fails."""


class StagePools(Protocol):
    """Where stage calls run; `stages` is the same pipeline with blocking calls (evaluation, weights)."""

    stages: Stages

    def share(self, table: QuestionTable) -> Any:
        """The handle stage calls take for this table (on Ray: an object ref, put once)."""

    def has_room(self, stage: str) -> bool:
        """Whether the stage's pool takes another call now."""

    def submit(self, stage: str, *args: Any) -> Any:
        """Start one call of `stage` (a `Stages` method name); returns a future.

        Two stages differ from their `Stages` method: `retrieve`'s value is a `RetrievedRows`, and `answer` takes
        `(table, rows, hits, selections)`, the hits as `RetrievedRows.hits` holds them: the evidence is built where
        the answer is generated (`leaf_evidence`).
        """

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """Block until at least one of `futures` is done (or `timeout` passes); the done ones."""

    def result(self, future: Any) -> Any:
        """A done future's value; raises `StageFailed` if its call failed for good."""

    def fault_counts(self) -> dict[str, int]:
        """Faults the pools absorbed so far (replica outages, kills, re-sent calls...), by kind."""

    def export_faults(self, since: dict[str, int]) -> None:
        """Every kind of fault since the previous step, the driver's included (learner restores, stale and failed
        batches): exported where the pools export theirs (on Ray, its metrics)."""


@dataclass(eq=False)
class _Done:
    """A call that already ran in this process."""

    value: Any = None
    error: BaseException | None = None


class InlinePools:
    """`StagePools` running every call at once, in this process, on a `Stages` object."""

    def __init__(self, stages: Stages):
        self.stages = stages

    def share(self, table: QuestionTable) -> QuestionTable:
        return table

    def has_room(self, stage: str) -> bool:
        return True

    def submit(self, stage: str, *args: Any) -> _Done:
        try:
            if stage == "retrieve":
                return _Done(RetrievedRows.of(self.stages.retrieve(*args)))
            if stage == "answer":
                table, rows, hits, selections = args
                return _Done(self.stages.answer(table, rows, leaf_evidence(hits, selections)))
            return _Done(getattr(self.stages, stage)(*args))
        except Exception as exc:  # reported by `result`, as a remote call's failure would be
            return _Done(error=exc)

    def wait(self, futures: list, timeout: float | None = None) -> list:
        return list(futures)

    def result(self, future: _Done) -> Any:
        if future.error is not None:
            raise StageFailed(f"{type(future.error).__name__}: {future.error}") from future.error
        return future.value

    def fault_counts(self) -> dict[str, int]:
        return {}  # in-process calls have no replicas to lose

    def export_faults(self, since: dict[str, int]) -> None:
        """In process there is nowhere to export to: metrics.jsonl and the trackers have them."""


@dataclass
class MicroBatch:
    """A slice of one rollout batch's questions, and what each stage produced for it so far."""

    batch: RolloutBatch
    index: int
    questions: list[Question]
    table: Any
    """The shared `QuestionTable` handle every stage call on this micro-batch takes."""
    stage: int = 0
    """Index in STAGES of the next stage to run (len(STAGES): finished)."""
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        return call_seed(self.batch.seed, self.batch.number, self.index)


@dataclass
class RolloutBatch:
    """One step's worth of questions being rolled out (rollout `number`, counted over the run)."""

    number: int
    seed: int
    questions: list[Question]
    micro_batches: list[MicroBatch] = field(default_factory=list)
    error: str | None = None
    """Why the batch failed (a stage call failed for good), or None."""
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    second_attempt: bool = False
    """Whether this rolls the batch out again after it failed once (`Rollouts.next_experience`)."""

    @property
    def done(self) -> bool:
        return all(mb.stage == len(STAGES) for mb in self.micro_batches)

    @property
    def failed(self) -> bool:
        return self.error is not None


class RolloutStream:
    """Micro-batches of every started batch, moved through the stage pools by `pump`."""

    def __init__(self, pools: StagePools, n: int, m: int, micro_batch_size: int, seed: int,
                 guard: RewardGuard | None = None):
        """`guard`: told every reward the score stage returned or failed to (it stops a broken reward service)."""
        if micro_batch_size < 1:
            raise ValueError(f"train.micro_batch_size: expected at least 1, got {micro_batch_size}")
        self.pools, self.n, self.m, self.micro_batch_size, self.seed = pools, n, m, micro_batch_size, seed
        self.guard = guard
        self.in_flight: dict[Any, tuple[MicroBatch, float]] = {}
        self.waiting: list[MicroBatch] = []
        """Micro-batches whose next stage has not been submitted, in start order."""
        self.stage_seconds: dict[str, float] = defaultdict(float)
        """Seconds from submission to completion of every call, per stage, since the last `take_stage_seconds`."""
        self.sync_differences: dict[str, float] = {}
        """The largest weight-sync probe difference per figure since the last `take_sync_differences`."""

    def start(self, questions: list[Question], number: int, second_attempt: bool = False) -> RolloutBatch:
        """Begin rolling out `questions` as rollout batch `number` (its sampling seeds derive from it)."""
        batch = RolloutBatch(number, self.seed, questions, second_attempt=second_attempt)
        for index, start in enumerate(range(0, len(questions), self.micro_batch_size)):
            part = questions[start:start + self.micro_batch_size]
            batch.micro_batches.append(MicroBatch(batch, index, part, self.pools.share(QuestionTable.of(part))))
        self.waiting.extend(batch.micro_batches)
        return batch

    @property
    def busy(self) -> bool:
        return bool(self.in_flight or self.waiting)

    def pump(self, also: list = (), timeout: float | None = None) -> list[RolloutBatch]:
        """Submit what can run, wait for one call to finish (or one of `also`, or `timeout`), advance.

        Returns the batches that finished (or failed) during this call.
        """
        self._submit_ready()
        futures = list(self.in_flight) + list(also)
        if not futures:
            return []
        finished = []
        for future in self.pools.wait(futures, timeout):
            if future not in self.in_flight:
                continue
            micro_batch, submitted = self.in_flight.pop(future)
            batch = micro_batch.batch
            if batch.failed:
                continue  # a call of an abandoned batch ran out
            stage = STAGES[micro_batch.stage]
            self.stage_seconds[stage] += time.perf_counter() - submitted
            try:
                micro_batch.outputs[stage] = self.pools.result(future)
            except StageFailed as exc:
                self.abandon(batch, f"{stage} of micro-batch {micro_batch.index}: {exc}")
                finished.append(batch)
                if stage == REWARD_POOL and self.guard is not None:
                    self.guard.failed(len(micro_batch.questions) * self.n * self.m)
                continue
            if stage == REWARD_POOL and self.guard is not None:
                self.guard.scored(micro_batch.outputs[stage])
            self._note_sync_check(stage, micro_batch.outputs[stage])
            micro_batch.stage += 1
            if micro_batch.stage < len(STAGES):
                self.waiting.append(micro_batch)
            elif batch.done:
                batch.finished = time.perf_counter()
                finished.append(batch)
        return finished

    def run(self, questions: list[Question], number: int) -> list[Node]:
        """Roll out one batch to the end and return its trees (in question order); raises if it failed."""
        batch = self.start(questions, number)
        while batch.finished is None:
            self.pump()
        if batch.failed:
            raise StageFailed(batch.error)
        return assemble_trees(batch)

    def abandon(self, batch: RolloutBatch, reason: str) -> None:
        """Stop working on `batch`: its waiting micro-batches are dropped, its calls in flight run out unread."""
        batch.error = reason
        batch.finished = time.perf_counter()
        self.waiting = [mb for mb in self.waiting if mb.batch is not batch]

    def take_stage_seconds(self) -> dict[str, float]:
        seconds, self.stage_seconds = dict(self.stage_seconds), defaultdict(float)
        return seconds

    def _note_sync_check(self, stage: str, output: Any) -> None:
        difference = getattr(output, "sync_difference", None)  # set by a policy call that installed a checked version
        if difference is not None:
            figure = SYNC_FIGURES[stage]
            self.sync_differences[figure] = max(self.sync_differences.get(figure, 0.0), difference)

    def take_sync_differences(self) -> dict[str, float]:
        """The largest weight-sync probe difference per policy stage since the last call (`SYNC_FIGURES`)."""
        differences, self.sync_differences = self.sync_differences, {}
        return differences

    def _submit_ready(self) -> None:
        # Latest stage first; within a stage, micro-batches in the order they were started.
        for stage_index in reversed(range(len(STAGES))):
            stage = STAGES[stage_index]
            ready = sorted((mb for mb in self.waiting if mb.stage == stage_index),
                           key=lambda mb: (mb.batch.number, mb.index))
            for micro_batch in ready:
                if not self.pools.has_room(stage):
                    break
                self.waiting.remove(micro_batch)
                future = self.pools.submit(stage, *self._arguments(micro_batch, stage))
                self.in_flight[future] = (micro_batch, time.perf_counter())

    def _arguments(self, mb: MicroBatch, stage: str) -> tuple:
        out = mb.outputs
        if stage == "translate":
            return mb.table, self.n, mb.seed
        queries = [s.text for row in out["translate"].queries for s in row]
        query_rows = [q for q in range(len(mb.questions)) for _ in range(self.n)]
        if stage == "retrieve":
            return (queries,)
        if stage == "rerank":
            return mb.table, query_rows, queries, out["retrieve"].hits, self.m, mb.seed
        leaf_rows = [q for q in query_rows for _ in range(self.m)]
        if stage == "answer":
            return mb.table, leaf_rows, out["retrieve"].hits, out["rerank"].selections
        return mb.table, leaf_rows, out["answer"]


def assemble_trees(batch: RolloutBatch) -> list[Node]:
    """One rollout tree per question of a finished batch, in question order; leaves carry rewards.

    Roots record the rollout number (which the learner reports back), translator nodes the
    translator version that drew them and their row of hits (or its `HitsRow`), reranker nodes (the leaves)
    the reranker version, and each leaf's payload both and the doc ids of its evidence. Selections drawn with a
    retrieval gate (`SampledSelections.gated`) hang under two gate nodes of their query: "skip" above the empty
    selection, "retrieve" above the ranking's draws.
    """
    roots = []
    for mb in batch.micro_batches:
        sampled: SampledQueries = mb.outputs["translate"]
        selected: SampledSelections = mb.outputs["rerank"]
        retrieved: RetrievedRows = mb.outputs["retrieve"]
        answers, rewards = mb.outputs["answer"], mb.outputs["score"]
        versions = {"translator": sampled.policy_version, "reranker": selected.policy_version}
        row = 0
        for question, samples in zip(mb.questions, sampled.queries):
            root = Node("root", output=question.id, policy_version=min(versions.values()),
                        payload={"question": question, "rollout": batch.number})
            for sample in samples:
                t_node = root.add(Node("translator", output=sample.text, logprob=sample.logprob,
                                       policy_version=sampled.policy_version, payload={"hits": retrieved.row(row)}))
                leaves = []
                for draw, (selection, logprob) in enumerate(zip(selected.selections[row], selected.logprobs[row])):
                    leaf = row * len(selected.selections[row]) + draw
                    leaves.append(Node("reranker", output=tuple(selection), logprob=logprob,
                                       policy_version=selected.policy_version, reward=float(rewards[leaf]),
                                       payload={"answer": answers[leaf], "versions": versions,
                                                "doc_ids": [retrieved.doc_ids[row][j] for j in selection]}))
                if selected.gated:
                    _add_gate_arms(t_node, leaves[0], leaves[1:], selected.policy_version)
                else:
                    t_node.children.extend(leaves)
                row += 1
            roots.append(root)
    return roots


def _add_gate_arms(t_node: Node, skip: Node, draws: list[Node], version: int) -> None:
    """The gate's two arms below a query: "skip" above the empty selection, "retrieve" above the ranking's draws.

    The gate nodes carry the log-probs of its choices; the empty selection is the gate's, not a ranking draw.
    """
    skip_logprob, skip.logprob = skip.logprob, None
    retrieve_logprob = math.log(-math.expm1(skip_logprob)) if skip_logprob < 0 else -math.inf
    t_node.add(Node("gate", output="skip", logprob=skip_logprob, policy_version=version)).add(skip)
    t_node.add(Node("gate", output="retrieve", logprob=retrieve_logprob, policy_version=version)).children.extend(draws)
