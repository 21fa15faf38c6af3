"""A fixed number of documents, chosen on val: what a practitioner tunes when nothing else is trained.

The generator reads the top k of each question's ranked documents for every k it is given (k = 0 is
never retrieving); `choose_k` picks k on val's mean reward alone. Shared by the training-free
baselines (`mmrag.evaluation.baselines`, every k up to `reranker.max_docs`) and component-level
training (`mmrag.training.component_level`, its classifier's order, k from `K_CHOICES`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mmrag.data.dataset import Question
from mmrag.metrics.answers import exact_match
from mmrag.retrieval.hit import Hit
from mmrag.training.evaluate import CHOICE_FIELD, TEST_FIELD
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable

K_CHOICES = (0, 1, 2, 3, 5)
"""Documents component-level training hands the generator (the top k of its classifier's order)."""
BATCH = 32
"""Questions the generator reads at once."""


def choose_k(val_by_k: dict[int, float]) -> int:
    """The k with the highest val reward; on a tie the smaller k (fewer documents to read)."""
    if not val_by_k:
        raise ValueError("choose_k: no k was evaluated on val")
    return min(val_by_k, key=lambda k: (-val_by_k[k], k))


def records_by_k(pipeline: LocalPipeline, questions: list[Question], hits: list[list[Hit]],
                 ks: Sequence[int] = K_CHOICES, scores: dict[tuple, dict[str, float]] | None = None
                 ) -> dict[int, list[dict]]:
    """For every k, one record per question (kind, reward, exact match, selected and gold ids, as `greedy_batch`
    writes them) when the generator reads the top k of the question's `hits`. `scores`, when given, holds the reward
    and exact match of every (question id, evidence doc ids) already read and gains the new ones: the generator and
    the reward are frozen and greedy, so many rankings that hand a question the same documents share one reading."""
    known = {} if scores is None else scores
    records: dict[int, list[dict]] = {k: [] for k in ks}
    for start in range(0, len(questions), BATCH):
        batch, batch_hits = questions[start:start + BATCH], hits[start:start + BATCH]
        table = QuestionTable.of(batch)
        for k in ks:
            keys = [(q.id, tuple(hit.doc_id for hit in row[:k])) for q, row in zip(batch, batch_hits)]
            unread = [i for i, key in enumerate(keys) if key not in known]
            if unread:
                answers = pipeline.answer(table, unread, [[hit.text for hit in batch_hits[i][:k]] for i in unread])
                rewards = pipeline.score(table, unread, answers)
                known.update((keys[i], {CHOICE_FIELD: float(reward), TEST_FIELD: exact_match(answer, batch[i].answers)})
                             for i, answer, reward in zip(unread, answers, rewards))
            records[k].extend({"kind": q.kind, **known[key], "selected": list(key[1]), "gold": list(q.gold_doc_ids)}
                              for q, key in zip(batch, keys))
    return records


def mean_of(records: list[dict], field: str) -> float:
    """The mean of a record field (`CHOICE_FIELD` or `TEST_FIELD`); 0 over no records."""
    return statistics.fmean(r[field] for r in records) if records else 0.0


def mean_reward_by_k(records: dict[int, list[dict]]) -> dict[int, float]:
    return {k: mean_of(rows, CHOICE_FIELD) for k, rows in records.items()}
