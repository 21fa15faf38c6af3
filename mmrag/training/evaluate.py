"""Greedy evaluation of a pipeline on held-out questions.

Runs the inference path (N = M = 1, both components greedy) through any `Stages`
implementation and reports the mean reward plus what explains it: retrieval recall@K of the
gold documents, how often a gold document was among the kept ones, how many documents were
kept, query length; and, per question kind (visual, one-fact, two-fact: the knowledge a
question demands), the reward and how many documents were kept (`summarize_by_kind`).

Each record carries two scores of its answer, and which one a figure reads is said once, here: every choice made
on val (a k, a weight, the best pipeline, the step a run exports) reads `CHOICE_FIELD`, the config's reward, the
only signal training sees; every test figure that is compared reads `TEST_FIELD`, exact match against the
references, whatever the reward. Where the reward is not exact match itself (a reward model), its test score is
reported beside exact match (`reward_model_gap`).
"""

from __future__ import annotations

import statistics
from typing import TypeVar

from mmrag.config import RewardConfig
from mmrag.data.dataset import KINDS, Question
from mmrag.metrics.answers import exact_match
from mmrag.training.stages import QuestionTable, Stages

T = TypeVar("T")

CHOICE_FIELD = "reward"
"""The record field every choice on val reads: the config's reward, as training does."""
TEST_FIELD = "exact_match"
"""The record field every compared test figure reads: exact match, whatever reward the pipeline trained on."""


def mean_name(field: str) -> str:
    """The name `summarize` gives the mean of a record field ("reward" -> "reward_mean")."""
    return f"{field}_mean"


def reward_is_exact_match(cfg: RewardConfig) -> bool:
    """Whether the config's reward is the test figure itself (the rule reward scoring exact match): then its test
    score is the test figure and has no gap to report."""
    return cfg.backend == "rule" and cfg.metric == TEST_FIELD


def greedy_batch(stages: Stages, questions: list[Question]) -> list[dict]:
    """The inference path: greedy query, top-K, greedy selection, answer, reward; one record per question."""
    table = QuestionTable.of(questions)
    rows = list(range(len(questions)))
    queries = stages.translate_greedy(table)
    hits = stages.retrieve(queries)
    selections = stages.rerank_greedy(table, rows, queries, hits)
    evidence = [[row[j].text for j in selection] for row, selection in zip(hits, selections)]
    answers = stages.answer(table, rows, evidence)
    rewards = stages.score(table, rows, answers)
    return [
        {"id": q.id, "kind": q.kind, "question": q.question, "query": query, "answer": answer, "reward": float(reward),
         "exact_match": exact_match(answer, q.answers),
         "retrieved": [h.doc_id for h in row], "selected": [row[j].doc_id for j in selection],
         "selected_titles": [row[j].title for j in selection],
         "gold": list(q.gold_doc_ids)}
        for q, query, row, selection, answer, reward in zip(questions, queries, hits, selections, answers, rewards)
    ]


def summarize(predictions: list[dict]) -> dict[str, float]:
    """Aggregate metrics over `greedy_batch` records; with question kinds (world v2) also each kind's reward,
    documents kept and how often none is kept, as "KIND/reward_mean", "KIND/docs_kept_mean" (what `mmrag train`'s
    held-out table shows) and "KIND/docs_zero_fraction"."""
    if not predictions:
        raise ValueError("evaluation: no questions to evaluate (check train.eval_questions and the val split)")

    def rate(hit) -> float:
        return statistics.fmean(1.0 if hit(p) else 0.0 for p in predictions)

    shown = ((mean_name(CHOICE_FIELD), CHOICE_FIELD), ("docs_kept_mean", "docs_kept_mean"),
             ("docs_zero_fraction", "docs_zero_fraction"))
    per_kind = {f"{kind}/{name}": figures[figure] for kind, figures in summarize_by_kind(predictions).items()
                if kind in KINDS for name, figure in shown}
    return {
        mean_name(CHOICE_FIELD): statistics.fmean(p[CHOICE_FIELD] for p in predictions),
        "recall_at_k": rate(lambda p: set(p["gold"]) & set(p["retrieved"])),
        "gold_selected": rate(lambda p: set(p["gold"]) & set(p["selected"])),
        "gold_first": rate(lambda p: p["selected"][:1] and p["selected"][0] in p["gold"]),
        "docs_kept_mean": statistics.fmean(len(p["selected"]) for p in predictions),
        "query_words_mean": statistics.fmean(len(p["query"].split()) for p in predictions),
        **per_kind,
        **{mean_name(field): mean for field, mean in _exact_match_mean(predictions).items()},
    }


