"""Fixed pipelines a practitioner builds with no training, each with its number of documents chosen on val.

Every baseline is the frozen retriever and generator behind a fixed query and a fixed
selection: the top k retrieved documents in retrieval order, k from `K_CHOICES` (k = 0 is
never retrieving). The query forms:

  question           the question alone
  caption            the untrained translator's response (for the zoo: a description of the picture)
  caption+question   that response followed by the question, lower-cased
  image              the question image itself, through the encoder's image tower, against the KB index

Each question is translated and retrieved once per form; only the generator and the
reward run once per k. `choose_k` picks k on the val split's mean reward alone, and the
test split is then read at that k (`FixedBaseline`): nothing about a test question can move
the choice. `oracle` hands the generator exactly the gold documents. Nothing here depends on
how a world words its texts: it reads questions, the KB index and the gold ids only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mmrag.data.dataset import Question
from mmrag.evaluation.settings import gold_doc_hits
from mmrag.models.translator import question_in_query
from mmrag.retrieval.hit import Hit
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable

K_CHOICES = (0, 1, 2, 3, 5)
"""Documents handed to the generator by a fixed pipeline (top k in retrieval order)."""
QUERY_FORMS = ("question", "caption", "caption+question", "image")
BATCH = 32


@dataclass(frozen=True)
class FixedBaseline:
    """One fixed pipeline: the k chosen on val, and the val and test mean reward at every k."""

    name: str
    val_by_k: dict[int, float]
    test_by_k: dict[int, float]

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
                "val_by_k": self.val_by_k, "test_by_k": self.test_by_k}


def choose_k(val_by_k: dict[int, float]) -> int:
    """The k with the highest val reward; on a tie the smaller k (fewer documents to read)."""
    if not val_by_k:
        raise ValueError("choose_k: no k was evaluated on val")
    return min(val_by_k, key=lambda k: (-val_by_k[k], k))


def best_fixed(baselines: Sequence[FixedBaseline]) -> FixedBaseline:
    """The baseline with the best val reward (at its chosen k): the one a practitioner would ship."""
    return max(baselines, key=lambda b: b.val_reward)


def mean_reward_by_k(pipeline: LocalPipeline, questions: list[Question], hits: list[list[Hit]],
                     ks: Sequence[int] = K_CHOICES) -> dict[int, float]:
    """Mean reward when the generator reads the top k of each question's `hits`, for every k."""
    rewards: dict[int, list[float]] = {k: [] for k in ks}
    for start in range(0, len(questions), BATCH):
        batch, batch_hits = questions[start:start + BATCH], hits[start:start + BATCH]
        table, rows = QuestionTable.of(batch), list(range(len(batch)))
        for k in ks:
            answers = pipeline.answer(table, rows, [[hit.text for hit in row[:k]] for row in batch_hits])
            rewards[k].extend(pipeline.score(table, rows, answers))
    return {k: statistics.fmean(values) for k, values in rewards.items()}


def captions(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    """The untrained translator's greedy response to each question (its query without the template)."""
    responses = []
    for start in range(0, len(questions), BATCH):
        batch = questions[start:start + BATCH]
        queries = pipeline.translate_greedy(QuestionTable.of(batch))
        responses.extend(pipeline.translator.responses([q.question for q in batch], queries))
    return responses


def query_texts(form: str, questions: list[Question], responses: list[str]) -> list[str]:
    """The text query of a form (not `image`), one per question."""
    forms: dict[str, Callable[[Question, str], str]] = {
        "question": lambda q, caption: q.question,
        "caption": lambda q, caption: caption,
        "caption+question": lambda q, caption: f"{caption} {question_in_query(q.question)}",
    }
    if form not in forms:
        raise ValueError(f"query form {form!r}: expected one of {sorted(forms)}")
    return [forms[form](q, caption) for q, caption in zip(questions, responses)]


def retrieve(pipeline: LocalPipeline, form: str, questions: list[Question], responses: list[str]) -> list[list[Hit]]:
    """The top-K documents (`index.top_k`) of each question's query of this form."""
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


def fixed_baselines(pipeline: LocalPipeline, val: list[Question], test: list[Question]) -> list[FixedBaseline]:
    """Every query form with k chosen on val, plus never- and always-retrieve, and the oracle."""
    splits = {"val": val, "test": test}
    responses = {split: captions(pipeline, questions) for split, questions in splits.items()}
    by_form = {}
    for form in QUERY_FORMS:
        by_form[form] = {split: mean_reward_by_k(pipeline, questions,
                                                 retrieve(pipeline, form, questions, responses[split]))
                         for split, questions in splits.items()}
    baselines = [FixedBaseline(form, scores["val"], scores["test"]) for form, scores in by_form.items()]
    shipped = best_fixed(baselines)
    every = max(K_CHOICES)
    oracle = {split: oracle_reward(pipeline, questions) for split, questions in splits.items()}
    return [*baselines,
            FixedBaseline("never-retrieve", {0: shipped.val_by_k[0]}, {0: shipped.test_by_k[0]}),
            FixedBaseline(f"always-retrieve ({shipped.name}, top {every})", {every: shipped.val_by_k[every]},
                          {every: shipped.test_by_k[every]}),
            FixedBaseline("oracle", {-1: oracle["val"]}, {-1: oracle["test"]})]


def oracle_reward(pipeline: LocalPipeline, questions: list[Question]) -> float:
    """Mean reward with exactly the gold documents as evidence (k = -1 marks "all the gold ones")."""
    gold = gold_doc_hits(pipeline.cfg.data.dir, {d for q in questions for d in q.gold_doc_ids})
    hits = [[gold[d] for d in q.gold_doc_ids] for q in questions]
    longest = max((len(row) for row in hits), default=0)
    return mean_reward_by_k(pipeline, questions, hits, ks=(longest,))[longest]
