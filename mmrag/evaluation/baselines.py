"""Fixed pipelines a practitioner builds with no training, each with its number of documents chosen on val.

Every baseline is the frozen retriever and generator behind a fixed query and a fixed
selection: the top k retrieved documents in retrieval order, k from `K_CHOICES` (k = 0 is
never retrieving). The query forms:

  question           the question alone
  caption            the untrained translator's response (for the zoo: a description of the picture)
  caption+question   that response followed by the question, lower-cased
  image              the question image itself, through the encoder's image tower, against the KB index

With a reranker that reads with a visual reader (`reranker.visual_reader`), two more: the query
form `sight+question`, what the reader sees in the question image (`seen_description`) followed by
the question, which uses the generator's eye as the query writer (no trained component writes
queries with it: the translator is the captioner); and the best form's candidates reordered by
their retrieval score plus the cosine of their text with what the reader sees (`sight_reordered`):
the reranker's prior, so a trained reranker is measured against what that input gives untrained.

Each question is translated and retrieved once per form; only the generator and the
reward run once per k. `choose_k` picks k on the val split's mean reward alone, and the
test split is then read at that k (`FixedBaseline`): nothing about a test question can move
the choice. `oracle` hands the generator exactly the gold documents. Nothing here depends on
how a world words its texts: it reads questions, the KB index and the gold ids only.

`word_match_fitted` is not a baseline without training but a diagnostic of the reranker's inputs: the
best form's candidates reordered by the prior plus one weight times the summed word match
(`mmrag.models.word_match`), the weight chosen on val with k. It tells how much of a trained reranker's
gain a single fitted number already gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mmrag.data.dataset import Question
from mmrag.evaluation.settings import gold_doc_hits
from mmrag.models.translator import question_in_query
from mmrag.retrieval.hit import Hit
from mmrag.training.evaluate import summarize_by_kind
from mmrag.training.fixed_k import BATCH, K_CHOICES, choose_k, mean_reward_by_k, records_by_k
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable

QUERY_FORMS = ("question", "caption", "caption+question", "image")
SIGHT_FORM = "sight+question"
WORD_MATCH_WEIGHTS = (0.5, 1.0, 2.0, 5.0)
"""Weights of the summed word match `word_match_fitted` chooses among on val."""


@dataclass(frozen=True)
class FixedBaseline:
    """One fixed pipeline: the k chosen on val, the val and test mean reward at every k, and the test figures
    per question kind at every k (`summarize_by_kind`)."""

    name: str
    val_by_k: dict[int, float]
    test_by_k: dict[int, float]
    test_kinds_by_k: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return choose_k(self.val_by_k)

    @property
    def val_reward(self) -> float:
        return self.val_by_k[self.k]

    @property
    def test_reward(self) -> float:
        return self.test_by_k[self.k]

    def as_dict(self) -> dict:
        return {"name": self.name, "k": self.k, "val_reward": self.val_reward, "test_reward": self.test_reward,
                "val_by_k": self.val_by_k, "test_by_k": self.test_by_k,
                "by_kind": self.test_kinds_by_k.get(self.k, {})}


def best_fixed(baselines: Sequence[FixedBaseline]) -> FixedBaseline:
    """The baseline with the best val reward (at its chosen k): the one a practitioner would ship."""
    return max(baselines, key=lambda b: b.val_reward)


def kinds_by_k(records: dict[int, list[dict]]) -> dict[int, dict[str, dict[str, float]]]:
    return {k: summarize_by_kind(rows) for k, rows in records.items()}


def captions(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    """The untrained translator's greedy response to each question (its query without the template)."""
    responses = []
    for start in range(0, len(questions), BATCH):
        batch = questions[start:start + BATCH]
        queries = pipeline.translate_greedy(QuestionTable.of(batch))
        responses.extend(pipeline.translator.responses([q.image for q in batch], [q.question for q in batch], queries))
    return responses