def _exact_match_mean(records: list[dict]) -> dict[str, float]:
    """{TEST_FIELD: mean} where every record carries exact match, else {}. A reward model's score can depart from
    exact match (paraphrases, its errors), so both are reported; records written before they carried it have none."""
    if all(TEST_FIELD in r for r in records):
        return {TEST_FIELD: statistics.fmean(r[TEST_FIELD] for r in records)}
    return {}


KIND_FIGURES = (CHOICE_FIELD, TEST_FIELD, "docs_kept_mean", "docs_zero_fraction", "docs_at_least_one_fraction",
                "docs_at_least_two_fraction", "gold_selected")
"""What `summarize_by_kind` reports of each kind besides its number of questions."""


def summarize_by_kind(predictions: list[dict]) -> dict[str, dict[str, float]]:
    """Per question kind present (in `KINDS` order, then any other, e.g. "unknown"): mean reward and exact match
    (where every record carries it), documents kept (mean; fractions keeping 0, >= 1, >= 2) and how often a gold
    document was kept, over `greedy_batch` records. A kind with no gold documents (visual) has gold_selected 0:
    nothing there can be kept."""
    grouped: dict[str, list[dict]] = {}
    for record in predictions:
        grouped.setdefault(record.get("kind", "unknown"), []).append(record)
    order = [*[k for k in KINDS if k in grouped], *sorted(set(grouped) - set(KINDS))]

    def figures(records: list[dict]) -> dict[str, float]:
        kept = [len(r["selected"]) for r in records]
        return {"questions": len(records),
                CHOICE_FIELD: statistics.fmean(r[CHOICE_FIELD] for r in records),
                **_exact_match_mean(records),
                "docs_kept_mean": statistics.fmean(kept),
                "docs_zero_fraction": statistics.fmean(1.0 if n == 0 else 0.0 for n in kept),
                "docs_at_least_one_fraction": statistics.fmean(1.0 if n >= 1 else 0.0 for n in kept),
                "docs_at_least_two_fraction": statistics.fmean(1.0 if n >= 2 else 0.0 for n in kept),
                "gold_selected": statistics.fmean(1.0 if set(r["gold"]) & set(r["selected"]) else 0.0
                                                  for r in records)}

    return {kind: figures(grouped[kind]) for kind in order}


POSITION_STEP = 7
"""How far the pick moves inside successive strides (coprime with the usual questions per entity, 8 and 10)."""


def held_out_sample(questions: list[T], n: int) -> list[T]:
    """`n` of `questions`, one from each of n even strides (all of them if fewer).

    A synthetic split is stored grouped by entity, eight or ten questions each, in a fixed order of kinds
    (world v2: three visual, five one-fact, two two-fact): its first 64 would come from only 8 entities,
    and the first question of each stride of 10 would always be a visual one. So the pick moves through
    the stride, by `POSITION_STEP` positions a stride, and reaches every position of an entity's questions.
    """
    if n >= len(questions):
        return list(questions)
    stride = len(questions) // n
    return [questions[index * len(questions) // n + (index * POSITION_STEP) % stride] for index in range(n)]


def evaluate(stages: Stages, questions: list[Question], batch_size: int = 32) -> tuple[dict[str, float], list[dict]]:
    """(metrics, per-question predictions) of the greedy pipeline on `questions`."""
    predictions = []
    for start in range(0, len(questions), batch_size):
        predictions.extend(greedy_batch(stages, questions[start:start + batch_size]))
    return summarize(predictions), predictions