def query_texts(form: str, questions: list[Question], responses: list[str]) -> list[str]:
    """The text query of a form (not `image`), one per question; `responses` are the captions, or for
    `sight+question` the `sight_descriptions`."""
    forms: dict[str, Callable[[Question, str], str]] = {
        "question": lambda q, caption: q.question,
        "caption": lambda q, caption: caption,
        "caption+question": lambda q, caption: f"{caption} {question_in_query(q.question)}",
        "sight+question": lambda q, sight: f"{sight} {question_in_query(q.question)}",
    }
    if form not in forms:
        raise ValueError(f"query form {form!r}: expected one of {sorted(forms)}")
    return [forms[form](q, caption) for q, caption in zip(questions, responses)]


def sight_descriptions(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    """What the reranker's visual reader sees in each question image, in its backbone's wording."""
    descriptions = []
    for start in range(0, len(questions), BATCH):
        descriptions.extend(pipeline.reranker.seen_descriptions([q.image for q in questions[start:start + BATCH]]))
    return descriptions


def retrieve(pipeline: LocalPipeline, form: str, questions: list[Question], responses: list[str]) -> list[list[Hit]]:
    """The top-K documents (`index.top_k`) of each question's query of this form (`responses` as `query_texts`
    reads them)."""
    top_k = pipeline.cfg.index.top_k
    if form == "image":
        encode = pipeline.encoder.encode_images
        queries: list = [q.image for q in questions]
    else:
        encode = pipeline.encoder.encode_texts
        queries = query_texts(form, questions, responses)
    hits = []
    for start in range(0, len(queries), BATCH):
        hits.extend(pipeline.retriever.search(encode(queries[start:start + BATCH]), top_k))
    return hits


def fixed_baselines(pipeline: LocalPipeline, val: list[Question], test: list[Question]
                    ) -> tuple[list[FixedBaseline], FixedBaseline | None]:
    """Every query form with k chosen on val, plus never- and always-retrieve, and the oracle; and, with a visual
    reader, the `word_match_fitted` diagnostic (None without one)."""
    splits = {"val": val, "test": test}
    responses = {split: captions(pipeline, questions) for split, questions in splits.items()}
    sighted = pipeline.reranker.visual_reader is not None
    sights = {split: sight_descriptions(pipeline, questions) for split, questions in splits.items()} if sighted else {}
    baselines, hits = [], {}
    for form in (*QUERY_FORMS, SIGHT_FORM) if sighted else QUERY_FORMS:
        texts = sights if form == SIGHT_FORM else responses
        hits[form] = {split: retrieve(pipeline, form, questions, texts[split]) for split, questions in splits.items()}
        baselines.append(scored_baseline(pipeline, form, splits, hits[form]))
    shipped = best_fixed(baselines)
    fitted = None
    if sighted:
        reordered = {split: sight_reordered(pipeline, hits[shipped.name][split], sights[split]) for split in splits}
        baselines.append(scored_baseline(pipeline, f"{shipped.name}, reordered by sight", splits, reordered))
        fitted = word_match_fitted(pipeline, shipped.name, splits, hits[shipped.name], sights)
    every = max(K_CHOICES)
    oracle = {split: oracle_records(pipeline, questions) for split, questions in splits.items()}
    return [*baselines, fixed_at(shipped, 0, "never-retrieve"),
            fixed_at(shipped, every, f"always-retrieve ({shipped.name}, top {every})"),
            FixedBaseline("oracle", mean_reward_by_k(oracle["val"]), mean_reward_by_k(oracle["test"]),
                          kinds_by_k(oracle["test"]))], fitted


def word_match_fitted(pipeline: LocalPipeline, form: str, splits: dict[str, list[Question]],
                      hits: dict[str, list[list[Hit]]], sights: dict[str, list[str]]) -> FixedBaseline:
    """`form`'s candidates reordered by the prior plus w x the summed word match, for every w of
    `WORD_MATCH_WEIGHTS`; the (w, k) with the best val reward (not a baseline without training: w is fitted)."""
    readings = {split: visual_readings(pipeline, questions) for split, questions in splits.items()}
    priors = {split: sight_scores(pipeline, hits[split], sights[split]) for split in splits}
    matches = {split: word_match_scores(pipeline, hits[split], readings[split]) for split in splits}
    candidates = []
    for weight in WORD_MATCH_WEIGHTS:
        reordered = {split: reorder(hits[split], [prior + weight * match for prior, match
                                                  in zip(priors[split], matches[split])]) for split in splits}
        candidates.append(scored_baseline(pipeline, f"{form}, reordered by sight + {weight:g} x word match "
                                                    f"(weight fitted on val)", splits, reordered))
    return best_fixed(candidates)


def scored_baseline(pipeline: LocalPipeline, name: str, splits: dict[str, list[Question]],
                    hits: dict[str, list[list[Hit]]]) -> FixedBaseline:
    """The top k of `hits` for every k of `K_CHOICES`, on val and test."""
    scored = {split: records_by_k(pipeline, questions, hits[split]) for split, questions in splits.items()}
    return FixedBaseline(name, mean_reward_by_k(scored["val"]), mean_reward_by_k(scored["test"]),
                         kinds_by_k(scored["test"]))


def sight_reordered(pipeline: LocalPipeline, hits: list[list[Hit]], sights: list[str]) -> list[list[Hit]]:
    """Each row by retrieval score + cos(document text, its question's `sight_descriptions` entry), both embedded
    by the reranker's backbone: one fixed weight, nothing fitted."""
    return reorder(hits, sight_scores(pipeline, hits, sights))


def sight_scores(pipeline: LocalPipeline, hits: list[list[Hit]], sights: list[str]) -> list[np.ndarray]:
    """Per row, the untrained reranker's prior of each hit: retrieval score + cos(document text, sight)."""
    encoder = pipeline.reranker.encoder
    scores = []
    for row, sight in zip(hits, encoder.encode_texts(sights)):
        texts = encoder.encode_texts([hit.text for hit in row]) if row else np.zeros((0, len(sight)))
        scores.append(np.array([hit.score for hit in row]) + texts @ sight)
    return scores


def visual_readings(pipeline: LocalPipeline, questions: list[Question]) -> list[dict[str, str]]:
    """What the reranker's visual reader reads in each question image."""
    readings = []
    for start in range(0, len(questions), BATCH):
        readings.extend(pipeline.reranker.visual_reader.read([q.image for q in questions[start:start + BATCH]]))
    return readings


def word_match_scores(pipeline: LocalPipeline, hits: list[list[Hit]],
                      readings: list[dict[str, str]]) -> list[np.ndarray]:
    """Per row, each hit's word match (`mmrag.models.word_match`) summed over the attributes."""
    matcher = pipeline.reranker.word_matcher
    return [matcher.match([reading], [[hit.text for hit in row]], len(row))[0].sum(dim=-1).numpy()
            for row, reading in zip(hits, readings)]


def reorder(hits: list[list[Hit]], scores: list[np.ndarray]) -> list[list[Hit]]:
    """Each row by descending score (ties in retrieval order)."""
    return [[row[j] for j in np.argsort(-score, kind="stable")] for row, score in zip(hits, scores)]


def fixed_at(baseline: FixedBaseline, k: int, name: str) -> FixedBaseline:
    """`baseline` with its k fixed (no choice left to val)."""
    return FixedBaseline(name, {k: baseline.val_by_k[k]}, {k: baseline.test_by_k[k]},
                         {k: baseline.test_kinds_by_k[k]})


def oracle_records(pipeline: LocalPipeline, questions: list[Question]) -> dict[int, list[dict]]:
    """Records with exactly the gold documents as evidence, under k = -1 ("all the gold ones")."""
    gold = gold_doc_hits(pipeline.cfg.data.dir, {d for q in questions for d in q.gold_doc_ids})
    hits = [[gold[d] for d in q.gold_doc_ids] for q in questions]
    longest = max((len(row) for row in hits), default=0)
    return {-1: records_by_k(pipeline, questions, hits, ks=(longest,))[longest]}
